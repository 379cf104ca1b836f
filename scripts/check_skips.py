#!/usr/bin/env python3
"""Fails when a CTest run skipped a test outside tests/allowed_skips.txt.

CTest counts a skip as a pass, so a test that starts skipping (a missing tool, a
condition that no longer holds) would go unseen. scripts/test.sh runs CTest with
`--output-junit` (every test's whole output kept); this reads that report and finds
every skip in it:
  - a CTest test not run as a whole (SKIP_RETURN_CODE, SKIP_REGULAR_EXPRESSION);
  - a Google Test skip (`[  SKIPPED ] Suite.Name`, with GTEST_SKIP's message);
  - a Python unittest skip (`test_x (module.Class.test_x) ... skipped 'why'`, and
    `OK (skipped=N)` from a runner that does not name them).
Each must match a line of the allow-list (a shell-style pattern for the name, " | ",
why it may skip); the rest are listed with their reasons and the exit status is 1.
GPU tests are not skips here: without a device CTest has them disabled, not run.

  scripts/check_skips.py [JUNIT_XML] [--allow tests/allowed_skips.txt]
"""
import argparse
import fnmatch
import pathlib
import re
import sys
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
GTEST_SKIP = re.compile(r"^\[  SKIPPED \] (\S+)")
GTEST_SUMMARY = re.compile(r"^\[  SKIPPED \] \d+ tests?, listed below:")
GTEST_MESSAGE = re.compile(r"^\S+:\d+: Skipped$")
UNITTEST_SKIP = re.compile(r"^(\w+) \(([\w.]+)\)(?: \.\.\.)?.* skipped '(.*)'$")
UNITTEST_COUNT = re.compile(r"\(.*skipped=(\d+).*\)$")


def skips(report):
    """(name, why) for every skip in a CTest JUnit report; and how many tests ran."""
    found, ran = [], 0
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "").split("  #")[0].strip()
        status = case.get("status", "")
        if status == "disabled":
            continue
        ran += 1
        out = (case.findtext("system-out") or "").splitlines()
        if status == "notrun":  # as a whole: why, in GTEST_SKIP's words where it says
            skipped = case.find("skipped")
            why = skipped.get("message", "not run") if skipped is not None else "not run"
            found.append((name, next((out[j + 1] for j in range(len(out) - 1)
                                      if GTEST_MESSAGE.match(out[j])), why)))
            continue
        named = 0
        for i, line in enumerate(out):
            m = GTEST_SKIP.match(line)
            if m and not GTEST_SUMMARY.match(line):
                why = next((out[j + 1] for j in range(i - 1, -1, -1)
                            if GTEST_MESSAGE.match(out[j]) and j + 1 < len(out)), "")
                found.append((m.group(1), why))
                named += 1
                continue
            m = UNITTEST_SKIP.match(line)
            if m:
                found.append((m.group(2), m.group(3)))
                named += 1
                continue
            m = UNITTEST_COUNT.search(line)
            if m and line.startswith(("OK", "FAILED")) and int(m.group(1)) > named:
                found.append((name, f"{int(m.group(1)) - named} unnamed unittest skip(s)"))
    # A GTEST_SKIP shows twice (where it happened and in the summary's list): once each.
    return list(dict.fromkeys(found)), ran


def allowed(path):
    rules = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pattern, sep, why = line.partition(" | ")
        if not sep or not why.strip():
            sys.exit(f"check_skips: {path}: '{line}' gives no reason (PATTERN | why)")
        rules.append(pattern.strip())
    return rules


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report", nargs="?", default=ROOT / "build/ctest-junit.xml")
    ap.add_argument("--allow", default=ROOT / "tests/allowed_skips.txt")
    args = ap.parse_args()
    rules = allowed(pathlib.Path(args.allow))
    found, ran = skips(args.report)
    bad = [(n, w) for n, w in found if not any(fnmatch.fnmatchcase(n, r) for r in rules)]
    for n, w in found:
        print(f"check_skips: {'NOT ALLOWED' if (n, w) in bad else 'allowed'}: {n}: {w}")
    if bad:
        print(f"check_skips: {len(bad)} skip(s) outside {args.allow}: each needs a fix or a "
              "line there saying why it may skip", file=sys.stderr)
        return 1
    print(f"check_skips: {ran} CTest tests, {len(found)} skip(s), every one allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
