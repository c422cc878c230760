"""What the add-on does with Blender data, apart from its user interface: a scene's armature and
skinned mesh -> a Sinew rig, the armature's pose on a frame -> a Sinew pose, the returned
positions -> the mesh (a shape key, or a .pc2 point cache read by a Mesh Cache modifier).

Spaces. Blender's Armature modifier deforms a vertex p of the mesh object as

    p' = premat^-1 * sum_b w_b * P_b * B_b^-1 * premat * p,   premat = armature.matrix_world^-1 * mesh.matrix_world

with P_b the pose bone's matrix and B_b the bone's rest matrix, both in armature space
(``pose_bone.matrix``, ``bone.matrix_local``), and the weights of the vertex groups named after
deforming bones divided by their sum. The rig is uploaded in armature space: rest positions
premat * p (premat at upload time), joints = bones with their parents, rest transforms from
``bone.matrix_local``, inverse binds B_b^-1, weights normalized by the server. Each frame sends the
P_b in world (= armature) space and maps the result back with premat^-1 on this side, so
non-uniform object scales (common in imported files) stay out of the joint transforms. If the mesh
moves relative to the armature after upload (premat changes to premat'), the poses are corrected by
D = premat' premat^-1 (P_b B_b^-1 D B_b), which keeps Blender's formula exactly. Vertices with no
deforming weight (Blender leaves them in place) follow an extra static joint posed by D.

Shape keys. Blender mixes a mesh's shape keys before its modifiers, so p above is the mix: the rest
positions uploaded are the mesh evaluated up to, not including, the Armature modifier (the keys
at their values at upload). The add-on's own key "Sinew" (relative to the reference key, value 1)
adds its data minus the reference key's to that mix, so it is written as the result minus what
the other keys add (RigExport.key_offsets): the mesh then shows the result alone, and with the
key muted (a saved file) the mix the Armature modifier deforms. The keys' state at upload
(shape_key_state) is kept: where it changes (a value animated, driven or moved), the rest shape
uploaded is no longer the modifier's input, and frames are refused until the rig is uploaded again.
"""
from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

STATIC_JOINT = "__sinew_static__"
# Vertex groups with these names are uploaded as the per-vertex rig attributes of the same names
# (weights in [0, 1], 0 off the group), which methods read: "dqs_blend" (blend: 0 LBS ... 1 DQS)
# and "pbs_jiggle" (pbs with jiggle: 0 skinned ... 1 free).
ATTRIBUTE_GROUPS = ("dqs_blend", "pbs_jiggle")
SHAPE_KEY = "Sinew"
# On a mesh whose Basis the add-on made (it had no shape keys), so that removing Sinew's key
# removes that Basis and never the user's own.
MADE_BASIS = "sinew_made_basis"
MESH_CACHE = "Sinew cache"


class BridgeError(Exception):
    """A scene the add-on cannot drive, with what to change."""


def ensure_client(extra_paths: Sequence[str] = ()) -> object:
    """Imports the Python client ``sinew``: already importable, or vendored beside this add-on
    (``vendor/``, what the build's zip holds), or from `extra_paths` and ``$SINEW_PYTHONPATH``."""
    try:
        import sinew  # noqa: F401
        return sinew
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "vendor")] + [p for p in extra_paths if p]
    candidates += [p for p in os.environ.get("SINEW_PYTHONPATH", "").split(os.pathsep) if p]
    for path in candidates:
        if os.path.isdir(path) and path not in sys.path:
            sys.path.append(path)
    try:
        import sinew  # noqa: F811
        return sinew
    except ImportError as e:
        if e.name not in (None, "sinew") and not str(e.name).startswith("sinew."):
            # Found, but a package it needs is not in this Blender's Python (blender.org's builds
            # have no grpcio): that is what to install, not the client.
            raise BridgeError(f"the Sinew Python client needs the Python package {e.name!r}, which this Blender's "
                              f"Python ({sys.executable}) lacks: install grpcio, protobuf and numpy into it "
                              f"(\"{sys.executable}\" -m pip install grpcio protobuf numpy)") from e
        raise BridgeError("the Sinew Python client (package 'sinew') is not found: set its folder in the add-on's "
                          "preferences or $SINEW_PYTHONPATH (build/clients/python/dist), or install the add-on "
                          f"zip the build makes ({e})") from e


