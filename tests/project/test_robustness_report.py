"""scripts/robustness_report.py counts from a JUnit file: every listed test must be there (a
renamed test or a partial run fails, naming it) and a failed case fails the report."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import robustness_report  # noqa: E402


def _junit(path: Path, *, drop: str | None = None, fail: str | None = None) -> Path:
    suite = ET.Element("testsuite")
    for _, file, funcs in robustness_report.KINDS:
        for fn in funcs:
            if fn == drop:
                continue
            case = ET.SubElement(
                suite, "testcase", classname=file.removesuffix(".py").replace("/", "."), name=f"{fn}[case]"
            )
            if fn == fail:
                ET.SubElement(case, "failure", message="boom")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path)
    return path


def _report(junit: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "robustness_report.py"), "--from-junit", str(junit)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_complete_passing_junit_passes_and_counts_every_case(tmp_path):
    r = _report(_junit(tmp_path / "all.xml"))
    n = sum(len(funcs) for _, _, funcs in robustness_report.KINDS)
    assert r.returncode == 0, r.stderr
    assert f"| **all** | **{n}** | **{n}** | 0 |" in r.stdout


@pytest.mark.parametrize("how", ["drop", "fail"])
def test_a_missing_or_failed_case_fails_the_report(tmp_path, how):
    name = "test_top_mode_content_faults_are_asked_again"  # one of two functions of its kind
    r = _report(_junit(tmp_path / f"{how}.xml", **{how: name}))
    assert r.returncode == 1
    if how == "drop":
        assert f"tests/judges/test_api_judge.py::{name}" in r.stderr
