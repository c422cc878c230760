"""Small numpy helpers for rigid transforms with uniform scale, in Sinew's conventions.

Quaternions are (x, y, z, w), unit length. A transform maps ``p -> s R p + t``. Matrices are 4x4
(or 3x4) acting on column vectors, as in Blender (``Matrix @ Vector``) and Eigen.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from .errors import InvalidArgument

__all__ = ["quaternions_from_matrices", "matrices_from_quaternions", "decompose", "compose"]


def _as_stack(m: np.ndarray, name: str) -> np.ndarray:
    try:
        a = np.asarray(m, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{name}: not an array of numbers ({e})") from None
    if a.ndim == 2:
        a = a[None]
    # (..., 4, 3) passed until 2026-12-03 and failed on its missing translation column (IndexError).
    if a.ndim != 3 or a.shape[1:] not in ((4, 4), (3, 4), (3, 3)):
        raise InvalidArgument(f"{name}: shape {np.shape(m)}; expected (..., 4, 4), (..., 3, 4) or (..., 3, 3)")
    return a


def quaternions_from_matrices(rotations: np.ndarray) -> np.ndarray:
    """(n, 3, 3) rotation matrices -> (n, 4) unit quaternions x, y, z, w (w >= 0)."""
    r = np.asarray(rotations, dtype=np.float64).reshape(-1, 3, 3)
    n = r.shape[0]
    q = np.empty((n, 4))
    tr = r[:, 0, 0] + r[:, 1, 1] + r[:, 2, 2]
    # Shepperd's method: divide by the largest of the four candidate components.
    cand = np.stack([tr, r[:, 0, 0], r[:, 1, 1], r[:, 2, 2]], axis=1)
    best = np.argmax(cand, axis=1)
    for i in range(n):
        m = r[i]
        k = best[i]
        if k == 0:
            s = np.sqrt(max(tr[i] + 1.0, 0.0)) * 2
            q[i] = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s]
        elif k == 1:
            s = np.sqrt(max(1.0 + m[0, 0] - m[1, 1] - m[2, 2], 0.0)) * 2
            q[i] = [0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s]
        elif k == 2:
            s = np.sqrt(max(1.0 + m[1, 1] - m[0, 0] - m[2, 2], 0.0)) * 2
            q[i] = [(m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s]
        else:
            s = np.sqrt(max(1.0 + m[2, 2] - m[0, 0] - m[1, 1], 0.0)) * 2
            q[i] = [(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q[q[:, 3] < 0] *= -1
    return q


def matrices_from_quaternions(quaternions: np.ndarray) -> np.ndarray:
    """(n, 4) quaternions x, y, z, w -> (n, 3, 3) rotation matrices (normalized first)."""
    q = np.asarray(quaternions, dtype=np.float64).reshape(-1, 4)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    x, y, z, w = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], axis=1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], axis=1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=1),
    ], axis=1)


def decompose(matrices: np.ndarray, name: str = "matrices",
              tolerance: float = 1e-4) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, 4, 4) or (n, 3, 4) similarity transforms -> rotations (n, 4) x,y,z,w, translations (n, 3)
    and uniform scales (n,). Raises InvalidArgument naming the index of a matrix that is not a
    rotation times a positive uniform scale (shear, non-uniform scale or a mirror), to `tolerance`
    relative to its scale."""
    m = _as_stack(matrices, name)
    if m.shape[1:] == (3, 3):
        m = np.concatenate([m, np.zeros((m.shape[0], 3, 1))], axis=2)
    lin = m[:, :3, :3]
    det = np.linalg.det(lin)
    scales = np.cbrt(det)
    for i in range(m.shape[0]):
        if not np.isfinite(det[i]) or det[i] <= 0:
            raise InvalidArgument(f"{name}[{i}]: determinant {det[i]:g}; expected a rotation with a positive uniform "
                                  "scale (no mirror)")
        r = lin[i] / scales[i]
        err = np.abs(r.T @ r - np.eye(3)).max()
        if err > tolerance:
            raise InvalidArgument(f"{name}[{i}]: not a rotation with a uniform scale (shear or non-uniform scale: "
                                  f"|R^T R - I| = {err:.3g})")
    rot = lin / scales[:, None, None]
    return quaternions_from_matrices(rot), m[:, :3, 3].copy(), scales


def compose(rotations: np.ndarray, translations: np.ndarray, scales: "np.ndarray | None" = None) -> np.ndarray:
    """Rotations (n, 4) x,y,z,w, translations (n, 3), optional scales (n,) -> (n, 4, 4) matrices."""
    r = matrices_from_quaternions(rotations)
    n = r.shape[0]
    s = np.ones(n) if scales is None or len(scales) == 0 else np.asarray(scales, dtype=np.float64).reshape(n)
    out = np.zeros((n, 4, 4))
    out[:, :3, :3] = r * s[:, None, None]
    out[:, :3, 3] = np.asarray(translations, dtype=np.float64).reshape(n, 3)
    out[:, 3, 3] = 1
    return out
