"""Sinew for Blender: deforms an armature's skinned mesh through a Sinew server.

From a mesh with an Armature modifier, "Drive with Sinew" uploads the rig (the mesh in bind pose,
the bones as joints, weights from the vertex groups) and opens a session with the method, backend
and encoding chosen in the panel (3D Viewport > Sidebar > Sinew). Then on every frame change the
armature's pose is sent and the returned positions are written into a shape key "Sinew" (value 1),
while the Armature modifier is turned off. "Bake" sends every frame of the scene's range and writes
a .pc2 point cache that a Mesh Cache modifier plays back, without the server.

The Python client (package ``sinew``) comes vendored in the zip the build makes
(build/clients/blender/sinew_blender.zip), or from the folder in this add-on's preferences or
$SINEW_PYTHONPATH. Written for Blender 3.4 and later (tested: Debian bookworm's 3.4.1).
"""
from __future__ import annotations

import os
import time
import uuid
from typing import Dict, List, Optional, Tuple

import bpy
from bpy.app.handlers import persistent
from bpy.props import BoolProperty, EnumProperty, FloatProperty, IntProperty, PointerProperty, StringProperty

from . import bridge

bl_info = {
    "name": "Sinew deformation",
    "author": "Sinew",
    "version": (0, 1, 0),
    "blender": (3, 4, 0),
    "location": "3D Viewport > Sidebar > Sinew",
    "description": "Deform a skinned mesh through a Sinew server (LBS, DQS, implicit skinning, ...), "
                   "live on frame changes or baked to a point cache",
    "category": "Animation",
}

METHODS = [
    ("lbs", "LBS", "Linear blend skinning (what Blender's Armature modifier does)"),
    ("dqs", "DQS", "Dual quaternion skinning (Blender's 'Preserve Volume')"),
    ("blend", "LBS/DQS blend", "Per-vertex blend of LBS and DQS (parameter weight, or the rig's dqs_blend attribute)"),
    ("implicit", "Implicit skinning", "DQS corrected by implicit surfaces: contact and bulges at joints"),
    ("elastic-implicit", "Elastic implicit", "Implicit skinning tracked from frame to frame (stateful)"),
    ("swing-twist", "Swing/twist", "Elasticity-inspired joint deformers (Kavan & Sorkine)"),
    ("pbs", "Position-based", "Position-based skinning: LBS corrected by volume constraints"),
    ("custom", "Other", "Any method or pipeline by name, e.g. dqs+implicit"),
]


class LiveRig:
    """A mesh driven by a session, and what reopening it needs (the rig, the session's settings)."""

    def __init__(self, export: bridge.RigExport, client, session, rig, options: dict) -> None:
        self.export = export
        self.client = client
        self.session = session
        self.rig = rig
        self.options = options  # create_session's arguments
        # Which object is live: a name changes (a rename) and is taken (a copy renamed to it), and a
        # copy (Shift+D) carries the custom properties, LIVE_ID too. The object's address in
        # memory (as_pointer: a rename keeps it, a copy has its own) says which one it is while it
        # lives; an undo may remake it elsewhere, and then LIVE_ID does, where one object holds it.
        self.uid = uuid.uuid4().hex
        self.pointer = 0
        self.create_timeout: Optional[float] = None  # a reopening's create_session (None: none)
        self.frames = 0
        self.last_ms = 0.0
        self.error = ""
        self.scene_frame: Optional[int] = None  # the scene frame last sent
        self.reopened = 0
        self.method = ""  # the method of the last frame (a fallback while the method prepares)
        self.quality: Optional[SkinQuality] = None  # the last frame's, with the panel's Skin quality on


class SkinQuality:
    """A live frame's skin measured by the server (``sinew.v1.QualityReport``): what the panel shows
    and where Select Deepest Fold goes."""

    def __init__(self, report, scene_frame: Optional[int]) -> None:
        self.scene_frame = scene_frame
        self.new_inside = report.new_inside_vertices
        self.new_depth = report.new_max_depth
        self.volume_ratio = report.volume_ratio
        # Skin inside (or touching) the rest skin that this pose brought out, e.g. a body through its
        # clothes (servers older than the field, 2026-12-06, send 0).
        self.exposed = report.exposed_vertices
        # The deepest new inside vertex (its index in the mesh, as uploaded) and its heaviest bone.
        self.vertex: Optional[int] = report.new_deepest_vertex if report.HasField("new_deepest_vertex") else None
        self.bone = report.new_deepest_joint
        if self.bone == bridge.STATIC_JOINT:  # the joint the add-on gives vertices without weights
            self.bone = ""
            self.unweighted = True
        else:
            self.unweighted = False

    def text(self) -> str:
        if self.new_inside == 0:
            where = "no vertex newly inside the skin"
        else:
            where = (f"{self.new_inside} {'vertex' if self.new_inside == 1 else 'vertices'} newly inside the skin, "
                     f"deepest {self.new_depth:.3g}")
            if self.vertex is not None:
                where += f" at vertex {self.vertex}" + (f" ({self.bone})" if self.bone else
                                                        " (no deforming weight: left in place)" if self.unweighted else "")
        if self.exposed:
            where += (f"; {self.exposed} hidden {'vertex' if self.exposed == 1 else 'vertices'} "
                      "(inside the rest skin) brought out")
        return f"{where}; volume x{self.volume_ratio:.4f}"


