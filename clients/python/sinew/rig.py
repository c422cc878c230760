"""Building a ``sinew.v1.Rig`` from numpy arrays.

Shapes (N vertices, T triangles, J joints):

* positions (N, 3) float, the rest (bind) pose; triangles (T, 3) int (optional: point sets);
* a :class:`Skeleton`: joint names, parents (-1 for a root; any order without cycles), rest
  transforms relative to the parent (rotations x,y,z,w + translations, or 4x4 matrices), and
  optional inverse bind matrices (J, 4, 4) or (J, 3, 4) mapping model space at bind time to each
  joint's frame (absent: the inverse of each joint's rest world transform);
* :class:`SkinWeights`: dense (N, J), a fixed count per vertex (N, K) joints + weights,
  (vertex, joint, weight) triplets or compressed rows;
* optional :class:`Cage` s for the cage methods (``cage-mvc``, ``cage-green``, ``supercages``):
  closed, outward-oriented triangle meshes around the character, positions (C, 3) and
  triangles (F, 3).

The server validates everything (index ranges, weights summing to 1, unit quaternions) and its
errors name the field and index, e.g. ``rig.weights.joints[7] (vertex 3): joint 99 is out of
range``; this module checks only array shapes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence

import numpy as np

from . import transforms
from ._proto import pb
from .errors import InvalidArgument

__all__ = ["Skeleton", "SkinWeights", "Cage", "build_rig"]


def _array(a, dtype, shape: tuple, name: str) -> np.ndarray:
    """`a` as a C-contiguous little-endian array of `dtype`; `shape` with -1 for a free size."""
    try:
        out = np.ascontiguousarray(np.asarray(a), dtype=np.dtype(dtype).newbyteorder("<"))
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{name}: {e}") from e
    if out.ndim != len(shape) or any(s not in (-1, o) for s, o in zip(shape, out.shape)):
        want = "(" + ", ".join("N" if s == -1 else str(s) for s in shape) + ")"
        raise InvalidArgument(f"{name}: shape {out.shape}; expected {want}")
    return out


def _at(index: tuple) -> str:
    """An array position as a message names it: [3] or [2, 1] (plain ints: numpy 2 writes its
    scalars as np.int64(3))."""
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


def _parents_checked(parents: np.ndarray, name: str) -> None:
    """Every parent index is -1 or a joint of the skeleton, and the parents have no cycle; the
    error names the first joint whose parent is out of range, or a joint on the first cycle."""
    j = len(parents)
    for k, parent in enumerate(parents):
        if not -1 <= parent < j:
            raise InvalidArgument(f"{name}[{k}]: {int(parent)}; expected -1 (a root) or a joint index < {j}")
    state = np.zeros(j, dtype=np.int8)  # 0 unseen, 1 on the path being followed, 2 leads to a root
    for start in range(j):
        path = []
        k = start
        while k >= 0 and state[k] == 0:
            state[k] = 1
            path.append(k)
            k = int(parents[k])
        if k >= 0 and state[k] == 1:  # back on this path: k is on a cycle
            raise InvalidArgument(f"{name}: a cycle through joint {k} (its parent {int(parents[k])})")
        state[path] = 2


def _indices(a, shape: tuple, name: str, lowest: int = 0, dtype=np.uint32) -> np.ndarray:
    """`a` as integer indices of `dtype` (uint32; int32 with lowest -1 for parents) like
    `_array`, refusing what a cast would change: an index below `lowest` (until 2026-12-03 -1
    became 4294967295), one beyond the type, a fractional one (1.7 became 1)."""
    try:
        raw = np.asarray(a)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{name}: {e}") from e
    if raw.size and raw.dtype.kind not in "iu":
        if raw.dtype.kind != "f":
            raise InvalidArgument(f"{name}: {raw.dtype} values; expected integer indices")
        bad = np.flatnonzero(~np.isfinite(raw) | (np.floor(raw) != raw))
        if bad.size:
            at = np.unravel_index(int(bad[0]), raw.shape)
            raise InvalidArgument(f"{name}{_at(at)}: {raw[at].item()!r} is not an integer index")
    if raw.size and raw.dtype.kind != "u":
        low = np.flatnonzero(raw.reshape(-1) < lowest)
        if low.size:
            at = np.unravel_index(int(low[0]), raw.shape)
            what = "is negative" if lowest == 0 else f"is below {lowest}"
            raise InvalidArgument(f"{name}{_at(at)}: {raw[at].item()} {what}; expected an index >= {lowest}")
    top = np.iinfo(dtype).max
    if raw.size and raw.max() > top:
        at = np.unravel_index(int(np.argmax(raw)), raw.shape)
        raise InvalidArgument(f"{name}{_at(at)}: {raw[at].item()} is beyond {top}")
    return _array(raw.astype(dtype) if raw.size else raw, dtype, shape, name)


@dataclass
class Skeleton:
    """Joints by index: names (unique), parents (-1: root), rest transforms relative to the parent
    (or to the model for a root), optional inverse bind matrices."""

    names: Sequence[str]
    parents: np.ndarray
    rest_rotations: np.ndarray  # (J, 4) x, y, z, w
    rest_translations: np.ndarray  # (J, 3)
    rest_scales: Optional[np.ndarray] = None  # (J,) uniform, > 0; None: 1
    inverse_binds: Optional[np.ndarray] = None  # (J, 4, 4) or (J, 3, 4)

    def __post_init__(self) -> None:
        self.names = [str(n) for n in self.names]
        j = len(self.names)
        self.parents = _indices(self.parents, (j,), "skeleton.parents", lowest=-1, dtype=np.int32)
        _parents_checked(self.parents, "skeleton.parents")
        self.rest_rotations = _array(self.rest_rotations, np.float64, (j, 4), "skeleton.rest_rotations")
        self.rest_translations = _array(self.rest_translations, np.float64, (j, 3), "skeleton.rest_translations")
        if self.rest_scales is not None:
            self.rest_scales = _array(self.rest_scales, np.float64, (j,), "skeleton.rest_scales")
        if self.inverse_binds is not None:
            ib = np.asarray(self.inverse_binds, dtype=np.float64)
            if ib.ndim != 3 or ib.shape[0] != j or ib.shape[1:] not in ((4, 4), (3, 4)):
                raise InvalidArgument(f"skeleton.inverse_binds: shape {ib.shape}; expected ({j}, 4, 4) or ({j}, 3, 4)")
            self.inverse_binds = ib

    def __len__(self) -> int:
        return len(self.names)

    @classmethod
    def from_matrices(cls, names: Sequence[str], parents: Sequence[int], rest_local: np.ndarray,
                      inverse_binds: Optional[np.ndarray] = None) -> "Skeleton":
        """From each joint's rest transform relative to its parent as a (J, 4, 4) matrix (rotation
        times a uniform scale, then a translation)."""
        rot, trans, scale = transforms.decompose(rest_local, "skeleton.rest_local")
        return cls(names, np.asarray(parents), rot, trans, None if np.allclose(scale, 1, atol=1e-6) else scale,
                   inverse_binds)

    @classmethod
    def from_world_matrices(cls, names: Sequence[str], parents: Sequence[int], rest_world: np.ndarray,
                            inverse_binds: Optional[np.ndarray] = None) -> "Skeleton":
        """From each joint's rest transform in model space (J, 4, 4); the local transforms are
        ``inverse(world[parent]) @ world[j]``."""
        world = np.asarray(rest_world, dtype=np.float64)
        p = _indices(parents, (-1,), "skeleton.parents", lowest=-1, dtype=np.int32)
        _parents_checked(p, "skeleton.parents")
        if world.shape != (len(p), 4, 4):
            raise InvalidArgument(f"skeleton.rest_world: shape {world.shape}; expected ({len(p)}, 4, 4)")
        local = world.copy()
        for j, parent in enumerate(p):
            if parent >= 0:
                local[j] = np.linalg.inv(world[parent]) @ world[j]
        return cls.from_matrices(names, p, local, inverse_binds)

    def world_matrices(self) -> np.ndarray:
        """Each joint's rest transform in model space, (J, 4, 4) (parents in any order)."""
        local = transforms.compose(self.rest_rotations, self.rest_translations, self.rest_scales)
        world = np.full_like(local, np.nan)
        done = np.zeros(len(self), dtype=bool)
        for _ in range(len(self) + 1):
            for j, parent in enumerate(self.parents):
                if not done[j] and (parent < 0 or done[parent]):
                    world[j] = local[j] if parent < 0 else world[parent] @ local[j]
                    done[j] = True
            if done.all():
                break
        if not done.all():  # parents changed since construction
            _parents_checked(np.asarray(self.parents), "skeleton.parents")
            raise InvalidArgument("skeleton.parents: not a forest")  # not reached: the check names why
        return world


