"""Decoders of the position encodings of the wire (``sinew.v1.OutputEncoding``), in numpy.

A port of the decoding half of ``proto/sinew/v1/position_codec.{h,cc}`` (the C++ client's
``PositionDecoder``); the byte layout is in ``docs/wire-encodings.md``. Decoded positions are
bit-for-bit those of the C++ decoder: every coordinate is ``float32(offset + scale * q)``
evaluated in float64, as there.

* FLOAT32: little-endian float32 x,y,z per vertex (exact).
* FLOAT16: IEEE half x,y,z per vertex (relative error <= 2^-11 per coordinate).
* QUANTIZED16: uint16 x,y,z per vertex in the frame's own box; stateless.
* DELTA: integer grid coordinates, as a key frame (differences along the vertex order) or as
  residuals of a prediction from the stream's previous frames (the last frame after a key frame,
  then constant velocity 2 q[t-1] - q[t-2]), zigzagged and bit-packed in blocks of 16 values with
  one width byte per block, axis after axis. A stream's frames must be decoded in order by one
  :class:`DeltaDecoder`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from .errors import DataLoss, FailedPrecondition, error_for

__all__ = ["Quantization", "decode_float32", "decode_float16", "decode_quantized16", "DeltaDecoder",
           "PositionDecoder"]

_BLOCK = 16
_AXES = "xyz"

# sinew.v1.OutputEncoding values (kept here so that this module needs no generated code).
FLOAT32, FLOAT16, QUANTIZED16, DELTA = 0, 1, 2, 3


@dataclass
class Quantization:
    """How a quantized frame's integers map to positions: ``x = offset[0] + scale[0] * q_x``."""

    offset: tuple = (0.0, 0.0, 0.0)
    scale: tuple = (0.0, 0.0, 0.0)
    key_frame: bool = True
    since_key_frame: int = 0

    @classmethod
    def from_proto(cls, q) -> "Quantization":
        """From a ``sinew.v1.Quantization`` message."""
        return cls((q.offset_x, q.offset_y, q.offset_z), (q.scale_x, q.scale_y, q.scale_z), q.key_frame,
                   q.since_key_frame)


def _dequantize(q: np.ndarray, quant: Quantization) -> np.ndarray:
    """(n, 3) integer coordinates -> float32 positions, each float32(offset + scale * q) in float64."""
    offset = np.asarray(quant.offset, dtype=np.float64)
    scale = np.asarray(quant.scale, dtype=np.float64)
    return (offset + scale * q.astype(np.float64)).astype(np.float32)


def decode_float32(data: bytes, vertex_count: int) -> np.ndarray:
    """Little-endian float32 x,y,z per vertex -> (vertex_count, 3) float32."""
    if len(data) != 12 * vertex_count:
        raise DataLoss(f"positions: {len(data)} bytes; float32 needs 12 per vertex ({12 * vertex_count})")
    return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(vertex_count, 3)


def decode_float16(data: bytes, vertex_count: int) -> np.ndarray:
    """IEEE half x,y,z per vertex -> (vertex_count, 3) float32 (each half converted exactly)."""
    if len(data) != 6 * vertex_count:
        raise DataLoss(f"positions: {len(data)} bytes; float16 needs 6 per vertex ({6 * vertex_count})")
    return np.frombuffer(data, dtype="<f2").astype(np.float32).reshape(vertex_count, 3)


def decode_quantized16(data: bytes, vertex_count: int, quant: Quantization) -> np.ndarray:
    """QUANTIZED16: uint16 x,y,z per vertex -> (vertex_count, 3) float32."""
    if len(data) != 6 * vertex_count:
        raise DataLoss(f"positions: {len(data)} bytes; quantized16 needs 6 per vertex ({6 * vertex_count})")
    q = np.frombuffer(data, dtype="<u2").reshape(vertex_count, 3)
    return _dequantize(q, quant)


def _unpack(data: bytes, n: int) -> np.ndarray:
    """The three axes' residuals of a DELTA frame, (3, n) uint32: per axis ceil(n / 16) blocks, each a
    width byte W (<= 32) and 16 values of W bits, least significant bit first (2 W bytes)."""
    blocks = (n + _BLOCK - 1) // _BLOCK
    size = len(data)
    starts: List[int] = []
    widths: List[int] = []
    pos = 0
    for b in range(3 * blocks):
        if pos >= size:
            raise DataLoss(f"positions: the delta frame's bytes end before its {n} vertices' "
                           f"{_AXES[b // blocks]} coordinates ({size} bytes)")
        w = data[pos]
        pos += 1
        if w > 32 or size - pos < 2 * w:
            raise DataLoss(f"positions: the delta frame's bytes end before its {n} vertices' "
                           f"{_AXES[b // blocks]} coordinates ({size} bytes)")
        starts.append(pos)
        widths.append(w)
        pos += 2 * w
    if pos != size:
        raise DataLoss(f"positions: {size - pos} bytes after the delta frame's {n} vertices")
    out = np.zeros((3 * blocks, _BLOCK), dtype=np.uint32)
    if blocks == 0:
        return out.reshape(3, 0)
    buf = np.frombuffer(data, dtype=np.uint8)
    start = np.asarray(starts, dtype=np.int64)
    width = np.asarray(widths, dtype=np.int64)
    for w in np.unique(width):
        w = int(w)
        if w == 0:
            continue  # all zeros
        rows = np.nonzero(width == w)[0]
        packed = buf[start[rows, None] + np.arange(2 * w)]  # (k, 2w) bytes
        bits = np.unpackbits(packed, axis=1, bitorder="little").reshape(len(rows) * _BLOCK, w)
        wide = np.zeros((bits.shape[0], 32), dtype=np.uint8)
        wide[:, :w] = bits
        values = np.packbits(wide, axis=1, bitorder="little").view("<u4").reshape(len(rows), _BLOCK)
        out[rows] = values
    return out.reshape(3, blocks * _BLOCK)[:, :n]


