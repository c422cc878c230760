"""Sinew's Python client: upload rigs from numpy arrays, open sessions, deform poses and clips.

The generated gRPC stubs live in ``sinew.v1`` (``sinew_pb2``, ``sinew_pb2_grpc``), made by the
build into another folder of ``sys.path`` (``build/clients/python/gen``); this package's path is
extended to find them there. See ``clients/python/README.md``.
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)  # type: ignore[name-defined]  # noqa: F821

from .errors import *  # noqa: E402,F401,F403
from .errors import SinewError, error_for, from_rpc_error  # noqa: E402,F401
from .codec import DeltaDecoder, PositionDecoder, Quantization, decode_positions  # noqa: E402,F401
from .transforms import compose, decompose, matrices_from_quaternions, quaternions_from_matrices  # noqa: E402,F401
from .rig import Cage, Skeleton, SkinWeights, build_rig  # noqa: E402,F401
from .pose import CagePose, Clip, FrameInput, Pose, Track  # noqa: E402,F401
from .info import BackendInfo, DeviceInfo, Limits, MethodInfo, ParamInfo, ServerInfo  # noqa: E402,F401
from .shm import SharedMemoryRegion  # noqa: E402,F401
from .client import (BACKENDS, CLOSE_TIMEOUT, ENCODINGS, Client, ClipFrame, Frame, Session,  # noqa: E402,F401
                     UploadResult, connect, method_name, method_value)
from .recovering import RecoveringSession  # noqa: E402,F401
from ._proto import pb  # noqa: E402,F401

__version__ = "0.1.0"
