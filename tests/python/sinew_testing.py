"""Test helpers shared by the Python client's tests and the Blender add-on's test: a real
sinew-server on a loopback port chosen at run time, and a small procedural limb as numpy arrays
with a numpy reference of linear blend skinning."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import List, Optional, Sequence

import numpy as np


def server_path() -> str:
    path = os.environ.get("SINEW_SERVER", "")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError(f"SINEW_SERVER={path!r}: set it to the sinew-server binary (ctest does)")
    return path


class Server:
    """``sinew-server --listen 127.0.0.1:0`` (CPU backend, no admission control, a ``--cache-dir``
    of its own, as the C++ suites run it), stopped with SIGTERM by :meth:`stop` or at the end of a
    ``with`` block. The cache folder holds links to the operator grids of
    ``$SINEW_TEST_OPERATOR_CACHE`` (when set) and goes with the server: test servers shared the
    user's ``~/.cache/sinew`` until 2026-12-03."""

    def __init__(self, extra_args: Sequence[str] = (), start_timeout: float = 60.0) -> None:
        args: List[str] = [server_path(), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
        if "--gpu" not in extra_args:
            args += ["--gpu", "off"]
        if "--max-queue-ms" not in extra_args:
            args += ["--max-queue-ms", "0"]
        self.cache_dir: Optional[str] = None
        if "--cache-dir" not in extra_args:
            self.cache_dir = tempfile.mkdtemp(prefix="sinew-test-cache-")
            ops = os.environ.get("SINEW_TEST_OPERATOR_CACHE", "")
            for name in (os.listdir(ops) if ops and os.path.isdir(ops) else []):
                if name.endswith(".sinewop"):
                    os.symlink(os.path.join(ops, name), os.path.join(self.cache_dir, name))
            args += ["--cache-dir", self.cache_dir]
        args += list(extra_args)
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output: List[str] = []
        self.target: Optional[str] = None
        found = threading.Event()

        def read() -> None:  # keeps draining stdout so the server never blocks on it
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                m = re.search(r"grpc listening on (\S+)", line)
                if m and self.target is None:
                    self.target = m.group(1)
                    found.set()
            found.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not found.wait(start_timeout) or self.target is None:
            self.stop()
            raise RuntimeError("sinew-server did not start:\n" + "".join(self.output))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(5)
        if self.process.stdout is not None and not self._reader.is_alive():
            self.process.stdout.close()
        if self.cache_dir:
            shutil.rmtree(self.cache_dir, ignore_errors=True)  # the links, not what they point at
        return self.process.returncode

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def pause(self) -> None:
        """SIGSTOP, returning once every thread of the server has stopped (waitpid's WUNTRACED
        report comes when the whole group has). kill() alone returns before: the thread the signal
        went to stops the others when it next runs, and under load the others answered calls
        meanwhile (a test of a stopped server saw its close answered, 2026-12-07 CI)."""
        os.kill(self.process.pid, signal.SIGSTOP)
        until = time.monotonic() + 60
        while time.monotonic() < until:
            pid, status = os.waitpid(self.process.pid, os.WUNTRACED | os.WNOHANG)
            if pid and os.WIFSTOPPED(status):
                return
            if pid:  # it ended, reaped here: Popen is told, so nothing signals its pid again
                self.process.returncode = os.waitstatus_to_exitcode(status)
                raise RuntimeError(f"sinew-server ended (wait status {status}) instead of stopping")
            time.sleep(0.01)
        raise RuntimeError("sinew-server had not stopped a minute after SIGSTOP")

    def thread_states(self) -> str:
        """Each of the server's threads' state letter (/proc/PID/task/*/stat: T stopped, S sleeping,
        R running), counted: what a test of a stopped server prints when the server answered
        anyway (python.ErrorsTest saw both closes answered on 2026-12-08, after pause() had seen
        the stop; not reproduced in 13 runs, 8 of them beside three busy loops)."""
        counts: dict = {}
        try:
            for task in os.listdir(f"/proc/{self.process.pid}/task"):
                with open(f"/proc/{self.process.pid}/task/{task}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                counts[state] = counts.get(state, 0) + 1
        except OSError as e:
            return f"unreadable ({e})"
        return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))

    def resume(self) -> None:
        if self.process.returncode is None:  # (pause() found it ended: nothing to resume)
            os.kill(self.process.pid, signal.SIGCONT)


# -- a procedural limb ----------------------------------------------------------------------------

