"""What the Blender add-on's tests share (they run inside Blender): installing the add-on as the
test's environment says, and reading a mesh's evaluated positions.

Environment (set by ctest): SINEW_BLENDER_ZIP with BLENDER_USER_SCRIPTS (a scratch folder: the
zip is installed there and enabled, as a user installs it), or SINEW_BLENDER_ADDON with
SINEW_PYTHONPATH (the source folder, registered directly).
"""
import os
import sys

import bpy
import numpy as np


def install_addon():
    """Factory settings, then the add-on: (its module, its bridge, the sinew client it uses)."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    zip_path = os.environ.get("SINEW_BLENDER_ZIP", "")
    if zip_path:
        import addon_utils
        import shutil
        user_scripts = os.environ.get("BLENDER_USER_SCRIPTS", "")
        if not (user_scripts and bpy.utils.user_resource("SCRIPTS").startswith(user_scripts)):
            raise AssertionError(f"BLENDER_USER_SCRIPTS={user_scripts!r} is not Blender's user scripts folder: the "
                                 "install would write into the user's own")
        shutil.rmtree(user_scripts, ignore_errors=True)
        if bpy.ops.preferences.addon_install(filepath=zip_path, overwrite=True) != {"FINISHED"}:
            raise AssertionError("addon_install")
        if addon_utils.enable("sinew_blender", default_set=True) is None:
            raise AssertionError("the add-on did not enable")
        import sinew_blender
    else:
        sys.path.insert(0, os.environ["SINEW_BLENDER_ADDON"])
        import sinew_blender
        sinew_blender.register()
    from sinew_blender import bridge
    sinew = bridge.ensure_client()
    if zip_path and not sinew.__file__.startswith(os.path.dirname(sinew_blender.__file__)):
        raise AssertionError("the vendored client was not used")
    return sinew_blender, bridge, sinew


def uninstall_addon(sinew_blender) -> None:
    """Disables the add-on install_addon installed (its handlers and live meshes go with it)."""
    if os.environ.get("SINEW_BLENDER_ZIP", ""):
        import addon_utils
        addon_utils.disable("sinew_blender")
    else:
        sinew_blender.unregister()


def evaluated_positions(obj) -> np.ndarray:
    """The object's vertices after its modifiers (shape keys, Armature, Mesh Cache), (N, 3)."""
    dg = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(dg)
    mesh = ev.to_mesh()
    co = np.empty(3 * len(mesh.vertices))
    mesh.vertices.foreach_get("co", co)
    ev.to_mesh_clear()
    return co.reshape(-1, 3)
