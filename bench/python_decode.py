#!/usr/bin/python3
"""How long the Python client (clients/python) takes to decode a frame of each wire encoding, per
frame of a whole clip, on

* the procedural limb of tests/python (20 000 vertices: 200 rings of 100; the elbow bends to 120
  degrees, the wrist twists 180 degrees over 90 frames), deformed by a real sinew-server (DQS) in
  every encoding over StreamDeform: the server's own frames;
* BCN_Epileptic (assimp-testmodels, 15 378 vertices, its clip at 30 frames/s): its frames baked by
  a real server (`sinew batch --pc2`), then DELTA-encoded here by the numpy reference encoder
  below (the server's grid and rules: docs/wire-encodings.md), checked bit for bit against the
  C++ decoder (sinew-decode-frames) before anything is timed. The Python client has no asset
  importer, so this is how BCN's motion reaches its delta decoder.

    PYTHONPATH=clients/python:build/clients/python/gen:tests/python \\
      /usr/bin/python3 bench/python_decode.py --build build [--passes 5]

Prints, per clip and encoding, microseconds per frame (the best of `--passes` passes over all
frames, key frames included). To compare decoders, put another copy of the package first on
PYTHONPATH (e.g. one exported with `git archive`).
"""
from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

import sinew
from sinew_testing import Limb, Server

BCN = "/usr/share/assimp/models/X/BCN_Epileptic.X"


def limb_poses(limb: Limb, count: int):
    for i in range(count):
        t = i / (count - 1)
        yield sinew.Pose(*limb.pose(np.radians(120 * t), np.radians(180 * t), np.radians(20 * np.sin(7 * t)))[:2])


def limb_rig(limb: Limb):
    skeleton = sinew.Skeleton(limb.names, limb.parents, limb.rest_rotations, limb.rest_translations)
    return sinew.build_rig(limb.positions, skeleton, sinew.SkinWeights.dense(limb.dense_weights), limb.triangles)


