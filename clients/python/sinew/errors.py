"""Exceptions raised by the Sinew Python client.

Every failed call raises a :class:`SinewError` (or one of its subclasses, one per gRPC status
code), carrying the gRPC status code and the server's message, which names the field and the
index at fault (for example ``rig.weights.joints[7] (vertex 3): joint 99 out of range``).
Errors found on the client side (bad array shapes, undecodable frames) are raised with the same
hierarchy: :class:`InvalidArgument` for bad input, :class:`DataLoss` for bytes that do not decode.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

__all__ = [
    "SinewError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "error_for", "from_rpc_error",
]


class SinewError(Exception):
    """A failed Sinew call.

    Attributes:
        code: the gRPC status code (``grpc.StatusCode``).
        message: the server's (or the client's) message, which names the field at fault.
        frame: for a frame that failed (in a stream, or a unary ``deform``), its number;
            otherwise None.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None, frame: Optional[int] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.frame = frame

    def __str__(self) -> str:
        where = f"frame {self.frame}: " if self.frame is not None else ""
        return f"{self.code.name}: {where}{self.message}"


class Cancelled(SinewError):
    code = grpc.StatusCode.CANCELLED


class Unknown(SinewError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(SinewError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(SinewError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(SinewError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(SinewError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(SinewError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(SinewError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(SinewError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(SinewError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(SinewError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(SinewError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(SinewError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(SinewError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(SinewError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(SinewError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[grpc.StatusCode, Type[SinewError]] = {
    cls.code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
                Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}
_BY_VALUE: Dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


def error_for(code: "grpc.StatusCode | int", message: str, frame: Optional[int] = None) -> SinewError:
    """The exception for a status code (a ``grpc.StatusCode`` or its integer value, as
    ``FrameError.code`` carries it) and a message."""
    if not isinstance(code, grpc.StatusCode):
        code = _BY_VALUE.get(int(code), grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(code, SinewError)(message, code, frame)


def from_rpc_error(error: grpc.RpcError) -> SinewError:
    """The exception for a failed gRPC call (``grpc.RpcError``, which is also a ``grpc.Call``)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else None
    return error_for(code or grpc.StatusCode.UNKNOWN, details or str(error))