# The live meshes by LiveRig.uid (what LIVE_ID holds). Until 2026-12-07 they were kept by name:
# Drive on a mesh that had taken a live mesh's old name (A "Body" renamed "Hero", B renamed
# "Body") replaced A's entry, and A's session stayed open on the server, never closed.
_live: Dict[str, LiveRig] = {}
_baking = False
_rendering = False  # between render_init and render_complete / render_cancel
# How long a live frame waits for its session to be opened again (the server restarted, or the
# session idled out) when the panel's Timeout is 0: a method's first preparation can take minutes,
# and the frame change blocks Blender meanwhile (until 2026-12-03 up to a day).
REOPEN_WAIT = 30.0
_token: Dict[str, str] = {}  # the panel's Token (SinewSettings.token), never written to the file
LIVE_MARK = "sinew_live"  # a custom property on a live mesh: the name it went live under
LIVE_ID = "sinew_live_id"  # and its LiveRig.uid, which tells it from another mesh of that name
# The Armature modifier's show_viewport and show_render before the add-on turned it off, given back.
ARMATURE_SHOWN = "sinew_armature_shown"


def _prefs(context) -> Optional[bpy.types.AddonPreferences]:
    addon = context.preferences.addons.get(__name__)
    return addon.preferences if addon else None


def _sinew(context):
    prefs = _prefs(context)
    return bridge.ensure_client([prefs.client_path] if prefs and prefs.client_path else [])


def _params(text: str) -> dict:
    """ "NAME=VALUE,NAME=VALUE" -> a dict of numbers, booleans and words; in a pipeline
    "STAGE.NAME=VALUE" goes to that stage."""
    out: dict = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        if "=" not in item:
            raise bridge.BridgeError(f"parameters: {item!r} is not NAME=VALUE")
        name, value = (x.strip() for x in item.split("=", 1))
        v: object = value
        if value.lower() in ("true", "false"):
            v = value.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    v = cast(value)
                    break
                except ValueError:
                    pass
        if "." in name:
            stage, name = name.split(".", 1)
            out.setdefault(stage, {})[name] = v
        else:
            out[name] = v
    return out


def _method(settings) -> str:
    return settings.custom_method.strip() if settings.method == "custom" else settings.method


def _mesh(context):
    settings = context.scene.sinew
    obj = settings.mesh or context.active_object
    if obj is None or obj.type != "MESH":
        raise bridge.BridgeError("choose a mesh with an Armature modifier (the panel's Mesh, or the active object)")
    return obj


def _reported_mesh(operator, context):
    """The mesh an operator acts on (_mesh), or None with the reason reported as its error."""
    try:
        return _mesh(context)
    except bridge.BridgeError as e:
        operator.report({"ERROR"}, f"Sinew: {e}")
        return None


def _connect(context):
    sinew = _sinew(context)
    s = context.scene.sinew
    return sinew, sinew.connect(s.target, token=s.token or None, tls_ca=bpy.path.abspath(s.tls_ca) if s.tls_ca else None,
                                timeout=s.timeout if s.timeout > 0 else None)


def _open_session(context, mesh_obj):
    """Exports and uploads the mesh's rig, opens a session as the panel says. Returns the client
    module, the export, the connection, the session, the rig message and the session's options;
    on failure the connection is closed."""
    s = context.scene.sinew
    # The shape key belongs to the mesh data: on data shared by linked duplicates (Alt+D) every
    # copy would take the positions, on top of its own Armature modifier (until 2026-12-03).
    if mesh_obj.data.users > 1:
        raise bridge.BridgeError(f"mesh data {mesh_obj.data.name!r} has {mesh_obj.data.users} users (linked duplicates "
                                 "or a fake user): Sinew's shape key would move them all; make it single-user "
                                 "(Object > Relations > Make Single User > Object & Data)")
    export = bridge.export_rig(mesh_obj, None, context.evaluated_depsgraph_get())
    params = _params(s.params)
    if _method(s) == "pbs" and "gravity_direction" not in params:
        # Gravity pulls down in the scene (until 2026-12-07 along the rig's −y: sideways, a column's
        # jiggling top swung 1.5 along −Y under gravity 200).
        params["gravity_direction"] = dict(zip("xyz", export.down))
    options = dict(method=_method(s), params=params, backend=s.backend, encoding=s.encoding)
    sinew, client = _connect(context)
    try:
        rig = export.rig(sinew)
        rig_id = client.upload_rig(rig).rig_id
        session = client.create_session(rig_id, **options)
    except BaseException:
        client.close()
        raise
    return sinew, export, client, session, rig, options


def _set_armature_modifier(mesh_obj, enabled: bool) -> None:
    """Turns the mesh's Armature modifier off while Sinew (or a bake) moves the mesh, its viewport
    and render switches kept on the object (ARMATURE_SHOWN) by the first turn-off, and gives them
    back as they were (until 2026-12-07 both were turned on, a modifier off for renders too)."""
    mod = bridge.armature_modifier(mesh_obj)
    if mod is None:
        name = mesh_obj.get("sinew_armature_modifier")
        mod = mesh_obj.modifiers.get(name) if name else None
    if mod is None:
        return
    if not enabled:
        # Once: the modifier found off later (a save given back and taken again, an undo to a live
        # step, a bake after Drive) is the add-on's doing, not the user's.
        if ARMATURE_SHOWN not in mesh_obj:
            mesh_obj[ARMATURE_SHOWN] = [int(mod.show_viewport), int(mod.show_render)]
        mesh_obj["sinew_armature_modifier"] = mod.name
        mod.show_viewport = mod.show_render = False
        return
    shown = mesh_obj.get(ARMATURE_SHOWN)
    if shown is not None and len(shown) == 2:
        mod.show_viewport, mod.show_render = bool(shown[0]), bool(shown[1])
    elif "sinew_armature_modifier" in mesh_obj:  # turned off by an add-on that kept no switches
        mod.show_viewport = mod.show_render = True
    for prop in (ARMATURE_SHOWN, "sinew_armature_modifier"):
        if prop in mesh_obj:
            del mesh_obj[prop]


