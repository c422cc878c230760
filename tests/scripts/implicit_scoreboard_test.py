#!/usr/bin/python3
"""scripts/implicit_scoreboard.py's parsing and comparison on text as the contact tests and the
stability bench print it, and on lines made from their own printf format strings read from their
sources (no build needed)."""
import contextlib
import io
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import implicit_scoreboard as sb  # noqa: E402

CONTACT = """\
[ RUN      ] ImplicitContactAsset.ArmElbowBentTo150ElasticMeetsTheSkinsTo120AndKeepsItsGainsOverDqs
Arm elbow 150°  dqs                 crossing 0.617 R, contact crossing 0.435 R (crease 0.435 R), inside  74, deepest 0.542 R; in the crease  62, deepest 0.542 R
Arm elbow 150°  elastic, 10° steps crossing 0.153 R, contact crossing 0.058 R (crease 0.000 R), inside   2, deepest 0.070 R; in the crease   0, deepest 0.000 R
Arm elbow 150°  elastic, one jump   crossing 0.152 R, contact crossing 0.059 R (crease 0.000 R), inside   2, deepest 0.065 R; in the crease   0, deepest 0.000 R
    contact crossing: v2087, 2.69 radii from the joint, weights lowerarm01.R 0.91
BCN_Epileptic left knee, clip's axis  90°  elastic, 10° steps crossing 0.117 R, contact crossing 0.000 R (crease 0.000 R), inside 843, deepest 0.443 R; in the crease  12, deepest 0.242 R
/work/main/tests/import/implicit_contact_asset_test.cc:484: Failure
/work/main/tests/import/implicit_contact_asset_test.cc:485: Failure
[  FAILED  ] ImplicitContactAsset.ArmElbowBentTo150ElasticMeetsTheSkinsTo120AndKeepsItsGainsOverDqs (4366 ms)
[  FAILED  ] 1 test, listed below:
[  FAILED  ] ImplicitContactAsset.ArmElbowBentTo150ElasticMeetsTheSkinsTo120AndKeepsItsGainsOverDqs
"""

STABILITY = """\
BCN_Epileptic clip at 10 poses (--bcn-frames 9), elastic-implicit (15378 vertices): frame, ...
  t 0.00 s     9.35e-05  0  (worst at B_UpperArm_Right); inside: DQS 96 (2.7e-03 at B_Neck), method 96 (2.7e-03 at B_Neck)
  t 2.20 s     5.90e-05  0  (worst at B_UpperArm_Left); inside: DQS 185 (1.8e-02 at B_Hip_Right), method 109 (8.1e-03 at B_Hip_Right)
  t 2.57 s     3.87e-04  22  (worst at B_Jaw) B_Jaw:22; inside: DQS 106 (5.4e-03 at B_Hip_Right), method 103 (7.8e-03 at B_Neck)
  worst 3.87e-04 of the diagonal, 65 vertex-frames beyond 1e-4; 365.3 ms a frame (1 thread)
  output checksum c355b679d27d6be0 (FNV-1a of the unturned session's floats: ...)
"""