@dataclass
class SkinWeights:
    """Sparse skinning weights in compressed rows (vertex v's influences are entries
    ``offsets[v] .. offsets[v+1]-1``), or ``influences_per_vertex`` entries per vertex when
    `offsets` is None."""

    joints: np.ndarray
    weights: np.ndarray
    offsets: Optional[np.ndarray] = None
    influences_per_vertex: int = 0

    def __post_init__(self) -> None:
        # Made directly too, not only by the constructors below: a joint of -1 or 1.5 is refused
        # here rather than cast to 4294967295 or 1.
        self.joints = _indices(self.joints, (-1,), "weights.joints")
        self.weights = _array(self.weights, np.float32, (len(self.joints),), "weights.weights")
        if self.offsets is not None:
            self.offsets = _indices(self.offsets, (-1,), "weights.offsets")

    @classmethod
    def csr(cls, offsets, joints, weights) -> "SkinWeights":
        """Compressed rows: offsets (N + 1,), joints and weights (E,)."""
        j = _indices(joints, (-1,), "weights.joints")
        w = _array(weights, np.float32, (len(j),), "weights.weights")
        return cls(j, w, _indices(offsets, (-1,), "weights.offsets"))

    @classmethod
    def fixed(cls, joints, weights) -> "SkinWeights":
        """K influences per vertex: joints and weights (N, K)."""
        j = _indices(joints, (-1, -1), "weights.joints")
        w = _array(weights, np.float32, j.shape, "weights.weights")
        return cls(j.ravel(), w.ravel(), None, j.shape[1])

    @classmethod
    def dense(cls, weights, threshold: float = 0.0) -> "SkinWeights":
        """A dense (N, J) matrix; entries at or below `threshold` are dropped."""
        w = _array(weights, np.float32, (-1, -1), "weights")
        keep = w > threshold
        counts = keep.sum(axis=1)
        offsets = np.zeros(len(w) + 1, dtype=np.uint32)
        np.cumsum(counts, out=offsets[1:])
        rows, cols = np.nonzero(keep)
        return cls(cols.astype(np.uint32), w[rows, cols], offsets)

    @classmethod
    def triplets(cls, vertices, joints, weights, vertex_count: int) -> "SkinWeights":
        """(vertex, joint, weight) triplets in any order, as three (E,) arrays (an (E, 3) array of
        rows also works: ``SkinWeights.triplets(*t.T, vertex_count=N)``)."""
        v = _indices(vertices, (-1,), "weights.vertices")
        j = _indices(joints, (len(v),), "weights.joints")
        w = _array(weights, np.float32, (len(v),), "weights.weights")
        if len(v) and v.max() >= vertex_count:
            bad = int(np.nonzero(v >= vertex_count)[0][0])
            raise InvalidArgument(f"weights.vertices[{bad}]: vertex {int(v[bad])} is out of range ({vertex_count} vertices)")
        order = np.argsort(v, kind="stable")
        offsets = np.zeros(vertex_count + 1, dtype=np.uint32)
        np.cumsum(np.bincount(v, minlength=vertex_count), out=offsets[1:])
        return cls(j[order].astype(np.uint32), w[order], offsets)

    def to_dense(self, vertex_count: int, joint_count: int) -> np.ndarray:
        """The (N, J) float64 matrix (repeated entries add up)."""
        out = np.zeros((vertex_count, joint_count))
        if self.offsets is None:
            rows = np.repeat(np.arange(vertex_count), self.influences_per_vertex)
        else:
            rows = np.repeat(np.arange(vertex_count), np.diff(self.offsets.astype(np.int64)))
        np.add.at(out, (rows, self.joints.astype(np.int64)), self.weights)
        return out