def _restore_bake(mesh_obj, previous) -> None:
    """Puts back the Mesh Cache modifier of an earlier bake, `previous` = (file, start frame,
    stack index), and turns the Armature modifier off again, as that bake left them."""
    path, start, index = previous
    bridge.mesh_cache_modifier(mesh_obj, path, start, min(index, len(mesh_obj.modifiers)))
    _set_armature_modifier(mesh_obj, False)


def _frame_seconds(scene) -> float:
    """Seconds per scene frame: what methods with dynamics (pbs's jiggle) step by."""
    return scene.render.fps_base / scene.render.fps if scene.render.fps > 0 else 0.0


def _deform(live: LiveRig, depsgraph, scene_frame: Optional[int] = None, time_step: float = 0.0,
            quality: bool = False) -> None:
    """Sends the armature's pose and writes the result. Frames that do not follow the last one sent
    (a jump, a scrub backwards, playback looping) reset the session, so that stateful methods
    (elastic implicit skinning, jiggle, ...) restart their history there as a bake from that frame
    would; frames played in order carry it on. A session the server no longer has (closed after
    its idle TTL, a restarted server) is opened again once, the rig uploaded again if needed. With
    `quality` the server also measures the returned skin (LiveRig.quality)."""
    sinew = bridge.ensure_client()
    mesh_obj = bpy.data.objects[live.export.mesh_name]
    if len(mesh_obj.data.vertices) != len(live.export.positions):  # edited since Drive
        raise bridge.BridgeError(f"the mesh has {len(mesh_obj.data.vertices)} vertices, {len(live.export.positions)} "
                                 "when Drive uploaded it: press Drive with Sinew again")
    # The rest shape uploaded is the shape keys' mix at Drive: keys changed since (a value moved,
    # animated or driven) would be deformed as they were, so the frame is refused.
    problem = bridge.shape_key_problem(mesh_obj)
    if problem:
        raise bridge.BridgeError(problem)
    keys = bridge.shape_key_state(mesh_obj)
    if keys != live.export.shape_keys:
        raise bridge.BridgeError(f"{bridge.shape_key_change(live.export.shape_keys, keys)} since Drive, which uploaded "
                                 "the shape keys' mix as the rest shape: press Drive with Sinew again")
    world, premat = bridge.pose_matrices(live.export, depsgraph)
    pose = bridge.sinew_pose(sinew, live.export, world)
    reset = scene_frame is None or live.scene_frame is None or scene_frame != live.scene_frame + 1
    outputs = {"quality": True} if quality else None
    t = time.perf_counter()
    try:
        frame = live.session.deform_frame(pose, reset=reset, time_step=time_step, outputs=outputs)
    except sinew.NotFound:
        rig_id = live.client.upload_rig(live.rig).rig_id
        # A first preparation may outlast a frame's deadline: the panel's Timeout, else REOPEN_WAIT.
        wait = live.create_timeout or REOPEN_WAIT
        try:
            live.session = live.client.create_session(rig_id, timeout=wait, **live.options)
        except sinew.DeadlineExceeded as e:
            raise bridge.BridgeError(f"the server lost the session (restarted, or idle past its TTL) and opening it "
                                     f"again took over {wait:g} s (a preparation): press Drive with Sinew again") from e
        live.reopened += 1
        frame = live.session.deform_frame(pose, reset=True, time_step=time_step, outputs=outputs)
    xyz = frame.positions
    live.quality = SkinQuality(frame.quality, scene_frame) if quality and frame.quality is not None else None
    live.method = frame.method
    live.last_ms = 1e3 * (time.perf_counter() - t)
    live.frames += 1
    live.scene_frame = scene_frame
    bridge.write_shape_key(mesh_obj, bridge.to_mesh_space(xyz, premat), live.export.key_offsets)


@persistent
def on_frame_change(scene, depsgraph=None) -> None:
    """frame_change_post: sends the pose of every live mesh and writes the result."""
    if _baking:
        return
    if _rendering:  # the render evaluates its own copy; writing mesh data under it is unsafe
        for live in _live.values():
            live.error = "not updated while rendering: bake for renders (Bake writes a point cache)"
        return
    depsgraph = depsgraph or bpy.context.evaluated_depsgraph_get()
    for key, live in list(_live.items()):
        name = live.export.mesh_name
        obj, copies = _find_live(live)
        if obj is None and copies:
            live.error = (f"{len(copies)} meshes carry the mark of the live mesh {name!r} (copies, after an undo): "
                          "press Stop on each, then Drive with Sinew again")
            continue
        if obj is None:
            # Deleted: its session and connection are closed.
            _live.pop(key, None)
            _close(live)
            continue
        # Copies of it (Shift+D) are not live: given back to their own modifiers.
        for copy in copies:
            _release_copy(copy, obj)
        if obj.name != name:
            # Renamed: driven on under its new name (until 2026-12-03 a renamed mesh stayed frozen
            # at its last frame and its session open until the server's idle timeout).
            obj[LIVE_MARK] = obj.name
            live.export.mesh_name = obj.name
            name = obj.name
        _hold_live(obj)
        try:
            _deform(live, depsgraph, scene.frame_current, _frame_seconds(scene), scene.sinew.quality)
            live.error = ""
        except KeyError as e:  # an object of the rig (its armature) renamed or deleted
            live.error = f"{e} is gone (renamed or deleted): press Stop, then Drive with Sinew again"
            print(f"Sinew: {name}: {live.error}")
        except Exception as e:  # shown in the panel; playback goes on
            live.error = str(e)
            print(f"Sinew: {name}: {e}")


