"""Same-host frames through POSIX shared memory (``RegisterSharedMemory``).

A client on the server's host creates a shared-memory object named ``/sinew-...``, the server
maps it (it must run with ``--shared-memory-bytes``, the most it maps at once), and frames that
name it in ``FrameOutputs.shared_memory`` get their positions written there: the response carries
only where (``DeformResponse.shared_positions``), in the session's encoding. The client must not
read a frame's range before its response arrives, nor let another frame use it meanwhile; the
:class:`~sinew.Session` methods that take a region keep to that.

The object is made with :mod:`multiprocessing.shared_memory` (mode 0600, the creating user only,
like the C++ client's ``SharedMemory``), so that Python's resource tracker unlinks it should this
process die without :meth:`SharedMemoryRegion.close`.
"""
from __future__ import annotations

import itertools
import os
import secrets
from typing import TYPE_CHECKING, Any, Optional

import grpc

from ._proto import pb
from .errors import DataLoss, InvalidArgument, SinewError, error_for

if TYPE_CHECKING:
    from multiprocessing import shared_memory

__all__ = ["SharedMemoryRegion", "frame_bytes"]

_serial = itertools.count()


def frame_bytes(vertex_count: int, encoding: int) -> int:
    """The most bytes one frame of `vertex_count` vertices takes in a region, for an encoding
    (a ``sinew.v1.OutputEncoding`` value), rounded up to a multiple of 4 (region offsets are):
    12 per vertex for float32, 6 for float16 and quantized16, and for delta its worst case, every
    block of 16 values 32 bits wide (a width byte and 64 bytes per block and axis)."""
    if encoding == pb.OUTPUT_ENCODING_FLOAT32:
        n = 12 * vertex_count
    elif encoding in (pb.OUTPUT_ENCODING_FLOAT16, pb.OUTPUT_ENCODING_QUANTIZED16):
        n = 6 * vertex_count
    else:
        n = 3 * 65 * ((vertex_count + 15) // 16)
    return (n + 3) // 4 * 4


class SharedMemoryRegion:
    """A POSIX shared-memory object of `size` bytes created by this process and registered with
    the server (``Client.shared_memory(size)`` makes one). :meth:`close` (or the end of a ``with``
    block) unregisters it, unmaps it and unlinks it.

    Attributes: ``region_id`` (what frames name), ``name`` (``/sinew-...``), ``size``, ``buf``
    (a memoryview of the whole region)."""

    def __init__(self, client: Any, size: int) -> None:
        if size <= 0:
            raise InvalidArgument(f"shared_memory: {size} bytes; expected > 0")
        self.client = client
        self.size = int(size)
        self.region_id = ""
        # The server's rule: "/sinew-" then 1 to 200 of [A-Za-z0-9._-].
        base = f"sinew-{os.getpid()}-{next(_serial)}-{secrets.token_hex(4)}"
        # Imported here, not with the package: in Blender 3.4.1 (Python 3.11) a process that has
        # imported multiprocessing.shared_memory crashes at exit (segfault while Blender disables
        # its add-ons), and the Blender add-on never makes a region.
        from multiprocessing import shared_memory
        try:
            self._shm: Optional[shared_memory.SharedMemory] = shared_memory.SharedMemory(base, create=True,
                                                                                        size=self.size)
        except OSError as e:
            raise error_for(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"shared_memory: cannot create /{base} of {self.size} bytes: {e.strerror}") from e
        self.name = "/" + base
        try:
            region = client._call(client.stub.RegisterSharedMemory,
                                  pb.RegisterSharedMemoryRequest(name=self.name, bytes=self.size))
        except BaseException:
            self._release()
            raise
        self.region_id = region.region_id

    @property
    def buf(self) -> memoryview:
        if self._shm is None:
            raise InvalidArgument(f"shared_memory {self.name}: closed")
        return self._shm.buf

    @property
    def closed(self) -> bool:
        return self._shm is None

    def positions(self, response: Any) -> memoryview:
        """The bytes a response placed in this region (``DeformResponse.shared_positions``),
        checked against it: :class:`InvalidArgument` for another region's, :class:`DataLoss` for a
        range outside this one."""
        where = response.shared_positions
        if where.region_id != self.region_id:
            raise InvalidArgument(f"shared_positions.region_id: {where.region_id!r} is not this region "
                                  f"({self.region_id!r})")
        if where.offset > self.size or where.bytes > self.size - where.offset:
            raise DataLoss(f"shared_positions: {where.bytes} bytes at {where.offset} leave the region's {self.size}")
        return self.buf[where.offset:where.offset + where.bytes]

    def _release(self) -> None:
        shm, self._shm = self._shm, None
        if shm is None:
            return
        try:
            shm.close()
        except BufferError:
            # A view of it is still alive somewhere (a slice of `buf`, or one held by a decode
            # error's traceback): the mapping cannot be closed under it and stays until the last
            # view goes, but nothing else needs to. Until 2026-12-07 the object's file descriptor
            # stayed open with it for the life of the process (and with it the object's memory,
            # unlinked or not), and its finaliser printed "Exception ignored ... BufferError".
            fd = getattr(shm, "_fd", -1)
            if fd >= 0:
                os.close(fd)
                shm._fd = -1  # type: ignore[attr-defined]
            shm._buf = None  # type: ignore[attr-defined]  # the view and the mmap: the last
            shm._mmap = None  # type: ignore[attr-defined]  # view's end unmaps it
        try:
            shm.unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Unregisters the region (frames naming it then fail with NOT_FOUND; the server keeps
        its mapping until frames using it finish), then unmaps and unlinks the object. Safe to
        call twice; an unreachable server does not keep the object from being unlinked."""
        if self._shm is None:
            return
        try:
            if self.region_id:
                self.client._call(self.client.stub.UnregisterSharedMemory,
                                  pb.UnregisterSharedMemoryRequest(region_id=self.region_id), timeout=5.0)
        except SinewError:
            pass  # the server is gone (or forgot it): nothing left to unregister
        finally:
            self._release()

    def __enter__(self) -> "SharedMemoryRegion":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SharedMemoryRegion({self.region_id!r}, {self.name}, {self.size} bytes)"