def quat_axis_angle(axis, angle: float) -> np.ndarray:
    axis = np.asarray(axis, dtype=np.float64)
    axis = axis / np.linalg.norm(axis)
    return np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]])


def rotation_matrix(q) -> np.ndarray:
    x, y, z, w = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def transform(q, t, s: float = 1.0) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = rotation_matrix(q) * s
    m[:3, 3] = t
    return m


class Limb:
    """A capped-free tube along a chain of three joints (shoulder, elbow, wrist), one unit apart,
    whose root is turned 30 degrees about z and moved, so that rest transforms matter. Weights blend
    two joints linearly over +-0.3 around the elbow and the wrist."""

    names = ["shoulder", "elbow", "wrist"]
    parents = np.array([-1, 0, 1])

    def __init__(self, rings: int = 40, segments: int = 24, radius: float = 0.3) -> None:
        root_q = quat_axis_angle([0, 0, 1], np.radians(30))
        root_t = np.array([0.5, -0.25, 0.1])
        self.rest_rotations = np.array([root_q, [0, 0, 0, 1], [0, 0, 0, 1]], dtype=np.float64)
        self.rest_translations = np.array([root_t, [1, 0, 0], [1, 0, 0]], dtype=np.float64)
        x = np.linspace(0.0, 3.0, rings)
        a = np.linspace(0, 2 * np.pi, segments, endpoint=False)
        local = np.stack([np.repeat(x, segments), radius * np.tile(np.cos(a), rings),
                          radius * np.tile(np.sin(a), rings)], axis=1)
        self.positions = (local @ rotation_matrix(root_q).T + root_t).astype(np.float32)
        tris = []
        for r in range(rings - 1):
            for s in range(segments):
                a0, a1 = r * segments + s, r * segments + (s + 1) % segments
                b0, b1 = a0 + segments, a1 + segments
                tris += [(a0, a1, b1), (a0, b1, b0)]
        self.triangles = np.array(tris, dtype=np.uint32)
        w = np.zeros((len(local), 3))
        lx = local[:, 0]
        t1 = np.clip((lx - 0.7) / 0.6, 0, 1)  # shoulder -> elbow around x = 1
        t2 = np.clip((lx - 1.7) / 0.6, 0, 1)  # elbow -> wrist around x = 2
        w[:, 0] = 1 - t1
        w[:, 1] = t1 * (1 - t2)
        w[:, 2] = t2
        self.dense_weights = w

    @property
    def vertex_count(self) -> int:
        return len(self.positions)

    def rest_world(self) -> np.ndarray:
        world = []
        for j, p in enumerate(self.parents):
            local = transform(self.rest_rotations[j], self.rest_translations[j])
            world.append(local if p < 0 else world[p] @ local)
        return np.array(world)

    def pose(self, elbow: float, wrist_twist: float = 0.0, shoulder: float = 0.0, scale: float = 1.0):
        """Local rotations and translations: the elbow bends about z, the wrist twists about x,
        the shoulder swings about y; the root keeps its rest place (and may scale)."""
        rot = np.array([
            self._mul(self.rest_rotations[0], quat_axis_angle([0, 1, 0], shoulder)),
            quat_axis_angle([0, 0, 1], elbow),
            quat_axis_angle([1, 0, 0], wrist_twist)])
        return rot, self.rest_translations.copy(), np.array([scale, 1.0, 1.0])

    @staticmethod
    def _mul(a, b) -> np.ndarray:
        ax, ay, az, aw = a
        bx, by, bz, bw = b
        return np.array([aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
                         aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz])

    def world(self, rotations, translations, scales=None) -> np.ndarray:
        world = []
        for j, p in enumerate(self.parents):
            local = transform(rotations[j], translations[j], 1.0 if scales is None else scales[j])
            world.append(local if p < 0 else world[p] @ local)
        return np.array(world)

    def lbs(self, rotations, translations, scales=None, weights=None) -> np.ndarray:
        """Linear blend skinning in float64: sum_j w_j W_j B_j^-1 p."""
        skin = self.world(rotations, translations, scales) @ np.linalg.inv(self.rest_world())
        w = self.dense_weights if weights is None else weights
        p = np.concatenate([self.positions.astype(np.float64), np.ones((self.vertex_count, 1))], axis=1)
        moved = np.einsum("jab,vb->vja", skin, p)[:, :, :3]
        return np.einsum("vj,vja->va", w, moved)


def wait_until(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