def _find_live(live: LiveRig) -> Tuple[Optional[object], List[object]]:
    """The mesh a live rig drives, and the other objects that carry its LIVE_ID (copies; all of
    them, the mesh None, where none can be told from the others). Reads, never writes, Blender's
    data (the panel calls it while it draws). The object at the address it went live at, with its
    LIVE_ID; else (an undo remade it) the one object with its LIVE_ID, or among several the one
    still named as the rig last saw it (`name`: export.mesh_name); else (an undo to a step before
    Drive, which took the marks off) the object of that name without another live rig's LIVE_ID.
    Until 2026-12-07 a renamed mesh was the first object with its mark: after Drive "Body",
    Shift+D (Body.001, marked too) and Body renamed Hero, the add-on drove Body.001."""
    name = live.export.mesh_name
    marked = [o for o in bpy.data.objects if o.get(LIVE_ID) == live.uid]
    obj = next((o for o in marked if o.as_pointer() == live.pointer), None)
    if obj is None and len(marked) == 1:
        obj = marked[0]
    if obj is None and marked:
        named = [o for o in marked if o.name == name]
        obj = named[0] if len(named) == 1 else None
        if obj is None:
            return None, marked
    if obj is None:
        # Only the mesh Drive made the rig from: of its vertex count, with an Armature modifier on
        # the rig's armature. Until 2026-12-07 any object that took the name after the live mesh
        # was deleted (a re-imported character's mesh, an Empty) was adopted: its Armature
        # modifier turned off and Sinew's key written on it, or the handler raised on an Empty.
        candidate = bpy.data.objects.get(name)
        ids = {other.uid for other in _live.values()}
        if (candidate is not None and candidate.get(LIVE_ID) not in ids and candidate.type == "MESH"
                and len(candidate.data.vertices) == len(live.export.positions)
                and any(m.type == "ARMATURE" and m.object is not None and m.object.name == live.export.armature_name
                        for m in candidate.modifiers)):
            obj = candidate
    if obj is not None:
        live.pointer = obj.as_pointer()
    return obj, [o for o in marked if o != obj]


def _live_key(obj) -> Optional[str]:
    """The key in _live (a LiveRig.uid) of the live mesh `obj` is, or None (not live; a copy of a
    live mesh is not). Until 2026-12-07 Stop, saving and the panel looked a live mesh up by its
    name alone: renamed, Stop left its session open and saving wrote it with its Armature modifier
    off."""
    if obj is None:
        return None
    for key, live in _live.items():
        if _find_live(live)[0] == obj:
            return key
    return None


def _live_object(key: str):
    """The mesh a key of _live drives (_find_live), or None."""
    live = _live.get(key)
    return _find_live(live)[0] if live is not None else None


def _mark_live(obj, live: LiveRig) -> None:
    obj[LIVE_MARK] = obj.name
    obj[LIVE_ID] = live.uid
    live.pointer = obj.as_pointer()


def _release_copy(copy, original) -> None:
    """A copy of a live mesh (Shift+D carries its marks, its Sinew key and its Armature modifier
    off) is not live: given back to its own modifiers as Stop gives back a mesh. Where it shares the
    live mesh's data (Alt+D), the key is the live mesh's: only its marks go."""
    if copy.data == original.data:
        for prop in (LIVE_MARK, LIVE_ID):
            if prop in copy:
                del copy[prop]
        return
    _give_back(copy)


def _close(live: LiveRig) -> None:
    """Closes a live mesh's session (within the frame timeout) and its connection."""
    try:
        live.session.close()
    except Exception as e:  # the server may be gone
        print(f"Sinew: closing {live.session.id}: {e}")
    live.client.close()


def _stop(mesh_obj) -> None:
    """Closes the mesh's session (if it is live; copies of it are given back too) and gives the
    mesh back (_give_back)."""
    key = _live_key(mesh_obj)
    live = _live.pop(key, None) if key is not None else None
    if live is not None:
        _close(live)
        for o in list(bpy.data.objects):
            if o != mesh_obj and o.get(LIVE_ID) == live.uid:
                _release_copy(o, mesh_obj)
    _give_back(mesh_obj)


def _give_back(mesh_obj) -> None:
    """Gives the mesh back: its bake's Mesh Cache modifier on again if it has one (Start turned it
    off), else its Armature modifier."""
    for prop in (LIVE_MARK, LIVE_ID):
        if prop in mesh_obj:
            del mesh_obj[prop]
    bridge.remove_shape_key(mesh_obj)
    cache = mesh_obj.modifiers.get(bridge.MESH_CACHE)
    if cache is not None:
        cache.show_viewport = cache.show_render = True
    else:
        _set_armature_modifier(mesh_obj, True)


def _stop_all() -> None:
    for live in list(_live.values()):
        obj, copies = _find_live(live)
        if obj is not None:
            _stop(obj)
        else:
            _close(live)
            for copy in copies:  # none of them told from the others: all given back
                _give_back(copy)
    _live.clear()
    if on_frame_change in bpy.app.handlers.frame_change_post:
        bpy.app.handlers.frame_change_post.remove(on_frame_change)


@persistent
def on_load_pre(*_args) -> None:
    """load_pre (File > Open, Revert, New): the live meshes stop before their file goes. Until
    2026-12-03 the handler outlived the file and drove a mesh of the same name in the next one, on
    top of its Armature modifier."""
    _stop_all()


def _give_back_for_saving(obj, saving: bool) -> None:
    """A live mesh as the file should hold it (`saving`): its Sinew key muted and its bake's Mesh
    Cache modifier, else its Armature modifier, on; and back to live after the save."""
    keys = obj.data.shape_keys
    key = keys.key_blocks.get(bridge.SHAPE_KEY) if keys is not None else None
    if key is not None:
        key.mute = saving
    cache = obj.modifiers.get(bridge.MESH_CACHE)
    if cache is not None:
        cache.show_viewport = cache.show_render = saving
    else:
        _set_armature_modifier(obj, saving)


