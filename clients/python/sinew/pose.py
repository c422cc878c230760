"""Poses and clips: what frames and batches send.

A :class:`Pose` holds one transform per joint of the rig, by joint index: unit quaternions
(x, y, z, w), translations and optional uniform scales, in ``"local"`` space (each joint relative
to its parent; roots to the model) or ``"world"`` space (each joint in model space). A
:class:`CagePose` poses one of the rig's cages (cage methods: ``cage-mvc``, ``cage-green``,
``supercages``). A :class:`FrameInput` is everything one frame sends, for frames that need more
than a pose. A :class:`Clip` holds per-joint keys that the server samples (``Session.deform_clip``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

from . import transforms
from ._proto import pb
from .errors import InvalidArgument

__all__ = ["Pose", "CagePose", "FrameInput", "Track", "Clip"]

_SPACES = {"local": pb.POSE_SPACE_LOCAL, "world": pb.POSE_SPACE_WORLD}
_CAGE_INPUTS = {"absolute": pb.CAGE_INPUT_ABSOLUTE, "offsets": pb.CAGE_INPUT_OFFSETS}


def _floats(a, shape: tuple, name: str) -> np.ndarray:
    try:
        out = np.ascontiguousarray(a, dtype="<f4")
    except (TypeError, ValueError) as e:  # strings, ragged lists: numpy's own error until 2026-12-03
        raise InvalidArgument(f"{name}: not an array of numbers ({e})") from None
    if out.shape != shape:
        raise InvalidArgument(f"{name}: shape {np.shape(a)}; expected {shape}")
    return out


@dataclass
class Pose:
    """One transform per joint: rotations (J, 4) x,y,z,w, translations (J, 3), optional scales (J,)."""

    rotations: np.ndarray
    translations: np.ndarray
    scales: Optional[np.ndarray] = None
    space: str = "local"

    def __post_init__(self) -> None:
        if self.space not in _SPACES:
            raise InvalidArgument(f"pose.space: {self.space!r}; expected 'local' or 'world'")
        r = _floats(self.rotations, np.shape(self.rotations), "pose.rotations")
        if r.ndim != 2 or r.shape[1] != 4:
            raise InvalidArgument(f"pose.rotations: shape {r.shape}; expected (J, 4) quaternions x, y, z, w")
        j = r.shape[0]
        self.rotations = _floats(r, (j, 4), "pose.rotations")
        self.translations = _floats(self.translations, (j, 3), "pose.translations")
        if self.scales is not None:
            self.scales = _floats(self.scales, (j,), "pose.scales")

    def __len__(self) -> int:
        return self.rotations.shape[0]

    @classmethod
    def from_matrices(cls, matrices: np.ndarray, space: str = "local") -> "Pose":
        """From (J, 4, 4) transforms (rotation times a uniform scale, then a translation)."""
        rot, trans, scale = transforms.decompose(matrices, "pose.matrices")
        return cls(rot, trans, None if np.allclose(scale, 1, atol=1e-6) else scale, space)

    @classmethod
    def rest(cls, skeleton) -> "Pose":
        """The skeleton's rest pose (local space)."""
        return cls(skeleton.rest_rotations, skeleton.rest_translations, skeleton.rest_scales, "local")

    def matrices(self) -> np.ndarray:
        """(J, 4, 4) float64 matrices of the transforms (in this pose's space)."""
        return transforms.compose(self.rotations, self.translations, self.scales)

    def to_proto(self, out=None):
        """Fills (or returns a new) ``sinew.v1.Pose``."""
        out = pb.Pose() if out is None else out
        out.space = _SPACES[self.space]
        out.rotations = self.rotations.tobytes()
        out.translations = self.translations.tobytes()
        if self.scales is not None:
            out.scales = self.scales.tobytes()
        return out