class DeltaDecoder:
    """Decodes one stream's DELTA frames, in order (the C++ ``wire::DeltaDecoder``).

    A frame that is not a key frame needs the one before it; otherwise :class:`FailedPrecondition`.
    Bytes that do not decode give :class:`DataLoss`. Either leaves the decoder as it was.
    """

    def __init__(self) -> None:
        self._started = False
        self._since_key = 0
        self._q1: Optional[np.ndarray] = None  # (3, n) uint32: the last frame's coordinates
        self._q2: Optional[np.ndarray] = None  # the one before

    def reset(self) -> None:
        """Forgets the stream (the next frame must be a key frame)."""
        self._started = False
        self._q1 = self._q2 = None

    def decode(self, data: bytes, vertex_count: int, quant: Quantization) -> np.ndarray:
        n = vertex_count
        since = 0 if quant.key_frame else int(quant.since_key_frame)
        if not quant.key_frame:
            if (since == 0 or not self._started or since != self._since_key + 1 or self._q1 is None
                    or self._q1.shape[1] != n):
                last = (f"last decoded the frame {self._since_key} after one" if self._started
                        else "has decoded none")
                raise FailedPrecondition(
                    f"positions: a delta frame {since} frames after its key frame, but this decoder {last}: "
                    "decode a stream's frames in order, from a key frame (DeformRequest.key_frame asks for one)")
            if since >= 2 and (self._q2 is None or self._q2.shape[1] != n):
                raise FailedPrecondition("positions: the decoder lost a frame")
        r = _unpack(bytes(data), n)
        d = (r >> np.uint32(1)) ^ (np.uint32(0) - (r & np.uint32(1)))  # un-zigzag, wrapping
        with np.errstate(over="ignore"):
            if since == 0:
                c = np.cumsum(d, axis=1, dtype=np.uint32)
            elif since == 1:
                c = self._q1 + d
            else:
                c = np.uint32(2) * self._q1 - self._q2 + d
        positions = _dequantize(c.view(np.int32).T, quant)
        self._q2, self._q1 = self._q1, c
        self._started = True
        self._since_key = since
        return positions


Response = object  # a sinew.v1.DeformResponse or DeformClipResponse


class PositionDecoder:
    """Positions of one stream's responses (a ``StreamDeform`` stream of one session, or a
    ``DeformClip`` batch), every encoding. Give it every frame of the stream in order; after an
    error ask the server for a key frame (``key_frame=True`` on the next request)."""

    def __init__(self) -> None:
        self.delta = DeltaDecoder()

    def reset(self) -> None:
        self.delta.reset()

    def decode(self, response: Response) -> np.ndarray:
        """(vertex_count, 3) float32 positions of a response; raises the frame's error as a
        :class:`~sinew.errors.SinewError`."""
        frame = getattr(response, "frame", None)
        fields = response.DESCRIPTOR.fields_by_name
        if "error" in fields and response.HasField("error"):
            raise error_for(response.error.code, response.error.message, frame)
        if getattr(response, "skipped", False):
            raise FailedPrecondition(f"frame {frame} was skipped for a newer one (latest_pose_wins): it has no "
                                     "positions", frame=frame)
        if "shared_positions" in fields and response.HasField("shared_positions"):
            raise FailedPrecondition(f"frame {frame}: its positions are in a shared-memory region, which this "
                                     "client does not use", frame=frame)
        return decode_positions(response.positions, response.vertex_count, int(response.encoding),
                                Quantization.from_proto(response.quantization), self.delta)


def decode_positions(data: bytes, vertex_count: int, encoding: int, quant: Quantization,
                     delta: Optional[DeltaDecoder] = None) -> np.ndarray:
    """Positions in any encoding -> (vertex_count, 3) float32. DELTA frames other than key frames
    need their stream's `delta` decoder."""
    if encoding == FLOAT32:
        return decode_float32(data, vertex_count)
    if encoding == FLOAT16:
        return decode_float16(data, vertex_count)
    if encoding == QUANTIZED16:
        return decode_quantized16(data, vertex_count, quant)
    if encoding == DELTA:
        if delta is None:
            if not quant.key_frame:
                raise FailedPrecondition("positions: a delta frame between key frames; decode the stream's "
                                         "frames with a PositionDecoder")
            delta = DeltaDecoder()
        return delta.decode(data, vertex_count, quant)
    raise DataLoss(f"positions: unknown encoding {encoding}")