def _hold_live(obj) -> None:
    """A live mesh as live rigs hold it: its Sinew key on, its bake's Mesh Cache modifier and its
    Armature modifier off, wherever something gave it back. Each frame makes sure of it: a save
    that fails gets no save_post, and until 2026-12-07 the next frame un-muted the key over the
    Armature modifier save_pre had turned on, which deformed Sinew's positions a second time (0.41
    off on a column 2 high). Writes only what differs (each write makes Blender evaluate again)."""
    keys = obj.data.shape_keys
    key = keys.key_blocks.get(bridge.SHAPE_KEY) if keys is not None else None
    if key is not None and key.mute:
        key.mute = False
    cache = obj.modifiers.get(bridge.MESH_CACHE)
    if cache is not None and (cache.show_viewport or cache.show_render):
        cache.show_viewport = cache.show_render = False
    mod = bridge.armature_modifier(obj)
    if mod is not None and (mod.show_viewport or mod.show_render):
        _set_armature_modifier(obj, False)


@persistent
def on_save_pre(*_args) -> None:
    """save_pre: the file is written with each live mesh given back, so that it renders and plays
    where the add-on is not (a farm, a colleague, a shot linking the mesh). Until 2026-12-03 it
    was saved at the last frame Sinew sent, with the Armature modifier off: frozen elsewhere."""
    for key in _live:
        obj = _live_object(key)
        if obj is not None:
            _give_back_for_saving(obj, True)
    # Blender calls no save_post when the file cannot be written (a folder that is not there, no
    # permission, a full disk): the next frame change takes the meshes back (on_frame_change,
    # _hold_live), and this timer does so without one (an interactive Blender; a successful
    # save's save_post has already, and it finds nothing to do).
    if _live and not bpy.app.timers.is_registered(_after_save):
        bpy.app.timers.register(_after_save, first_interval=0.0)


@persistent
def on_save_post(*_args) -> None:
    """save_post: live again, as before the save."""
    for key in _live:
        obj = _live_object(key)
        if obj is not None:
            _give_back_for_saving(obj, False)


def _after_save() -> None:
    """A timer save_pre starts: each live mesh live again, also after a save that failed."""
    if not _baking and not _rendering:
        for key in list(_live):
            obj = _live_object(key)
            if obj is not None:
                _hold_live(obj)
    return None  # once


@persistent
def on_render_init(*_args) -> None:
    global _rendering
    _rendering = True


@persistent
def on_render_end(*_args) -> None:
    global _rendering
    _rendering = False


@persistent
def on_undo_post(*_args) -> None:
    """undo_post, redo_post: an undo brings the mesh's data back as it was at that step, and a step
    from before Drive (Drive makes none of its own) brings back its Armature modifier on and no
    Sinew key, while its session goes on: until 2026-12-07 the next frame wrote the key under the
    modifier, which deformed it a second time. Each live mesh is taken from the modifier again
    and its frame sent again. A step from while a mesh was live that is no longer (Ctrl+Z after
    Stop) brings back its marks, its Sinew key and its Armature modifier off, with no session
    behind them: the mesh is given back, as on_load_post gives back a file's (until 2026-12-07 it
    stayed frozen at that step's frame, its armature posed in vain)."""
    uids = {live.uid for live in _live.values()}
    for obj in list(bpy.data.objects):
        if obj.type == "MESH" and (LIVE_MARK in obj or LIVE_ID in obj) and obj.get(LIVE_ID) not in uids:
            _give_back(obj)
    if not _live:
        return
    for key, live in list(_live.items()):
        obj = _live_object(key)
        if obj is None:
            continue  # deleted: the next frame closes its session
        cache = obj.modifiers.get(bridge.MESH_CACHE)
        if cache is not None:
            cache.show_viewport = cache.show_render = False
        _set_armature_modifier(obj, False)
        _mark_live(obj, live)
    on_frame_change(bpy.context.scene)


_HANDLERS = (("load_pre", "on_load_pre"), ("load_post", "on_load_post"), ("save_pre", "on_save_pre"),
             ("save_post", "on_save_post"), ("render_init", "on_render_init"), ("render_complete", "on_render_end"),
             ("render_cancel", "on_render_end"), ("undo_post", "on_undo_post"), ("redo_post", "on_undo_post"))


@persistent
def on_load_post(*_args) -> None:
    """load_post: a file saved while a mesh was live has its shape key and its Armature modifier
    off, with no session behind them: the mesh is given back."""
    for obj in bpy.data.objects:
        if obj.type == "MESH" and (LIVE_MARK in obj or LIVE_ID in obj) and _live_key(obj) is None:
            _stop(obj)


class SINEW_OT_start(bpy.types.Operator):
    """Upload the mesh's rig and deform it through Sinew on every frame change"""

    bl_idname = "sinew.start"
    bl_label = "Drive with Sinew"
    bl_options = {"REGISTER"}

    def execute(self, context):
        try:
            mesh_obj = _mesh(context)
            if _live_key(mesh_obj) is not None:
                _stop(mesh_obj)
            sinew, export, client, session, rig, options = _open_session(context, mesh_obj)
        except Exception as e:
            self.report({"ERROR"}, f"Sinew: {e}")
            return {"CANCELLED"}
        for w in export.warnings:
            self.report({"WARNING"}, f"Sinew: {w}")
        # A bake's Mesh Cache modifier is turned off while Sinew drives the mesh, and on again at
        # Stop (until 2026-12-03 Start removed it: the bake was lost, by a failed Start too).
        cache = mesh_obj.modifiers.get(bridge.MESH_CACHE)
        if cache is not None:
            cache.show_viewport = cache.show_render = False
        _set_armature_modifier(mesh_obj, False)
        live = LiveRig(export, client, session, rig, options)
        s = context.scene.sinew
        live.create_timeout = float(s.timeout) if s.timeout > 0 else None
        client.timeout = s.frame_timeout if s.frame_timeout > 0 else None  # each frame, and Stop's close
        _live[live.uid] = live
        _mark_live(mesh_obj, live)
        if on_frame_change not in bpy.app.handlers.frame_change_post:
            bpy.app.handlers.frame_change_post.append(on_frame_change)
        try:
            _deform(live, context.evaluated_depsgraph_get(), context.scene.frame_current, _frame_seconds(context.scene),
                    s.quality)
        except Exception as e:
            _stop(mesh_obj)
            self.report({"ERROR"}, f"Sinew: {e}")
            return {"CANCELLED"}
        self.report({"INFO"}, f"Sinew: {mesh_obj.name} on {session.id} ({session.method}, {session.backend}, "
                              f"{session.vertex_count} vertices)")
        return {"FINISHED"}