class ParseTest(unittest.TestCase):
    def test_contact_rows_keyed_by_fixture_angle_and_method(self):
        c = sb.parse_contact(CONTACT)
        self.assertEqual(sorted(c["rows"]), ["Arm elbow | 150 | dqs", "Arm elbow | 150 | jump", "Arm elbow | 150 | steps",
                                             "BCN_Epileptic left knee, clip's axis | 90 | steps"])
        steps = c["rows"]["Arm elbow | 150 | steps"]
        self.assertEqual((steps["contact"], steps["crease"], steps["folds"]), (0.058, 0.0, 0))
        knee = c["rows"]["BCN_Epileptic left knee, clip's axis | 90 | steps"]
        self.assertEqual((knee["folds"], knee["fold_depth"]), (12, 0.242))

    def test_failures_counted_once_per_test(self):
        c = sb.parse_contact(CONTACT)
        self.assertEqual(c["failed_tests"], ["ImplicitContactAsset.ArmElbowBentTo150ElasticMeetsTheSkinsTo120AndKeepsItsGainsOverDqs"])
        self.assertEqual(c["failed_assertions"], 2)

    def test_stability_worst_beyond_and_checksum(self):
        s = sb.parse_stability(STABILITY)
        self.assertEqual((s["worst"], s["beyond"], s["checksum"]), (3.87e-4, 65, "c355b679d27d6be0"))
        self.assertIsNone(sb.parse_stability("sinew-implicit-stability: --turn 0.5: expected a number in [0, 0.01]\n"))

    def test_fold_beyond_dqs_is_the_frame_where_the_method_is_deepest_past_dqs(self):
        # 2.20 s: the method shallower than DQS (not a fold of its own); 2.57 s: 2.4e-3 deeper.
        self.assertEqual(sb.parse_stability(STABILITY)["fold_beyond_dqs"], {"by": 2.4e-3, "frame": "t 2.57 s", "joint": "B_Neck"})
        shallower = "\n".join(l for l in STABILITY.splitlines() if "2.57" not in l)
        self.assertEqual(sb.parse_stability(shallower)["fold_beyond_dqs"], {"by": 0.0, "frame": None, "joint": None})

    def test_samplings(self):
        self.assertEqual(sb.samplings("6-9"), [6, 7, 8, 9])
        self.assertEqual(sb.samplings("5,9,13"), [5, 9, 13])
        for bad in ("0-3", "x", "", "7-"):
            with self.assertRaises(Exception):
                sb.samplings(bad)


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def format_in_source(path, start, end):
    """The C format string of a printf call in `path`: its string literals from the one that
    begins with `start` up to the argument `end`, as Python's % reads them."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    i = text.index('"' + start)
    chunk = text[i:text.index(end, i)]
    fmt = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', chunk)).replace("\\n", "\n")
    return fmt.replace("%zu", "%d").replace("%016llx", "%016x")


class SourceFormatTest(unittest.TestCase):
    """The parsers against the programs' own format strings, so that a changed printf fails here."""

    def test_contact_row_format(self):
        fmt = format_in_source("tests/import/implicit_contact_asset_test.cc", "%s %3.0f°  %-19s crossing",
                                 "label.c_str()")
        line = fmt % ("BCN_Epileptic right knee, clip's axis", 150.0, "elastic, one jump", 0.801, 0.087, 0.02, 879,
                      0.443, 19, 0.089)
        row = sb.parse_contact(line)["rows"]["BCN_Epileptic right knee, clip's axis | 150 | jump"]
        self.assertEqual((row["contact"], row["crease"], row["folds"], row["fold_depth"]), (0.087, 0.02, 19, 0.089))

    def test_stability_formats(self):
        worst = format_in_source("bench/implicit_stability.cc", "  worst %.2e", ", worst,")
        checksum = format_in_source("bench/implicit_stability.cc", "  output checksum", "static_cast")
        frame = format_in_source("bench/implicit_stability.cc", "  %-12s %.2e", "s.labels")
        inside = format_in_source("bench/implicit_stability.cc", "; inside: DQS", "qd.new_inside_vertices")
        text = (frame % ("t 2.57 s", 3.87e-4, 22, "B_Jaw") + " B_Jaw:22" +
                inside % (106, 5.4e-3, "B_Hip_Right", 103, 7.8e-3, "B_Neck", 225, 99) +
                frame % ("t 2.83 s", 1.0e-5, 0, "B_Neck") +
                inside % (91, 2.7e-3, "B_Neck", 91, 2.7e-3, "B_Neck", 203, 224) +
                worst % (3.87e-4, 65, 365.3, "") + checksum % 0xc355b679d27d6be0)
        self.assertEqual(sb.parse_stability(text), {"worst": 3.87e-4, "beyond": 65, "checksum": "c355b679d27d6be0",
                                                    "fold_beyond_dqs": {"by": 2.4e-3, "frame": "t 2.57 s",
                                                                        "joint": "B_Neck"},
                                                    "hidden_out_beyond_dqs": {"by": 21, "frame": "t 2.83 s",
                                                                              "method": 224, "dqs": 203}})