def read_pc2(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        head = f.read(32)
        _, points, _, _, samples = struct.unpack("<iiffi", head[12:])
        return np.frombuffer(f.read(), dtype="<f4").reshape(samples, points, 3)


def pack(u: np.ndarray) -> bytes:
    """(3, n) uint32 -> blocks of 16 per axis, a width byte then the values' low bits, LSB first."""
    out = bytearray()
    n = u.shape[1]
    blocks = (n + 15) // 16
    for a in range(3):
        v = np.zeros(blocks * 16, np.uint64)
        v[:n] = u[a]
        v = v.reshape(blocks, 16)
        widths = np.array([int(b.max()).bit_length() for b in v])
        for b, w in zip(v, widths):
            out.append(int(w))
            if w:
                bits = ((b[:, None] >> np.arange(w, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8).ravel()
                out += np.packbits(bits, bitorder="little").tobytes()
    return bytes(out)


def delta_encode(frames: np.ndarray, max_error: float = 1e-4, interval: int = 30):
    """DeformResponses of a clip in OUTPUT_ENCODING_DELTA: about the server's grid (step 2 max_error d /
    sqrt(3), origin the box's center; here the box of the whole clip), key frames every
    `interval` frames (differences along the vertex order), between them residuals of the last
    frame (the first after a key frame) or of 2 q[t-1] - q[t-2], zigzagged."""
    lo, hi = frames.reshape(-1, 3).min(axis=0).astype(np.float64), frames.reshape(-1, 3).max(axis=0).astype(np.float64)
    origin = 0.5 * (lo + hi)
    step = 2 * max_error * float(np.linalg.norm(hi - lo)) / np.sqrt(3.0)
    out = []
    q1 = q2 = None
    for i, xyz in enumerate(frames):
        q = np.round((xyz.astype(np.float64) - origin) / step).astype(np.int64).T  # (3, n)
        since = i % interval
        if since == 0:
            d = np.diff(q, axis=1, prepend=0)
        elif since == 1:
            d = q - q1
        else:
            d = q - (2 * q1 - q2)
        z = ((d << 1) ^ (d >> 63)).astype(np.uint32)  # zigzag
        r = sinew.pb.DeformResponse(frame=i, vertex_count=xyz.shape[0], encoding=sinew.pb.OUTPUT_ENCODING_DELTA,
                                    positions=pack(z))
        qq = r.quantization
        qq.offset_x, qq.offset_y, qq.offset_z = origin
        qq.scale_x = qq.scale_y = qq.scale_z = step
        qq.key_frame, qq.since_key_frame = since == 0, since
        out.append(r)
        q2, q1 = q1, q
    return out


def cpp_decode(tool: str, responses) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "frames"), os.path.join(tmp, "xyz")
        with open(src, "wb") as f:
            for r in responses:
                data = r.SerializeToString()
                f.write(struct.pack("<I", len(data)) + data)
        subprocess.run([tool, src, dst], check=True)
        return np.fromfile(dst, dtype="<f4").reshape(len(responses), -1, 3)


def time_decode(responses, passes: int) -> float:
    """Microseconds per frame, the best pass."""
    best = float("inf")
    for _ in range(passes):
        decoder = sinew.PositionDecoder()
        t = time.perf_counter()
        for r in responses:
            decoder.decode(r)
        best = min(best, (time.perf_counter() - t) / len(responses))
    return best * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="the CMake build folder (server, sinew, sinew-decode-frames)")
    ap.add_argument("--passes", type=int, default=5)
    args = ap.parse_args()
    server_bin = os.path.join(args.build, "server", "sinew-server")
    os.environ.setdefault("SINEW_SERVER", server_bin)
    tool = os.path.join(args.build, "tests", "sinew-decode-frames")
    print(f"sinew package: {os.path.dirname(sinew.__file__)}")
    rows = []
    with Server() as server, tempfile.TemporaryDirectory() as tmp:
        client = sinew.connect(server.target, token="")
        limb = Limb(rings=200, segments=100)
        rig_id = client.upload_rig(limb_rig(limb)).rig_id
        pose_list = list(limb_poses(limb, 90))
        for enc in ("f32", "f16", "q16", "delta"):
            with client.create_session(rig_id, "dqs", encoding=enc) as s:
                responses = [f.response for f in s.stream(pose_list)]
            rows.append((f"limb {limb.vertex_count}", enc, len(responses),
                         np.mean([len(r.positions) for r in responses]), time_decode(responses, args.passes)))
        pc2 = os.path.join(tmp, "bcn.pc2")
        subprocess.run([os.path.join(args.build, "clients", "sinew"), "batch", BCN, "--pc2", pc2, "--method", "lbs",
                        "--target", server.target], check=True, capture_output=True)
        frames = read_pc2(pc2)
        responses = delta_encode(frames)
        decoder = sinew.PositionDecoder()
        mine = np.stack([decoder.decode(r) for r in responses])
        theirs = cpp_decode(tool, responses)
        if mine.tobytes() != theirs.tobytes():
            print("BCN: the Python and C++ decoders disagree", file=sys.stderr)
            return 1
        diag = float(np.linalg.norm(frames.reshape(-1, 3).max(axis=0) - frames.reshape(-1, 3).min(axis=0)))
        err = float(np.linalg.norm(mine - frames, axis=2).max()) / diag
        rows.append((f"BCN_Epileptic {frames.shape[1]}", "delta", len(responses),
                     np.mean([len(r.positions) for r in responses]), time_decode(responses, args.passes)))
        print(f"BCN_Epileptic: {len(frames)} frames re-encoded, bit for bit as the C++ decoder, within {err:.3g} of "
              "the diagonal (max_error 1e-4)")
    print(f"{'clip':22} {'encoding':8} {'frames':>6} {'bytes/frame':>11} {'us/frame':>9}")
    for clip, enc, n, size, us in rows:
        print(f"{clip:22} {enc:8} {n:6d} {size:11.0f} {us:9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