class SINEW_OT_stop(bpy.types.Operator):
    """Close the session and give the mesh back to its Armature modifier"""

    bl_idname = "sinew.stop"
    bl_label = "Stop"

    def execute(self, context):
        try:
            mesh_obj = _mesh(context)
        except bridge.BridgeError as e:
            mesh_obj = None
            if not _live:
                self.report({"ERROR"}, f"Sinew: {e}")
                return {"CANCELLED"}
        marked = mesh_obj is not None and (LIVE_MARK in mesh_obj or LIVE_ID in mesh_obj)
        if mesh_obj is None or _live_key(mesh_obj) is None and not marked:
            # Posing with the armature active, or a mesh that is not live: every live mesh stops
            # (until 2026-12-03 this was an error, and the panel lost the live status).
            _stop_all()
            return {"FINISHED"}
        _stop(mesh_obj)
        if not _live and on_frame_change in bpy.app.handlers.frame_change_post:
            bpy.app.handlers.frame_change_post.remove(on_frame_change)
        return {"FINISHED"}


class SINEW_OT_select_deepest(bpy.types.Operator):
    """Select the vertex where the last live frame folded the skin deepest (Skin quality on)"""

    bl_idname = "sinew.select_deepest"
    bl_label = "Select Deepest Fold"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        mesh_obj = _reported_mesh(self, context)
        if mesh_obj is None:
            return {"CANCELLED"}
        key = _live_key(mesh_obj)
        live = _live.get(key) if key is not None else None
        if live is None:
            self.report({"ERROR"}, f"Sinew: {mesh_obj.name} is not driven by Sinew (Drive with Sinew, Skin quality on)")
            return {"CANCELLED"}
        q = live.quality
        if q is None:
            self.report({"ERROR"}, f"Sinew: {mesh_obj.name}: no skin quality report yet (turn Skin quality on and "
                                   "change the frame)")
            return {"CANCELLED"}
        if q.vertex is None:
            self.report({"ERROR"}, f"Sinew: {mesh_obj.name}: frame {q.scene_frame} has no vertex newly inside the skin")
            return {"CANCELLED"}
        mesh = mesh_obj.data
        if q.vertex >= len(mesh.vertices):
            self.report({"ERROR"}, f"Sinew: vertex {q.vertex} is past the mesh's {len(mesh.vertices)} vertices")
            return {"CANCELLED"}
        if mesh_obj.mode != "OBJECT":  # selection flags are written in Object Mode, read on entering Edit Mode
            bpy.ops.object.mode_set(mode="OBJECT")
        for items in (mesh.vertices, mesh.edges, mesh.polygons):
            items.foreach_set("select", [False] * len(items))
        mesh.vertices[q.vertex].select = True
        for o in context.view_layer.objects:
            o.select_set(o == mesh_obj)
        context.view_layer.objects.active = mesh_obj
        self.report({"INFO"}, f"Sinew: vertex {q.vertex}" + (f" ({q.bone})" if q.bone else "") +
                    f" selected, frame {q.scene_frame}: Tab into Edit Mode and View Selected (numpad .) to see it")
        return {"FINISHED"}


