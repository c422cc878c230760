#!/usr/bin/env python3
"""Compares two point dumps of sinew-bench-baseline --dump (float32 x, y, z per point, pose-major):
prints the largest coordinate difference and how many points differ by more than 1e-5, and with
points_per_pose the largest difference per pose. Standard library only.
Usage: bench/compare_dump.py A B [points_per_pose]"""
import array
import sys


def load(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


a, b = load(sys.argv[1]), load(sys.argv[2])
if len(a) != len(b):
    sys.exit(f"different sizes: {len(a) // 3} and {len(b) // 3} points")
d = [max(abs(a[i] - b[i]), abs(a[i + 1] - b[i + 1]), abs(a[i + 2] - b[i + 2])) for i in range(0, len(a), 3)]
print(f"largest difference {max(d):.3e}; points differing by > 1e-5: {sum(x > 1e-5 for x in d)} of {len(d)}")
if len(sys.argv) > 3:
    n = int(sys.argv[3])
    for k in range(len(d) // n):
        row = d[k * n:(k + 1) * n]
        worst = max(range(n), key=row.__getitem__)
        print(f"pose {k:2d}: {row[worst]:.3e} (point {worst})")