def matrix(m) -> np.ndarray:
    """A mathutils Matrix -> a float64 numpy array."""
    return np.array([list(row) for row in m], dtype=np.float64)


def armature_modifier(mesh_obj, armature_obj=None):
    """The mesh's first Armature modifier (driven by `armature_obj` when given), or None."""
    for m in mesh_obj.modifiers:
        if m.type == "ARMATURE" and m.object is not None and (armature_obj is None or m.object == armature_obj):
            return m
    return None


@dataclass
class RigExport:
    """A rig made from Blender objects, and what is needed to pose it and map positions back."""

    mesh_name: str
    armature_name: str
    names: List[str]                 # joints: the bones, then the static joint if any
    parents: np.ndarray
    rest_world: np.ndarray           # (J, 4, 4) armature space
    positions: np.ndarray            # (N, 3) armature space (premat0 applied)
    triangles: np.ndarray            # (T, 3)
    vertices: np.ndarray             # weight triplets: vertex, joint, weight
    joints: np.ndarray
    weights: np.ndarray
    premat0: np.ndarray              # premat at export
    has_static: bool = False
    warnings: List[str] = field(default_factory=list)
    attributes: Dict[str, np.ndarray] = field(default_factory=dict)  # from ATTRIBUTE_GROUPS
    # What the mesh's shape keys other than Sinew's add to the reference key at upload, (N, 3) mesh
    # space (None: nothing), and their state then (shape_key_state).
    key_offsets: Optional[np.ndarray] = None
    shape_keys: Tuple = ()
    # Blender's down (world −Z) in armature space, the frame the rig is uploaded in: where pbs's
    # gravity pulls (its default, the rig's −y, is sideways in a scene built in Blender).
    down: Tuple[float, float, float] = (0.0, 0.0, -1.0)

    @property
    def bone_count(self) -> int:
        return len(self.names) - (1 if self.has_static else 0)

    def rig(self, sinew, name: str = ""):
        """The ``sinew.v1.Rig`` message."""
        skeleton = sinew.Skeleton.from_world_matrices(self.names, self.parents, self.rest_world,
                                                      np.linalg.inv(self.rest_world))
        weights = sinew.SkinWeights.triplets(self.vertices, self.joints, self.weights, len(self.positions))
        return sinew.build_rig(self.positions, skeleton, weights, self.triangles, name=name or self.mesh_name,
                               normalize_weights=True, attributes=self.attributes)


