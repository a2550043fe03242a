"""The stock wheels in the patched role fail the K3 and KT suites on an assertion: the suites
tell an installed patched wheel from a stock one (build/installed from scripts/install_wheels.sh;
each run's output is kept under build/ as evidence)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from helpers import REPO_ROOT as REPO
from helpers import env_key

SUITES = {"sglang": "tests/sglang", "sglang-kt": "tests/sglang_kt"}  # target -> suite (run with .venvs/<target>)


@pytest.mark.parametrize("target", list(SUITES))
def test_stock_wheel_in_the_patched_role_fails_on_an_assertion(target: str, tmp_path: Path) -> None:
    stock = REPO / "build" / "installed" / f"stock-{target}"
    if not stock.is_dir():
        pytest.fail(f"{stock} missing: run `make test-wheels` (scripts/install_wheels.sh installs it)")
    xml = tmp_path / "junit.xml"
    env = {**os.environ, env_key("PATCHED", target): str(stock)}
    proc = subprocess.run(
        [
            REPO / ".venvs" / target / "bin" / "python",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
            f"--junitxml={xml}",
            SUITES[target],
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    log = REPO / "build" / f"stock-as-patched-{target}.log"
    log.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 1, f"pytest exit {proc.returncode}, expected 1 (a failed test); see {log}"
    root = ElementTree.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    failures = [f for case in suite.iter("testcase") if (f := case.find("failure")) is not None]
    assert suite.get("errors") == "0" and failures, f"no failed test, or an error instead; see {log}"
    assert "AssertionError" in (failures[0].text or ""), f"the first failure is not an assertion; see {log}"