@dataclass
class Cage:
    """A closed, outward-oriented triangle cage: rest positions (C, 3) and triangles (F, 3).
    Frames pose it by its index in ``build_rig``'s `cages` (:class:`~sinew.CagePose`)."""

    positions: np.ndarray
    triangles: np.ndarray
    name: str = ""

    def __post_init__(self) -> None:
        where = f"cages[{self.name!r}]" if self.name else "cages[]"
        self.positions = _array(self.positions, np.float32, (-1, 3), f"{where}.positions")
        self.triangles = _indices(self.triangles, (-1, 3), f"{where}.triangles")


def build_rig(positions, skeleton: Skeleton, weights: SkinWeights, triangles=None, *, normals=None,
              name: str = "", normalize_weights: bool = False,
              attributes: Optional[Dict[str, np.ndarray]] = None, cages: Sequence[Cage] = ()):
    """A ``sinew.v1.Rig`` message from numpy arrays (see the module's docstring for the shapes).

    `attributes`: named per-vertex float arrays, (N,) or (N, C) (e.g. ``{"dqs_blend": b}``).
    `cages`: :class:`Cage` s, by index (``CageParams.cage``, ``CagePose.cage``).
    """
    p = _array(positions, np.float32, (-1, 3), "positions")
    rig = pb.Rig(name=name, normalize_weights=normalize_weights)
    rig.mesh.positions = p.tobytes()
    if triangles is not None:
        rig.mesh.triangles = _indices(triangles, (-1, 3), "triangles").tobytes()
    if normals is not None:
        rig.mesh.normals = _array(normals, np.float32, (len(p), 3), "normals").tobytes()
    scales = skeleton.rest_scales
    for j, joint_name in enumerate(skeleton.names):
        joint = rig.skeleton.joints.add(name=joint_name, parent=int(skeleton.parents[j]))
        q, t = skeleton.rest_rotations[j], skeleton.rest_translations[j]
        joint.rest.rotation.x, joint.rest.rotation.y, joint.rest.rotation.z, joint.rest.rotation.w = (float(c) for c in q)
        joint.rest.translation.x, joint.rest.translation.y, joint.rest.translation.z = (float(c) for c in t)
        if scales is not None and float(scales[j]) != 1.0:
            joint.rest.scale = float(scales[j])
    if skeleton.inverse_binds is not None:
        rig.skeleton.inverse_bind_matrices = np.ascontiguousarray(
            skeleton.inverse_binds[:, :3, :4], dtype="<f4").tobytes()
    if weights.offsets is not None:
        if len(weights.offsets) != len(p) + 1:
            raise InvalidArgument(f"weights.offsets: {len(weights.offsets)} entries; expected vertex count + 1 = {len(p) + 1}")
        rig.weights.offsets = np.ascontiguousarray(weights.offsets, dtype="<u4").tobytes()
    else:
        rig.weights.influences_per_vertex = int(weights.influences_per_vertex)
    rig.weights.joints = np.ascontiguousarray(weights.joints, dtype="<u4").tobytes()
    rig.weights.weights = np.ascontiguousarray(weights.weights, dtype="<f4").tobytes()
    for attr_name, values in (attributes or {}).items():
        a = np.asarray(values, dtype="<f4")
        if a.ndim == 1:
            a = a[:, None]
        if a.ndim != 2 or a.shape[0] != len(p):
            raise InvalidArgument(f"attributes[{attr_name!r}]: shape {np.shape(values)}; expected ({len(p)},) or ({len(p)}, C)")
        rig.attributes.add(name=attr_name, components=a.shape[1], values=np.ascontiguousarray(a).tobytes())
    for c in cages:
        if not isinstance(c, Cage):
            raise InvalidArgument(f"cages: {type(c).__name__}; expected sinew.Cage")
        rig.cages.add(name=c.name, positions=c.positions.tobytes(), triangles=c.triangles.tobytes())
    return rig