class SINEW_OT_bake(bpy.types.Operator):
    """Deform every frame of the range through Sinew into a .pc2 point cache played by a Mesh Cache modifier"""

    bl_idname = "sinew.bake"
    bl_label = "Bake"
    # An undo step (until 2026-12-07 none: Ctrl+Z after Bake went to the step before, and took the
    # user's last action back with the bake).
    bl_options = {"REGISTER", "UNDO"}

    frame_start: IntProperty(name="Start", default=-1, description="first frame (-1: the scene's)")
    frame_end: IntProperty(name="End", default=-1, description="last frame (-1: the scene's)")

    def execute(self, context):
        global _baking
        scene = context.scene
        s = scene.sinew
        first = scene.frame_start if self.frame_start < 0 else self.frame_start
        last = scene.frame_end if self.frame_end < 0 else self.frame_end
        if last < first:
            self.report({"ERROR"}, f"Sinew: frames {first}..{last}: the end is before the start")
            return {"CANCELLED"}
        # A path relative to the .blend ("//") needs a saved .blend (until 2026-12-03 it resolved
        # against Blender's working folder, wherever Blender was started).
        if s.bake_path.startswith("//") and not bpy.data.filepath:
            self.report({"ERROR"}, f"Sinew: Cache {s.bake_path!r} is relative to the .blend: save the file first, "
                                   "or give an absolute path")
            return {"CANCELLED"}
        current = scene.frame_current
        wm = context.window_manager
        # The bake this one replaces: its modifier comes off while the rig is exported from the
        # Armature modifier's input, and goes back if this bake fails (its file is replaced only
        # by a bake that succeeds). Until 2026-12-01 a failed bake (a server down) left the mesh
        # without its previous bake.
        previous = None
        try:
            mesh_obj = _mesh(context)
            if _live_key(mesh_obj) is not None:
                _stop(mesh_obj)
            cache = mesh_obj.modifiers.get(bridge.MESH_CACHE)
            if cache is not None:
                previous = (cache.filepath, int(cache.frame_start), list(mesh_obj.modifiers).index(cache))
                mesh_obj.modifiers.remove(cache)
            _set_armature_modifier(mesh_obj, True)
            sinew, export, client, session, _, _ = _open_session(context, mesh_obj)
        except Exception as e:
            if previous is not None:
                _restore_bake(mesh_obj, previous)
            self.report({"ERROR"}, f"Sinew: {e}")
            return {"CANCELLED"}
        start = time.perf_counter()
        _baking = True
        try:
            poses, premats = [], []
            for f in range(first, last + 1):  # Blender evaluates the pose (drivers, constraints, IK)
                scene.frame_set(f)
                # The rest shape uploaded is the shape keys' mix now: keys that change over the range
                # (animated, driven) cannot be baked from it (until 2026-12-07 a bake dropped every
                # other key: the Mesh Cache modifier overwrites their mix).
                keys = bridge.shape_key_state(mesh_obj)
                if keys != export.shape_keys:
                    raise bridge.BridgeError(
                        f"frame {f}: {bridge.shape_key_change(export.shape_keys, keys)} from frame {current}: a "
                        "bake deforms one rest shape, the shape keys' mix at its start; keys animated or driven over "
                        "the range cannot be baked (keep their values, or apply them to the mesh)")
                world, premat = bridge.pose_matrices(export, context.evaluated_depsgraph_get())
                poses.append(sinew.FrameInput(bridge.sinew_pose(sinew, export, world), time_step=_frame_seconds(scene)))
                premats.append(premat)
            # Methods with a per-rig preparation serve a fallback meanwhile (pbs: LBS); a bake
            # waits for the method itself.
            # Its own (a failed one of other parameters on the rig is not ours), within the panel's
            # Timeout, shown in the window's progress cursor (until 2026-12-03 without a bound).
            wm.progress_begin(0, 100)
            session.wait_prepared(timeout=float(s.timeout) if s.timeout > 0 else None,
                                  progress=lambda fraction, _key: wm.progress_update(int(100 * fraction)))
            wm.progress_end()
            wm.progress_begin(0, len(poses))
            path = bpy.path.abspath(s.bake_path.replace("{mesh}", bpy.path.clean_name(mesh_obj.name)))
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with bridge.Pc2Writer(path, len(poses), len(export.positions), first) as cache_file:
                # Each frame within the Frame timeout (until 2026-12-07 a server that stopped
                # answering mid-bake froze Blender for good).
                frames = session.stream(poses, first_frame=0,
                                        frame_timeout=s.frame_timeout if s.frame_timeout > 0 else None)
                for i, frame in enumerate(frames):
                    cache_file.append(bridge.to_mesh_space(frame.positions, premats[i]))
                    wm.progress_update(i + 1)
                cache_file.commit()  # a short stream fails here; the bake before stays
            baked = len(poses)
        except Exception as e:
            if previous is not None:
                _restore_bake(mesh_obj, previous)
            self.report({"ERROR"}, f"Sinew: {e}")
            return {"CANCELLED"}
        finally:
            _baking = False
            wm.progress_end()
            try:
                session.close()
            except Exception:
                pass
            client.close()
            scene.frame_set(current)
        index = list(mesh_obj.modifiers).index(bridge.armature_modifier(mesh_obj))
        # The modifier keeps a "//" path relative, so that the project moves (or renders on a farm
        # with other mounts) with its cache.
        bridge.mesh_cache_modifier(mesh_obj, bpy.path.relpath(path) if s.bake_path.startswith("//") else path,
                                   first, index)
        _set_armature_modifier(mesh_obj, False)
        self.report({"INFO"}, f"Sinew: baked {baked} frames of {mesh_obj.name} ({session.method}) to {path} "
                              f"in {time.perf_counter() - start:.1f} s")
        return {"FINISHED"}


class SINEW_OT_clear_bake(bpy.types.Operator):
    """Remove the Mesh Cache modifier of a bake and turn the Armature modifier back on"""

    bl_idname = "sinew.clear_bake"
    bl_label = "Clear Bake"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        mesh_obj = _reported_mesh(self, context)
        if mesh_obj is None:
            return {"CANCELLED"}
        cache = mesh_obj.modifiers.get(bridge.MESH_CACHE)
        if cache is not None:
            mesh_obj.modifiers.remove(cache)
        if _live_key(mesh_obj) is None:
            _set_armature_modifier(mesh_obj, True)
        return {"FINISHED"}