def export_rig(mesh_obj, armature_obj, depsgraph) -> RigExport:
    """The rig of a mesh deformed by an armature (see the module's docstring)."""
    if mesh_obj is None or mesh_obj.type != "MESH":
        raise BridgeError("choose a mesh object")
    mod = armature_modifier(mesh_obj, armature_obj)
    if mod is None:
        raise BridgeError(f"mesh {mesh_obj.name!r} has no Armature modifier" +
                          (f" driven by {armature_obj.name!r}" if armature_obj is not None else ""))
    armature_obj = mod.object
    warnings: List[str] = []
    for m in mesh_obj.modifiers:
        if m == mod:
            break
        if m.show_viewport and m.name != MESH_CACHE:
            raise BridgeError(f"modifier {m.name!r} comes before the Armature modifier; move the Armature modifier "
                              "to the top (Sinew replaces it with the rest mesh as input)")
    if not mod.use_vertex_groups:
        raise BridgeError(f"{mod.name}: Sinew skins by vertex groups (turn 'Vertex Groups' on)")
    if mod.use_bone_envelopes:
        warnings.append(f"{mod.name}: bone envelopes are ignored (Sinew skins by vertex groups only)")
    if mod.vertex_group:
        warnings.append(f"{mod.name}: the modifier's vertex group mask is ignored")
    arm_eval = armature_obj.evaluated_get(depsgraph)
    mesh_eval = mesh_obj.evaluated_get(depsgraph)
    bones = list(armature_obj.data.bones)
    names = [b.name for b in bones]
    index = {n: i for i, n in enumerate(names)}
    parents = np.array([index[b.parent.name] if b.parent else -1 for b in bones], dtype=np.int64)
    rest_world = np.array([matrix(b.matrix_local) for b in bones]).reshape(len(bones), 4, 4)
    for b in bones:
        if b.use_deform and b.bbone_segments > 1:
            warnings.append(f"bone {b.name!r}: its {b.bbone_segments} B-Bone segments are ignored (one transform per bone)")
    premat0 = np.linalg.inv(matrix(arm_eval.matrix_world)) @ matrix(mesh_eval.matrix_world)
    down = np.linalg.solve(matrix(arm_eval.matrix_world)[:3, :3], np.array([0.0, 0.0, -1.0]))
    down /= np.linalg.norm(down)

    mesh = mesh_obj.data
    n = len(mesh.vertices)
    problem = shape_key_problem(mesh_obj)
    if problem:
        raise BridgeError(problem)
    shape_keys = shape_key_state(mesh_obj)
    co, key_offsets = coordinates(mesh.vertices), None
    if mesh.shape_keys is not None:
        # The keys' mix, from the reference key's coordinates. Until 2026-12-07 the mesh's own were
        # uploaded: the other keys then added their offsets in rest space after the skinning (a
        # cube's key of +1 in z was 1.0 off with its bone turned 90 degrees), and bakes, which
        # overwrite the mix, lost them.
        co = armature_input(mesh_obj, depsgraph)
        if shape_keys:
            key_offsets = (co - coordinates(mesh.shape_keys.reference_key.data)).astype(np.float32)
    positions = co @ premat0[:3, :3].T + premat0[:3, 3]
    mesh.calc_loop_triangles()
    tri = np.empty(3 * len(mesh.loop_triangles), dtype=np.int64)
    mesh.loop_triangles.foreach_get("vertices", tri)

    # Vertex groups named after deforming bones; those named after rig attributes.
    group_joint: Dict[int, int] = {}
    group_attribute: Dict[int, str] = {}
    for g in mesh_obj.vertex_groups:
        j = index.get(g.name)
        if j is not None and bones[j].use_deform:
            group_joint[g.index] = j
        elif g.name in ATTRIBUTE_GROUPS:
            group_attribute[g.index] = g.name
    attributes = {name: np.zeros(n, dtype=np.float32) for name in group_attribute.values()}
    vs: List[int] = []
    js: List[int] = []
    ws: List[float] = []
    static: List[int] = []
    for v in mesh.vertices:
        total = 0.0
        for g in v.groups:
            a = group_attribute.get(g.group)
            if a is not None:
                attributes[a][v.index] = g.weight
            j = group_joint.get(g.group)
            if j is not None and g.weight > 0:
                vs.append(v.index)
                js.append(j)
                ws.append(g.weight)
                total += g.weight
        if total <= 1e-4:  # Blender's threshold: such a vertex is left where it is
            if total > 0:
                while vs and vs[-1] == v.index:
                    vs.pop(), js.pop(), ws.pop()
            static.append(v.index)
    has_static = bool(static)
    if has_static:
        names = names + [STATIC_JOINT]
        parents = np.append(parents, -1)
        rest_world = np.concatenate([rest_world, np.eye(4)[None]])
        vs += static
        js += [len(names) - 1] * len(static)
        ws += [1.0] * len(static)
        warnings.append(f"{len(static)} vertices have no deforming weight: they stay in place")
    return RigExport(mesh_obj.name, armature_obj.name, names, parents, rest_world, positions.astype(np.float32),
                     tri.reshape(-1, 3), np.array(vs), np.array(js), np.array(ws, dtype=np.float32), premat0,
                     has_static, warnings, attributes, key_offsets, shape_keys, tuple(float(c) for c in down))


def coordinates(points) -> np.ndarray:
    """The `co` of a collection of points (a mesh's vertices, a shape key's data), (N, 3) float64."""
    co = np.empty(3 * len(points), dtype=np.float64)
    points.foreach_get("co", co)
    return co.reshape(-1, 3)


def shape_key_problem(mesh_obj) -> str:
    """Why the add-on's key cannot show Sinew's positions on this mesh ("" where it can): absolute
    keys (the mix follows Evaluation Time, not key values) or a pinned key (the mesh shows the
    active key alone)."""
    keys = mesh_obj.data.shape_keys
    if mesh_obj.show_only_shape_key:
        return (f"mesh {mesh_obj.name!r}: Shape Key Lock (the pin in Shape Keys) is on, so the mesh shows one key "
                "alone, not Sinew's: turn it off")
    if keys is not None and not keys.use_relative:
        return (f"mesh {mesh_obj.name!r}: its shape keys are absolute (Relative off): Sinew's key needs relative "
                "shape keys")
    return ""