class CompareTest(unittest.TestCase):
    def figures(self, elbow, folds, worst, fold=0.0):
        return {"contact": {"rows": {"Arm elbow | 150 | steps": {"contact": elbow, "crease": 0.0, "crossing": 0.15,
                                                                  "folds": 0, "fold_depth": 0.0},
                                     "knee | 90 | steps": {"contact": 0.0, "crease": 0.0, "crossing": 0.1,
                                                           "folds": folds, "fold_depth": 0.24 if folds else 0.0}},
                            "failed_tests": [], "failed_assertions": 0},
                "stability": {"turn": 1e-6, "runs": {"bcn 10": {"worst": worst, "beyond": 5, "checksum": "a",
                                                                "fold_beyond_dqs": {"by": fold, "frame": "t 2.57 s" if fold else None,
                                                                                    "joint": "B_Neck" if fold else None}},
                                                     "bcn 9": {"worst": 1e-4, "beyond": 0, "checksum": "b"},
                                                     "limb": {"worst": 1e-5, "beyond": 0, "checksum": "c"}}}}

    def compare(self, old, new, tol=0.003):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            sb.compare(old, new, tol)
        return out.getvalue()

    def test_only_changes_beyond_the_tolerance_are_listed_and_counted(self):
        text = self.compare(self.figures(0.058, 12, 2e-3), self.figures(0.060, 0, 2e-3))
        self.assertNotIn("Arm elbow", text)  # 0.002 R: within the tolerance
        self.assertIn("knee | 90 | steps", text)
        self.assertIn("folds 12 at 0.240 -> 0 at 0.000", text)
        self.assertIn("figures better: 1, worse: 0", text)

    def test_a_fold_beyond_dqs_is_compared_from_a_step_of_1e_4(self):
        text = self.compare(self.figures(0.058, 0, 2e-3, 2.4e-3), self.figures(0.058, 0, 2e-3, 0.0))
        self.assertIn("folded beyond DQS: 2.4e-03 at t 2.57 s (B_Neck) -> none", text)
        self.assertIn("figures better: 1, worse: 0", text)
        text = self.compare(self.figures(0.058, 0, 2e-3, 2.4e-3), self.figures(0.058, 0, 2e-3, 2.45e-3))
        self.assertNotIn("folded beyond DQS", text)
        # A file saved before the fold was recorded compares the rest.
        old = self.figures(0.058, 0, 2e-3)
        del old["stability"]["runs"]["bcn 10"]["fold_beyond_dqs"]
        self.assertIn("figures better: 0, worse: 0", self.compare(old, self.figures(0.058, 0, 2e-3, 2.4e-3)))

    def test_hidden_skin_out_beyond_dqs_is_compared_when_both_files_have_it(self):
        old, new = self.figures(0.058, 0, 2e-3), self.figures(0.058, 0, 2e-3)
        old["stability"]["runs"]["bcn 10"]["hidden_out_beyond_dqs"] = {"by": 21, "frame": "t 2.36 s", "method": 224,
                                                                       "dqs": 203}
        new["stability"]["runs"]["bcn 10"]["hidden_out_beyond_dqs"] = {"by": 0, "frame": "t 0.00 s", "method": 0,
                                                                       "dqs": 0}
        text = self.compare(old, new)
        self.assertIn("hidden skin out beyond DQS: +21 at t 2.36 s (224, DQS 203) -> +0 at t 0.00 s (0, DQS 0)", text)
        self.assertIn("figures better: 1, worse: 0", text)
        self.assertNotIn("hidden skin out", self.compare(new, new))
        # A file saved before the figure was recorded: shown, not counted.
        del old["stability"]["runs"]["bcn 10"]["hidden_out_beyond_dqs"]
        self.assertIn("figures better: 0, worse: 0", self.compare(old, new))

    def test_worse_figures_counted_and_samplings_in_numeric_order(self):
        text = self.compare(self.figures(0.058, 0, 2e-3), self.figures(0.120, 6, 3e-3))
        self.assertIn("contact 0.058 -> 0.120", text)
        self.assertIn("figures better: 0, worse: 3", text)
        self.assertLess(text.index("bcn 9 "), text.index("bcn 10"))
        self.assertLess(text.index("bcn 10"), text.index("limb"))

    def test_a_run_the_older_file_lacks_is_shown_not_counted_and_characters_in_order(self):
        old, new = self.figures(0.058, 0, 2e-3), self.figures(0.058, 0, 2e-3)
        new["stability"]["runs"]["testwuson 8"] = {"worst": 5.27e-3, "beyond": 34, "checksum": "d"}
        text = self.compare(old, new)
        self.assertIn("testwuson 8  new: 5.27e-03 / 34 (not in the older file)", text)
        self.assertIn("figures better: 0, worse: 0", text)
        self.assertLess(text.index("bcn 10"), text.index("testwuson 8"))
        self.assertLess(text.index("testwuson 8"), text.index("limb"))
        self.assertEqual(sorted(["limb", "testwuson 12", "bcn 7", "testwuson 6", "bcn 12"], key=sb.run_order),
                         ["bcn 7", "bcn 12", "testwuson 6", "testwuson 12", "limb"])


if __name__ == "__main__":
    unittest.main()
