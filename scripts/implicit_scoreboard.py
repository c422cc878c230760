#!/usr/bin/python3
"""Issue 15's open figures in one run, saved and compared: the elastic method's contact at the
character joints and its sensitivity, for judging a change to the implicit methods
(docs/implicit-skinning-log.md) without reading two test logs row by row.

  scripts/implicit_scoreboard.py --save before.json              # the landed code
  SINEW_EXP_...=1 scripts/implicit_scoreboard.py --against before.json   # a switch of a patch

Two parts, each run from the build tree (--build, default build/):
  contact     sinew-import-tests --gtest_filter='ImplicitContactAsset.*' (about 70 s on 2 cores):
              per fixture, angle and method the contact crossing, its crease part and the crease
              folds (count, deepest), all in the joint's radius R, as the tests print them; and
              which tests and how many assertions failed;
  stability   sinew-implicit-stability --method elastic-implicit --jobs 2 at each sampling of
              --samplings (default 6-12) of BCN_Epileptic's clip (--bcn-frames) and, unless
              --characters says otherwise, of Testwuson's (--asset X/Testwuson.X --asset-frames;
              since 2026-12-06), and on the limb (about 4 minutes): the
              worst move over the diagonal under --turn (default 1e-6 rad), the vertex-frames
              beyond 1e-4 and the output checksum; and the frame where the method's deepest
              vertex newly inside the skin is deepest beyond dual quaternion skinning's (what
              the method folds that its input did not: by how much, over the diagonal, and the
              joint at that vertex); and the frame where the most skin hidden inside the rest
              skin comes out of it beyond DQS's (vertices, the method's and DQS's count there).
--parts contact or --parts stability runs one. Without --against it prints every elastic row
and each sampling against the issue's bounds (contact crossing <= 0.05 R, no crease fold at 90°,
sensitivity <= 1e-4); with --against FILE (an earlier --save) it prints only what changed beyond
--tolerance (0.003 R; any change of a fold count; any change of a sensitivity figure; a fold
beyond DQS's deeper or shallower by 1e-4 of the diagonal or more; any change of the hidden
skin out beyond DQS's; files saved before 2026-12-06 have no such figure), old ->
new, and how many figures got better and worse. Environment switches of experiment
patches (docs/experiments/) pass through to the programs. Exit status: 0 when the programs ran
(failing assertions are reported, not an error), 1 when one could not run or printed nothing to
parse, 2 on bad arguments.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROW = re.compile(
    r"^(?P<fixture>.*?)\s+(?P<angle>\d+)°\s+(?P<method>dqs|implicit|elastic, 10° steps|elastic, one jump)\s+"
    r"crossing (?P<crossing>[\d.]+) R, contact crossing (?P<contact>[\d.]+) R \(crease (?P<crease>[\d.]+) R\), "
    r"inside\s+(?P<inside>\d+), deepest (?P<deepest>[\d.]+) R; in the crease\s+(?P<folds>\d+), "
    r"deepest (?P<fold_depth>[\d.]+) R$")
FAILED_TEST = re.compile(r"^\[  FAILED  \] (ImplicitContactAsset\.\w+) \(")
WORST = re.compile(r"^\s+worst (?P<worst>[\d.e+-]+) of the diagonal, (?P<beyond>\d+) vertex-frames beyond 1e-4")
CHECKSUM = re.compile(r"^\s+output checksum (?P<sum>[0-9a-f]+)")
# A frame's line: its label, largest move, vertices beyond 1e-4, ...; inside: DQS's and the method's
# new inside vertices, each with its deepest over the diagonal and the joint there ("-": none).
FRAME = re.compile(r"^\s+(?P<label>\S.*?)\s+(?P<move>\d[\d.]*e[+-]\d+)\s+(?P<beyond>\d+)\s+\(worst at [^)]*\).*; "
                   r"inside: DQS (?P<dqs_n>\d+) \((?P<dqs_d>\d[\d.]*e[+-]\d+) at (?P<dqs_j>\S+)\), "
                   r"method (?P<n>\d+) \((?P<d>\d[\d.]*e[+-]\d+) at (?P<j>\S+)\)"
                   r"(?:; hidden skin out: DQS (?P<dqs_out>\d+), method (?P<out>\d+))?$")
FOLD_STEP = 1e-4  # of the diagonal: a change of the fold beyond DQS's that compare reports
METHOD_SHORT = {"dqs": "dqs", "implicit": "implicit", "elastic, 10° steps": "steps", "elastic, one jump": "jump"}


def parse_contact(text):
    """The rows, failed tests and assertion failures of the contact tests' output."""
    rows, failed, assertions = {}, [], 0
    for line in text.splitlines():
        line = line.rstrip()
        m = ROW.match(line.strip())
        if m:
            key = "%s | %s | %s" % (m["fixture"], m["angle"], METHOD_SHORT[m["method"]])
            rows[key] = {"contact": float(m["contact"]), "crease": float(m["crease"]), "crossing": float(m["crossing"]),
                         "folds": int(m["folds"]), "fold_depth": float(m["fold_depth"])}
        elif line.endswith(": Failure"):
            assertions += 1
        else:
            f = FAILED_TEST.match(line)
            if f and f[1] not in failed:
                failed.append(f[1])
    return {"rows": rows, "failed_tests": failed, "failed_assertions": assertions}