def shape_key_state(mesh_obj) -> Tuple:
    """What the mix of a mesh's shape keys, Sinew's aside, depends on: each key's name, value, mute,
    relative key and vertex group, the reference key's aside (Blender mixes it in whole). Empty
    where they add nothing (no keys, or every one muted or at 0), so that a mesh given its first
    keys by the add-on (a Basis and Sinew's) keeps its state."""
    keys = mesh_obj.data.shape_keys
    if keys is None:
        return ()
    reference = keys.reference_key
    state = tuple((kb.name, kb.value, kb.mute, kb.relative_key.name, kb.vertex_group)
                  for kb in keys.key_blocks if kb != reference and kb.name != SHAPE_KEY)
    return state if any(not mute and value != 0 for _, value, mute, _, _ in state) else ()


def shape_key_change(before: Tuple, after: Tuple) -> str:
    """The first difference between two shape_key_state()s, in words."""
    was = {k[0]: k for k in before}
    now = {k[0]: k for k in after}
    for name in list(was) + [n for n in now if n not in was]:
        a, b = was.get(name), now.get(name)
        if a == b:
            continue
        if a is None or b is None:
            return f"shape key {name!r} {'added' if a is None else 'removed'}"
        for i, what in ((1, "value"), (2, "mute"), (3, "relative key"), (4, "vertex group")):
            if a[i] != b[i]:
                return f"shape key {name!r}: {what} {a[i]!r} -> {b[i]!r}"
    return "shape keys changed"


def armature_input(mesh_obj, depsgraph) -> np.ndarray:
    """The positions the mesh's Armature modifier deforms, (N, 3) float64 in mesh space: the shape
    keys' mix (export_rig has checked that no modifier before it is on). Evaluated by Blender with
    the modifiers (and Sinew's key, should one be left) off for the moment, then put back."""
    keys = mesh_obj.data.shape_keys
    sinew_key = keys.key_blocks.get(SHAPE_KEY) if keys is not None else None
    shown = [(m, m.show_viewport) for m in mesh_obj.modifiers]
    muted = sinew_key.mute if sinew_key is not None else None
    try:
        for m, _ in shown:
            m.show_viewport = False
        if sinew_key is not None:
            sinew_key.mute = True
        depsgraph.update()
        evaluated = mesh_obj.evaluated_get(depsgraph)
        mesh = evaluated.to_mesh()
        try:
            if len(mesh.vertices) != len(mesh_obj.data.vertices):
                raise BridgeError(f"mesh {mesh_obj.name!r}: its shape keys give {len(mesh.vertices)} vertices, "
                                  f"not {len(mesh_obj.data.vertices)}")
            return coordinates(mesh.vertices)
        finally:
            evaluated.to_mesh_clear()
    finally:
        for m, on in shown:
            m.show_viewport = on
        if sinew_key is not None:
            sinew_key.mute = muted
        depsgraph.update()


def pose_matrices(export: RigExport, depsgraph) -> Tuple[np.ndarray, np.ndarray]:
    """The joints' transforms in armature space for the depsgraph's current frame, (J, 4, 4), and
    premat now."""
    import bpy  # only inside Blender
    arm = bpy.data.objects[export.armature_name].evaluated_get(depsgraph)
    mesh = bpy.data.objects[export.mesh_name].evaluated_get(depsgraph)
    premat = np.linalg.inv(matrix(arm.matrix_world)) @ matrix(mesh.matrix_world)
    bones = export.names[:export.bone_count]
    world = np.array([matrix(arm.pose.bones[name].matrix) for name in bones]).reshape(len(bones), 4, 4)
    # Bones no vertex follows (controls, helpers: not deforming, or without weights) may carry what
    # Sinew's joints cannot (a stretch, a control scaled to 0 to hide it), and Blender's modifier
    # ignores them: they are sent as the nearest rotation with a uniform scale, where they are.
    # Until 2026-12-07 such a bone stopped every frame ("not a rotation with a uniform scale").
    weightless = np.setdiff1d(np.arange(len(bones)), export.joints)
    if weightless.size:
        world[weightless] = similarity(world[weightless])
    d = premat @ np.linalg.inv(export.premat0)
    if not np.allclose(d, np.eye(4), atol=1e-9):
        rest = export.rest_world[:len(bones)]
        world = world @ np.linalg.inv(rest) @ d @ rest
    if export.has_static:
        world = np.concatenate([world, d[None]])
    return world, premat


