#!/usr/bin/python3
"""Draws bend-plane slices of implicit skinning's contact (issue 15) from sinew-implicit-slices'
CSV: one PNG per fixture (cylinder, arm, bcn), a row per bend angle (and, for a fixture named
`picture/row`, per row name: BCN_Epileptic's joints and bend planes), a column per method; the
current code in black over an earlier build's slices in red (if given).

  scripts/install-deps.sh --docs          # python3-matplotlib
  build/bench/sinew-implicit-slices after.csv
  (an earlier checkout's build) .../sinew-implicit-slices before.csv
  scripts/implicit_slices.py after.csv [before.csv] [--out docs] [--only bcn]

Debian's /usr/bin/python3 has the packages; another python3 first on PATH may not.
"""
import argparse
import collections
import csv
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402

METHODS = ["dqs", "implicit", "elastic-implicit"]
TITLES = {"dqs": "DQS", "implicit": "implicit (IS)", "elastic-implicit": "elastic (EIS), 10° steps"}


def read(path):
    segs = collections.defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (row["fixture"], row["method"], int(float(row["degrees"])))
            segs[key].append(((float(row["x0"]), float(row["y0"])), (float(row["x1"]), float(row["y1"]))))
    return segs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("after")
    ap.add_argument("before", nargs="?")
    ap.add_argument("--out", default="docs")
    ap.add_argument("--only", action="append", help="draw only this picture (cylinder, arm, bcn); repeatable")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    after = read(a.after)
    before = read(a.before) if a.before else {}
    pictures = sorted({k[0].split("/")[0] for k in after} & set(a.only or [k[0].split("/")[0] for k in after]))
    for pic in pictures:
        # Rows: (fixture, angle), in the order the tool wrote them.
        rows = list(dict.fromkeys((k[0], k[2]) for k in after if k[0].split("/")[0] == pic))
        fig, axes = plt.subplots(len(rows), len(METHODS), figsize=(4 * len(METHODS), 4 * len(rows)), squeeze=False)
        for r, (fx, deg) in enumerate(rows):
            label = fx.split("/", 1)[1] + "\n" if "/" in fx else ""
            for c, m in enumerate(METHODS):
                ax = axes[r][c]
                if (fx, m, deg) in before and m != "dqs":
                    ax.add_collection(LineCollection(before[(fx, m, deg)], colors="tab:red", linewidths=0.8))
                ax.add_collection(LineCollection(after.get((fx, m, deg), []), colors="black", linewidths=0.8))
                ax.axhline(0, color="0.8", linewidth=0.5)
                ax.axvline(0, color="0.8", linewidth=0.5)
                ax.set_aspect("equal")
                ax.set_xlim(-3.5, 2.5)
                ax.set_ylim(-2.5, 3.5)
                ax.set_title(f"{label}{TITLES[m]}, {deg}°", fontsize=10)
                ax.tick_params(labelsize=7)
        note = " (red: before issue 15)" if before else ""
        fig.suptitle(f"{pic}: the skin cut by the bend's plane, in radii from the joint{note}", fontsize=11)
        fig.tight_layout()
        path = os.path.join(a.out, f"implicit-slices-{pic}.png")
        fig.savefig(path, dpi=80)
        print(path)


if __name__ == "__main__":
    main()