@dataclass
class CagePose:
    """Positions of one of the rig's cages (``Rig.cages[cage]``), (C, 3) for its C vertices:
    ``"absolute"`` positions, or ``"offsets"`` added to the rest cage. Cage methods (``cage-mvc``,
    ``cage-green``) deform the mesh by the posed cage; for ``supercages`` a frame's cages are its
    rest cage C and :attr:`FrameInput.posed_cage` edits the current-pose cage C'."""

    positions: np.ndarray
    cage: int = 0
    input: str = "absolute"

    def __post_init__(self) -> None:
        if self.input not in _CAGE_INPUTS:
            raise InvalidArgument(f"cages.input: {self.input!r}; expected 'absolute' or 'offsets'")
        p = np.asarray(self.positions)
        if p.ndim != 2 or p.shape[1] != 3:
            raise InvalidArgument(f"cages[{self.cage}].positions: shape {p.shape}; expected (C, 3)")
        self.positions = _floats(p, p.shape, f"cages[{self.cage}].positions")
        if int(self.cage) < 0:
            raise InvalidArgument(f"cages.cage: {self.cage}; expected a cage index >= 0")

    def to_proto(self, out=None):
        """Fills (or returns a new) ``sinew.v1.CagePose``."""
        out = pb.CagePose() if out is None else out
        out.cage = int(self.cage)
        out.input = _CAGE_INPUTS[self.input]
        out.positions = self.positions.tobytes()
        return out


@dataclass
class FrameInput:
    """What one frame sends: a skeleton `pose`, posed `cages` (cage methods; what
    ``MethodInfo.inputs`` lists for a method says which it reads), for ``supercages`` an edit of
    the current-pose cage (`posed_cage`), `outputs` asked for besides the positions (names of
    ``sinew.v1.FrameOutputs``: ``{"joints": True, "posed_cage": True, "vertex_states": True,
    "normals": True, "normal_encoding": "octahedral", "quality": True}``), `reset` (stateful
    methods start again), `key_frame` (delta encoding) and `time_step` (methods with dynamics)."""

    pose: Optional[Any] = None  # a Pose or a sinew.v1.Pose
    cages: Sequence[CagePose] = ()
    posed_cage: Optional[CagePose] = None
    outputs: Optional[Mapping[str, Any]] = None
    reset: bool = False
    key_frame: bool = False
    time_step: float = 0.0


@dataclass
class Track:
    """Keys of one joint's local transform; times in seconds, strictly increasing per channel. An
    empty channel keeps the joint's rest value for that part."""

    joint: int
    rotation_times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rotations: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))  # x, y, z, w
    translation_times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    translations: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    scale_times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scales: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_proto(self, out) -> None:
        where = f"clip.tracks[joint {self.joint}]"
        rt = np.ascontiguousarray(self.rotation_times, dtype="<f8").ravel()
        tt = np.ascontiguousarray(self.translation_times, dtype="<f8").ravel()
        st = np.ascontiguousarray(self.scale_times, dtype="<f8").ravel()
        if not (isinstance(self.joint, (int, np.integer)) and 0 <= int(self.joint) <= 0xFFFFFFFF):
            raise InvalidArgument(f"{where}.joint: {self.joint!r}; expected a joint index >= 0")
        out.joint = int(self.joint)
        out.rotation_times = rt.tobytes()
        out.rotations = _floats(self.rotations, (len(rt), 4), f"{where}.rotations").tobytes()
        out.translation_times = tt.tobytes()
        out.translations = _floats(self.translations, (len(tt), 3), f"{where}.translations").tobytes()
        out.scale_times = st.tobytes()
        out.scales = _floats(self.scales, (len(st),), f"{where}.scales").tobytes()


@dataclass
class Clip:
    """An animation clip: per-joint tracks (at most one per joint) over `duration` seconds;
    interpolated by the server (linear, rotations by shortest-arc slerp)."""

    duration: float
    tracks: List[Track] = field(default_factory=list)
    name: str = ""

    def to_proto(self):
        out = pb.Clip(name=self.name, duration_seconds=float(self.duration))
        for t in self.tracks:
            t.to_proto(out.tracks.add())
        return out