def similarity(m: np.ndarray) -> np.ndarray:
    """Affine matrices (K, 4, 4) made rotations with a uniform scale, translations kept: the
    rotation nearest the linear part (polar decomposition; a mirror's flipped back), scaled by the
    cube root of its volume change (1 where it collapses to nothing)."""
    out = m.copy()
    u, sv, vt = np.linalg.svd(m[:, :3, :3])
    flip = np.linalg.det(u @ vt) < 0
    u[flip, :, 2] *= -1
    scale = np.cbrt(np.abs(np.linalg.det(m[:, :3, :3])))
    scale[~(scale > 1e-6 * np.maximum(sv[:, 0], 1e-30))] = 1.0
    out[:, :3, :3] = (u @ vt) * scale[:, None, None]
    out[:, 3, :] = (0.0, 0.0, 0.0, 1.0)
    return out


def to_mesh_space(positions: np.ndarray, premat: np.ndarray) -> np.ndarray:
    """Armature-space positions (N, 3) -> the mesh object's space."""
    inv = np.linalg.inv(premat)
    return (positions.astype(np.float64) @ inv[:3, :3].T + inv[:3, 3]).astype(np.float32)


def sinew_pose(sinew, export: RigExport, world: np.ndarray):
    """A ``sinew.Pose`` in world space; a bone whose pose is not a rotation with a uniform scale is
    named in the error."""
    try:
        return sinew.Pose.from_matrices(world, space="world")
    except sinew.InvalidArgument as e:
        msg = str(e.message)
        if msg.startswith("pose.matrices[") and "]" in msg:
            j = int(msg[len("pose.matrices["):msg.index("]")])
            msg = f"bone {export.names[j]!r}: {msg[msg.index(']') + 3:]}"
        raise BridgeError(msg + " (Sinew's joints take rotations with uniform scales)") from e


def shape_key(mesh_obj):
    """The add-on's shape key (made with a Basis if needed), value 1, relative to the reference key
    (what key_offsets are counted from)."""
    if mesh_obj.data.shape_keys is None:
        mesh_obj.shape_key_add(name="Basis", from_mix=False)
        mesh_obj.data[MADE_BASIS] = True  # removed with Sinew's key (remove_shape_key)
    keys = mesh_obj.data.shape_keys
    key = keys.key_blocks.get(SHAPE_KEY)
    if key is None:
        key = mesh_obj.shape_key_add(name=SHAPE_KEY, from_mix=False)
    key.relative_key = keys.reference_key
    key.vertex_group = ""
    key.slider_min, key.slider_max = 0.0, 1.0
    key.value = 1.0
    key.mute = False
    return key


def write_shape_key(mesh_obj, positions: np.ndarray, key_offsets: Optional[np.ndarray] = None) -> None:
    """Writes mesh-space positions (N, 3) into the add-on's shape key, less what the mesh's other
    shape keys add (`key_offsets`, RigExport's), so that the mesh shows the positions."""
    key = shape_key(mesh_obj)
    if key_offsets is not None:
        positions = positions - key_offsets
    key.data.foreach_set("co", np.ascontiguousarray(positions, dtype=np.float32).ravel())
    mesh_obj.data.update()


def remove_shape_key(mesh_obj) -> None:
    keys = mesh_obj.data.shape_keys
    if keys is not None and SHAPE_KEY in keys.key_blocks:
        mesh_obj.shape_key_remove(keys.key_blocks[SHAPE_KEY])
        keys = mesh_obj.data.shape_keys
        # The Basis goes too where the add-on made it (a mesh without keys), not the user's own
        # lone Basis (until 2026-12-07 removed with its animation data).
        made = mesh_obj.data.get(MADE_BASIS, False)
        if MADE_BASIS in mesh_obj.data:
            del mesh_obj.data[MADE_BASIS]
        if made and keys is not None and len(keys.key_blocks) == 1 and keys.key_blocks[0].name == "Basis":
            mesh_obj.shape_key_remove(keys.key_blocks[0])
            # A copy's keys (Shift+D: Blender 3.4 counts two users of them) outlive their last key
            # block, detached, and are saved so, without their mesh once it goes.
            import bpy
            left = [k for k in bpy.data.shape_keys if k.user == mesh_obj.data and not k.key_blocks]
            if mesh_obj.data.shape_keys is None and left:
                bpy.data.batch_remove(left)