def parse_stability(text):
    """The worst move, vertex-frames beyond 1e-4 and checksum of one sinew-implicit-stability run,
    and its fold beyond DQS's: the frame where the method's deepest new inside vertex is deepest
    beyond DQS's (by 0 and no frame where it never is)."""
    out = {}
    fold = {"by": 0.0, "frame": None, "joint": None}
    hidden = None  # the frame where the most skin hidden at rest shows beyond DQS's (runs before 2026-12-06: none)
    for line in text.splitlines():
        m = WORST.match(line)
        if m:
            out["worst"], out["beyond"] = float(m["worst"]), int(m["beyond"])
        c = CHECKSUM.match(line)
        if c:
            out["checksum"] = c["sum"]
        f = FRAME.match(line)
        if f:
            by = round(float(f["d"]) - float(f["dqs_d"]), 8)
            if by > fold["by"]:
                fold = {"by": by, "frame": f["label"], "joint": f["j"]}
            if f["out"] is not None:
                extra = int(f["out"]) - int(f["dqs_out"])
                if hidden is None or extra > hidden["by"]:
                    hidden = {"by": extra, "frame": f["label"], "method": int(f["out"]), "dqs": int(f["dqs_out"])}
    if "worst" not in out:
        return None
    out["fold_beyond_dqs"] = fold
    if hidden is not None:
        out["hidden_out_beyond_dqs"] = hidden
    return out


def fold_text(fold):
    return "%.1e at %s (%s)" % (fold["by"], fold["frame"], fold["joint"]) if fold["frame"] else "none"


def hidden_text(hidden):
    if not hidden:
        return "?"
    return "%+d at %s (%d, DQS %d)" % (hidden["by"], hidden["frame"], hidden["method"], hidden["dqs"])


def samplings(spec):
    """'6-12' or '5,9,13' -> [6, ..., 12] or [5, 9, 13]."""
    try:
        if "-" in spec:
            lo, hi = (int(x) for x in spec.split("-", 1))
            values = list(range(lo, hi + 1))
        else:
            values = [int(x) for x in spec.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 1 or v > 999 for v in values):
        raise argparse.ArgumentTypeError("expected N-M or N,M,... with each in [1, 999], got %r" % spec)
    return values


CHARACTERS = {"bcn": lambda n: ["--bcn", "--bcn-frames", str(n)],
              "testwuson": lambda n: ["--asset", "X/Testwuson.X", "--asset-frames", str(n)]}


def run_order(name):
    """'bcn 6' before 'bcn 10', then Testwuson's samplings, the limb last."""
    if name == "limb":
        return (len(CHARACTERS), 0)
    character, n = name.split()
    return (list(CHARACTERS).index(character) if character in CHARACTERS else len(CHARACTERS), int(n))