class SinewSettings(bpy.types.PropertyGroup):
    target: StringProperty(name="Server", default="127.0.0.1:50051", description="the Sinew server, HOST:PORT")
    tls_ca: StringProperty(name="TLS CA", subtype="FILE_PATH", default="",
                           description="PEM file of the CA that signed the server's certificate (empty: plaintext)")
    timeout: IntProperty(name="Timeout (s)", default=0, min=0,
                         description="seconds for each call that opens a session, and for a bake's wait for the "
                                     "method's preparation (uploads are not bounded; a bake's frames are by the Frame "
                                     "timeout), 0: none "
                                     "(a method's first preparation may take a while; a live session lost and opened "
                                     "again waits 30 s)")
    frame_timeout: FloatProperty(name="Frame timeout (s)", default=10.0, min=0.0,
                                 description="seconds a live frame (and Stop's close) may take before the panel "
                                             "shows the error and playback goes on, and a bake waits for each "
                                             "frame's answer before it fails, 0: none (a stalled server then "
                                             "freezes Blender)")
    mesh: PointerProperty(name="Mesh", type=bpy.types.Object, poll=lambda self, o: o.type == "MESH",
                          description="the skinned mesh (empty: the active object)")
    method: EnumProperty(name="Method", items=METHODS, default="lbs")
    custom_method: StringProperty(name="Name", default="dqs+implicit",
                                  description="any method or pipeline the server knows (sinew info lists them)")
    params: StringProperty(name="Parameters", default="",
                           description="NAME=VALUE,... by the names sinew info lists (pipelines: STAGE.NAME=VALUE)")
    backend: EnumProperty(name="Backend", items=[("auto", "Auto", "the GPU when the server has one"),
                                                 ("cpu", "CPU", ""), ("gpu", "GPU", "")], default="auto")
    encoding: EnumProperty(name="Encoding", default="f32", items=[
        ("f32", "float32", "exact"), ("f16", "float16", "half the bytes, 2^-11 relative error"),
        ("q16", "quantized16", "half the bytes, within half a step of the frame's box / 65535"),
        ("delta", "delta", "a fixed grid, key frames and predicted changes (about 0.15 of float32's bytes)")])
    quality: BoolProperty(name="Skin quality", default=False,
                          description="have the server measure each live frame's skin: vertices newly inside it "
                                      "(a fold, a crease, one part pushed into another), where the deepest is, the "
                                      "volume (about 5 microseconds a vertex on the server, after the frame)")
    bake_path: StringProperty(name="Cache", subtype="FILE_PATH", default="//sinew_{mesh}.pc2",
                              description="the .pc2 file a bake writes ({mesh}: the mesh's name)")


def _get_token(_settings) -> str:
    return _token.get("value", "")


def _set_token(_settings, value: str) -> None:
    _token["value"] = value


# The token is held by the add-on for this Blender session, not stored in the scene: typed here it
# was saved in the .blend (and went wherever the file went) until 2026-12-03. (Added as an object,
# not a class-body annotation: those are evaluated later, where the getter's module is not seen.)
SinewSettings.__annotations__["token"] = StringProperty(
    name="Token", subtype="PASSWORD", default="", get=_get_token, set=_set_token,
    description="bearer token for a server run with --token-file (empty: $SINEW_TOKEN); kept for this Blender "
                "session only, never saved in the .blend")


class SinewPreferences(bpy.types.AddonPreferences):
    bl_idname = __name__

    client_path: StringProperty(name="Python client", subtype="DIR_PATH", default="",
                                description="folder holding the 'sinew' package and its stubs "
                                            "(build/clients/python/dist); not needed with the build's zip")

    def draw(self, context):
        self.layout.prop(self, "client_path")


class SINEW_PT_panel(bpy.types.Panel):
    bl_label = "Sinew"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Sinew"

    def draw(self, context):
        s = context.scene.sinew
        layout = self.layout
        col = layout.column()
        col.prop(s, "target")
        col.prop(s, "token")
        col.prop(s, "tls_ca")
        col.prop(s, "timeout")
        col.prop(s, "frame_timeout")
        col.prop(s, "mesh")
        col.prop(s, "method")
        if s.method == "custom":
            col.prop(s, "custom_method")
        col.prop(s, "params")
        col.prop(s, "backend")
        col.prop(s, "encoding")
        col.prop(s, "quality")
        row = layout.row(align=True)
        row.operator(SINEW_OT_start.bl_idname, icon="PLAY")
        row.operator(SINEW_OT_stop.bl_idname, icon="PAUSE")
        obj = s.mesh or context.active_object
        # The chosen mesh's, else every live mesh's (posing with the armature active).
        key = _live_key(obj)
        shown = [_live[key]] if key is not None else list(_live.values())
        for live in shown:
            box = layout.box()
            if len(shown) > 1 or key is None:
                box.label(text=live.export.mesh_name, icon="MESH_DATA")
            box.label(text=f"{live.session.method} on {live.session.backend}, {live.session.vertex_count} vertices")
            box.label(text=f"{live.frames} frames, last {live.last_ms:.1f} ms" +
                      (f" ({live.method} while {live.session.method} prepares)"
                       if live.method and live.method != live.session.method else ""))
            if live.quality is not None:
                box.label(text=live.quality.text(), icon="ERROR" if live.quality.new_inside else "CHECKMARK")
                if live.quality.vertex is not None:
                    box.operator(SINEW_OT_select_deepest.bl_idname, icon="RESTRICT_SELECT_OFF")
            if live.error:
                box.label(text=live.error, icon="ERROR")
        layout.separator()
        layout.prop(s, "bake_path")
        row = layout.row(align=True)
        row.operator(SINEW_OT_bake.bl_idname, icon="REC")
        row.operator(SINEW_OT_clear_bake.bl_idname, icon="X")


classes = (SinewSettings, SinewPreferences, SINEW_OT_start, SINEW_OT_stop, SINEW_OT_select_deepest, SINEW_OT_bake,
           SINEW_OT_clear_bake, SINEW_PT_panel)


def register() -> None:
    for c in classes:
        bpy.utils.register_class(c)
    bpy.types.Scene.sinew = PointerProperty(type=SinewSettings)
    for handlers, handler in _HANDLERS:
        getattr(bpy.app.handlers, handlers).append(globals()[handler])


def unregister() -> None:
    _stop_all()
    for name, handler in _HANDLERS:
        handlers = getattr(bpy.app.handlers, name)
        if globals()[handler] in handlers:
            handlers.remove(globals()[handler])
    del bpy.types.Scene.sinew
    for c in reversed(classes):
        bpy.utils.unregister_class(c)
