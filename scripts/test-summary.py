#!/usr/bin/env python3
"""The summary `make test` prints after CTest's own report: how many tests
passed, failed and were skipped, then each skipped test with its reason and
each failed one with CTest's message.

CTest counts a skipped test (exit 77, SKIP_RETURN_CODE) among those that
passed in its closing line; its JUnit file (ctest --output-junit) tells them
apart and holds each test's output. A skipped test's reason is the line of
its output that says it skipped ("SKIPPED: ...", "...: skipped: ..."), else
its last line. Tests skipped for the same reason are listed together.

Usage: scripts/test-summary.py JUNIT_XML
Exits 0 (the exit status of `make test` is CTest's), 2 without the file.
`scripts/test-summary.py --self-test` checks it on a made-up file (CTest
runs that as test_summary_script).
"""

import io
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET

WIDTH = 160


def reason_of(output):
    lines = [ln.strip() for ln in (output or "").splitlines() if ln.strip()]
    said = [ln for ln in lines if re.search(r"\bskip", ln, re.I)]
    line = said[0] if said else (lines[-1] if lines else "(no output)")
    line = re.sub(r"^.*?\bSKIPPED:\s*", "", line)
    line = re.sub(r"^\S+:\s+skipped:\s*", "", line)
    return line if len(line) <= WIDTH else line[:WIDTH - 3] + "..."


def main(argv):
    if len(argv) != 2:
        print("usage: scripts/test-summary.py JUNIT_XML | --self-test", file=sys.stderr)
        return 2
    try:
        suite = ET.parse(argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"test summary: no CTest JUnit file ({e})", file=sys.stderr)
        return 2
    passed, failed, skipped = [], [], {}
    for case in suite.iter("testcase"):
        name = case.get("name")
        out = case.findtext("system-out")
        if case.find("failure") is not None or case.get("status") == "fail":
            f = case.find("failure")
            failed.append((name, f.get("message", "") if f is not None else ""))
        elif case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
            skipped.setdefault(reason_of(out), []).append(name)
        else:
            passed.append(name)
    nskip = sum(len(v) for v in skipped.values())
    print(f"tests: {len(passed)} passed, {len(failed)} failed, {nskip} skipped")
    for reason, names in sorted(skipped.items(), key=lambda kv: kv[1][0]):
        print(f"  skipped {', '.join(names)}: {reason}")
    for name, msg in failed:
        print(f"  FAILED {name}" + (f": {msg}" if msg else ""))
    return 0


SELF_TEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="x" tests="6" failures="1" skipped="4">
 <testcase name="test_core" status="run"><system-out>[  PASSED  ] 6 test(s).
</system-out></testcase>
 <testcase name="test_cedd_gpu" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/>
  <system-out>SKIPPED: no usable CUDA GPU on this machine
</system-out></testcase>
 <testcase name="test_knn_gpu" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/>
  <system-out>[==========] Running 1 test(s).
SKIPPED: no usable CUDA GPU on this machine
</system-out></testcase>
 <testcase name="test_python" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/>
  <system-out>python/tests: skipped: no python3 with numpy and pytest
</system-out></testcase>
 <testcase name="test_quiet" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/>
  <system-out>first line
the last line
</system-out></testcase>
 <testcase name="test_store" status="fail"><failure message="Failed"/><system-out>boom</system-out></testcase>
</testsuite>
"""
SELF_TEST_EXPECTED = """tests: 1 passed, 1 failed, 4 skipped
  skipped test_cedd_gpu, test_knn_gpu: no usable CUDA GPU on this machine
  skipped test_python: no python3 with numpy and pytest
  skipped test_quiet: the last line
  FAILED test_store: Failed
"""


def self_test():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "junit.xml")
        with open(path, "w") as f:
            f.write(SELF_TEST_XML)
        out, real = io.StringIO(), sys.stdout
        sys.stdout = out
        try:
            rc = main(["test-summary.py", path])
        finally:
            sys.stdout = real
    if rc != 0 or out.getvalue() != SELF_TEST_EXPECTED:
        print(f"test-summary self-test: exit {rc}, printed:\n{out.getvalue()}expected:\n{SELF_TEST_EXPECTED}")
        return 1
    print("test-summary self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else main(sys.argv))