class Pc2Writer:
    """Writes a .pc2 point cache frame by frame (a bake holds one frame in memory, not the clip:
    until 2026-12-03 a bake kept every frame, 1.2 GB for 1 000 frames of 100 000 vertices), to a
    temporary file that replaces `path` only when all `samples` frames were written (commit());
    leaving the `with` block otherwise removes it and keeps the file there was."""

    def __init__(self, path: str, samples: int, points: int, start_frame: float, sample_rate: float = 1.0):
        self.path, self.samples, self.points, self.written = path, samples, points, 0
        self.tmp = f"{path}.{os.getpid()}.tmp"
        self.f = open(self.tmp, "wb")
        self.f.write(b"POINTCACHE2\0" + struct.pack("<iiffi", 1, points, float(start_frame), float(sample_rate), samples))

    def append(self, frame: np.ndarray) -> None:
        frame = np.ascontiguousarray(frame, dtype="<f4")
        if frame.shape != (self.points, 3):
            raise BridgeError(f"{self.path}: frame {self.written} has shape {frame.shape}; the cache holds "
                              f"({self.points}, 3)")
        if self.written == self.samples:
            raise BridgeError(f"{self.path}: more than the {self.samples} frames announced")
        self.f.write(frame.tobytes())
        self.written += 1

    def commit(self) -> None:
        if self.written != self.samples:
            raise BridgeError(f"{self.path}: {self.written} of {self.samples} frames written")
        self.f.close()
        os.replace(self.tmp, self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if not self.f.closed:  # not committed: the file there was stays
            self.f.close()
            try:
                os.remove(self.tmp)
            except OSError:
                pass


def write_pc2(path: str, frames: np.ndarray, start_frame: float, sample_rate: float = 1.0) -> None:
    """A .pc2 point cache: "POINTCACHE2\\0", version 1, points, start frame, sample rate, samples,
    then float32 x,y,z per point per sample (little-endian), what Blender's Mesh Cache modifier reads."""
    frames = np.asarray(frames)
    with Pc2Writer(path, frames.shape[0], frames.shape[1], start_frame, sample_rate) as w:
        for frame in frames:
            w.append(frame)
        w.commit()


def read_pc2(path: str) -> Tuple[np.ndarray, float, float]:
    """Frames (samples, points, 3), start frame and sample rate of a .pc2 file."""
    with open(path, "rb") as f:
        head = f.read(32)
        if len(head) != 32 or head[:12] != b"POINTCACHE2\0":
            raise BridgeError(f"{path}: not a .pc2 file")
        _, points, start, rate, samples = struct.unpack("<iiffi", head[12:])
        data = np.frombuffer(f.read(), dtype="<f4")
    if data.size != samples * points * 3:
        raise BridgeError(f"{path}: {data.size} floats; the header says {samples} x {points} x 3")
    return data.reshape(samples, points, 3), start, rate


def mesh_cache_modifier(mesh_obj, path: str, start_frame: int, index: int):
    """A Mesh Cache modifier (PC2, replacing the positions, scene frames from `start_frame`) at
    stack position `index`."""
    mod = mesh_obj.modifiers.get(MESH_CACHE)
    if mod is None:
        mod = mesh_obj.modifiers.new(MESH_CACHE, "MESH_CACHE")
    mod.cache_format = "PC2"
    mod.filepath = path
    mod.deform_mode = "OVERWRITE"
    mod.play_mode = "SCENE"
    mod.time_mode = "FRAME"
    mod.frame_start = float(start_frame)
    mod.frame_scale = 1.0
    mod.interpolation = "LINEAR"
    mod.forward_axis = "POS_Y"
    mod.up_axis = "POS_Z"
    mod.flip_axis = set()
    mod.factor = 1.0
    current = list(mesh_obj.modifiers).index(mod)
    if current != index:
        import bpy
        with bpy.context.temp_override(object=mesh_obj):
            bpy.ops.object.modifier_move_to_index(modifier=mod.name, index=index)
    return mod