def run(cmd):
    print("  $ " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        sys.exit("implicit_scoreboard: %s: %s" % (cmd[0], e))
    return p.returncode, p.stdout


def measure(args):
    result = {"environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("SINEW_")}}
    if "contact" in args.parts:
        exe = os.path.join(args.build, "tests", "sinew-import-tests")
        _, text = run([exe, "--gtest_filter=ImplicitContactAsset.*"])
        contact = parse_contact(text)
        if not contact["rows"]:
            sys.exit("implicit_scoreboard: %s printed no contact rows:\n%s" % (exe, text[-2000:]))
        result["contact"] = contact
    if "stability" in args.parts:
        exe = os.path.join(args.build, "bench", "sinew-implicit-stability")
        common = ["--method", "elastic-implicit", "--jobs", "2", "--turn", repr(args.turn)]
        stability = {}
        runs = [("%s %d" % (c, n), CHARACTERS[c](n)) for c in args.characters for n in args.samplings]
        for name, extra in runs + [("limb", ["--limb"])]:
            rc, text = run([exe] + common + extra)
            figures = parse_stability(text)
            if rc != 0 or figures is None:
                sys.exit("implicit_scoreboard: %s %s failed (%d):\n%s" % (exe, " ".join(extra), rc, text[-2000:]))
            stability[name] = figures
        result["stability"] = {"turn": args.turn, "runs": stability}
    return result


def show(result):
    contact = result.get("contact")
    if contact:
        print("contact (elastic rows; R of the joint; * beyond the issue's bound):")
        for key, r in contact["rows"].items():
            fixture, angle, method = key.split(" | ")
            if method not in ("steps", "jump"):
                continue
            mark = "*" if r["contact"] > 0.05 or (angle == "90" and r["folds"] > 0) else " "
            print("  %s %-50s %4s° %-5s contact %.3f crease %.3f folds %3d at %.3f" %
                  (mark, fixture[:50], angle, method, r["contact"], r["crease"], r["folds"], r["fold_depth"]))
        print("  failed tests: %s; failed assertions: %d" %
              (", ".join(contact["failed_tests"]) or "none", contact["failed_assertions"]))
    stability = result.get("stability")
    if stability:
        print("sensitivity (elastic, every joint turned by %g rad; * beyond 1e-4):" % stability["turn"])
        for name in sorted(stability["runs"], key=run_order):
            s = stability["runs"][name]
            print("  %s %-12s worst %.2e, %5d vertex-frames beyond 1e-4, checksum %s; folded beyond DQS: %s; "
                  "hidden skin out beyond DQS: %s" %
                  ("*" if s["worst"] > 1e-4 else " ", name, s["worst"], s["beyond"], s.get("checksum", "?"),
                   fold_text(s["fold_beyond_dqs"]) if "fold_beyond_dqs" in s else "?",
                   hidden_text(s.get("hidden_out_beyond_dqs"))))


def compare(old, new, tol):
    better = worse = 0
    if "contact" in old and "contact" in new:
        print("contact, changed rows (old -> new):")
        o, n = old["contact"]["rows"], new["contact"]["rows"]
        for key in o:
            if key not in n:
                print("  missing now: %s" % key)
                continue
            a, b = o[key], n[key]
            changes = []
            for field in ("contact", "crease"):
                if abs(a[field] - b[field]) > tol:
                    changes.append("%s %.3f -> %.3f" % (field, a[field], b[field]))
                    better, worse = better + (b[field] < a[field]), worse + (b[field] > a[field])
            if a["folds"] != b["folds"] or abs(a["fold_depth"] - b["fold_depth"]) > 0.01:
                changes.append("folds %d at %.3f -> %d at %.3f" % (a["folds"], a["fold_depth"], b["folds"], b["fold_depth"]))
                sa, sb = (a["folds"], a["fold_depth"]), (b["folds"], b["fold_depth"])
                better, worse = better + (sb < sa), worse + (sb > sa)
            if changes:
                print("  %-62s %s" % (key[:62], "; ".join(changes)))
        for key in n:
            if key not in o:
                print("  new: %s" % key)
        print("  failed tests: %s -> %s; failed assertions %d -> %d" %
              (", ".join(old["contact"]["failed_tests"]) or "none", ", ".join(new["contact"]["failed_tests"]) or "none",
               old["contact"]["failed_assertions"], new["contact"]["failed_assertions"]))
    if "stability" in old and "stability" in new:
        print("sensitivity (old -> new; turn %g -> %g rad):" % (old["stability"]["turn"], new["stability"]["turn"]))
        names = set(old["stability"]["runs"]) | set(new["stability"]["runs"])
        for name in sorted(names, key=run_order):
            a, b = old["stability"]["runs"].get(name), new["stability"]["runs"].get(name)
            if b is None:
                continue
            if a is None:  # a run the older file has not (Testwuson's before 2026-12-06): shown, not counted
                print("  %-12s new: %.2e / %d (not in the older file)" % (name, b["worst"], b["beyond"]))
                continue
            same = a.get("checksum") == b.get("checksum")
            print("  %-12s %.2e / %d -> %.2e / %d%s" % (name, a["worst"], a["beyond"], b["worst"], b["beyond"],
                                                        " (the unturned output bit for bit the same)" if same else ""))
            if b["worst"] != a["worst"]:
                better, worse = better + (b["worst"] < a["worst"]), worse + (b["worst"] > a["worst"])
            fa, fb = a.get("fold_beyond_dqs"), b.get("fold_beyond_dqs")  # (files saved before 2026-12-06 lack it)
            if fa and fb and abs(fb["by"] - fa["by"]) >= FOLD_STEP:
                print("  %-12s folded beyond DQS: %s -> %s" % (name, fold_text(fa), fold_text(fb)))
                better, worse = better + (fb["by"] < fa["by"]), worse + (fb["by"] > fa["by"])
            ha, hb = a.get("hidden_out_beyond_dqs"), b.get("hidden_out_beyond_dqs")  # (saved before 2026-12-06: none)
            if hb and (not ha or ha["by"] != hb["by"] or ha["method"] != hb["method"]):
                print("  %-12s hidden skin out beyond DQS: %s -> %s" % (name, hidden_text(ha), hidden_text(hb)))
                if ha:
                    better, worse = better + (hb["by"] < ha["by"]), worse + (hb["by"] > ha["by"])
    print("figures better: %d, worse: %d" % (better, worse))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the build tree (default build/)")
    ap.add_argument("--parts", default="contact,stability",
                    type=lambda s: [p for p in s.split(",") if p] or ap.error("--parts: contact, stability or both"),
                    help="contact, stability or contact,stability (default)")
    ap.add_argument("--samplings", type=samplings, default=samplings("6-12"),
                    help="the --bcn-frames samplings of the stability part: N-M or N,M,... (default 6-12)")
    ap.add_argument("--characters", default="bcn,testwuson",
                    type=lambda s: [c for c in s.split(",") if c] or ap.error("--characters: bcn, testwuson or both"),
                    help="whose clips the stability part samples: bcn, testwuson or bcn,testwuson (default)")
    ap.add_argument("--turn", type=float, default=1e-6, help="radians of the stability part's turns (default 1e-6)")
    ap.add_argument("--tolerance", type=float, default=0.003, help="R: smaller changes of a crossing are not shown")
    ap.add_argument("--save", help="write the figures to this JSON file")
    ap.add_argument("--against", help="compare with a JSON file an earlier --save wrote")
    args = ap.parse_args()
    unknown = [p for p in args.parts if p not in ("contact", "stability")]
    if unknown:
        ap.error("--parts: unknown part %s (contact, stability)" % ", ".join(unknown))
    unknown = [c for c in args.characters if c not in CHARACTERS]
    if unknown:
        ap.error("--characters: unknown %s (bcn, testwuson)" % ", ".join(unknown))
    if not (0 <= args.turn <= 0.01):
        ap.error("--turn: expected a number in [0, 0.01], got %g" % args.turn)
    old = None
    if args.against:
        try:
            with open(args.against) as f:
                old = json.load(f)
        except (OSError, ValueError) as e:
            ap.error("--against %s: %s" % (args.against, e))
    result = measure(args)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
    if old is not None:
        compare(old, result, args.tolerance)
    else:
        show(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
