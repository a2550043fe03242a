"""Helpers the suites share: where the laid-out trees are, exporting a tree's commit, running a
probe script or an upstream test file in a subprocess, checking an installed RECORD.

Only the standard library and pytest are used here, so every venv of the project can
import this file.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from xml.etree import ElementTree

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TREES = REPO_ROOT / "build" / "trees"


def env_key(kind: str, target: str) -> str:
    """SGL_OVERLAY_<KIND>_ROOT_<TARGET>: where a suite finds the stock or patched package instead."""
    return f"SGL_OVERLAY_{kind}_ROOT_{target.upper().replace('-', '_')}"


def tree_dir(target: str) -> Path:
    """The git tree `sgl-overlay fetch` laid out for a target."""
    path = TREES / target
    if not (path / ".git").exists():
        pytest.fail(f"{path} is missing: run `make` (sgl-overlay fetch + apply) first")
    return path


def export_tree(target: str, dest: Path, rev: str = "upstream", paths: tuple[str, ...] = ()) -> Path:
    """Export one commit of a target's tree (only `paths` where given): `upstream` is the stock
    pre-image, `HEAD` the patched post-image."""
    tree = tree_dir(target)
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / "tree.tar"
    subprocess.run(
        ["git", "-C", str(tree), "archive", "--format=tar", "-o", str(archive), rev, "--", *paths],
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return dest


def in_patch_test(target: str, rel: str) -> Path:
    """A test file a patch adds, in the patched tree (also when the package under test
    comes from an installed wheel, which does not ship upstream's test/ folder)."""
    path = tree_dir(target) / rel
    if not path.is_file():
        pytest.fail(f"{path} is missing: the patched {target} tree lacks the in-patch test; run `make trees`")
    return path


def run_probe(
    root: Path,
    script: Path,
    *args: str,
    python: str = sys.executable,
    extra_env: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
    extra_path: tuple[Path, ...] = (),
) -> dict:
    """Run `python [flags] script args` with `root` first on PYTHONPATH (then `extra_path`
    and tests/); parse its JSON.

    The probe must print exactly one JSON document on its last stdout line.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [root, *extra_path, REPO_ROOT / "tests"])
    env.update(extra_env or {})
    proc = subprocess.run(
        [python, *flags, str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"probe {script.name} {' '.join(args)} failed (rc={proc.returncode}) with "
            f"root {root}:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    last = proc.stdout.strip().splitlines()[-1]
    return json.loads(last)


def side_by_side(calls: dict[str, Callable[[], object]]) -> dict[str, object]:
    """Run independent probe subprocesses at once, one per core, and return their results by key.

    Each probe pays sglang's import (tens of seconds of CPU), which dominates the suites'
    time; results do not depend on the order. Resolve lazily built roots (`stock_root`)
    before calling: the calls run on threads.
    """
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = {key: pool.submit(call) for key, call in calls.items()}
        return {key: future.result() for key, future in futures.items()}


def check_record(root: Path, dist_info: Path) -> int:
    """Assert every RECORD hash of an installed distribution against the file under `root`
    (site-packages or a `pip --target` dir); returns how many files were checked. Rows
    outside `root` (`../`: console scripts) must exist, under root/bin for `--target`."""
    checked = 0
    for path, digest, _size in csv.reader((dist_info / "RECORD").read_text().splitlines()):
        if path.startswith("../"):
            assert (root / path).exists() or (root / "bin" / Path(path).name).exists(), path
            continue
        if not digest:
            continue
        algo, _, value = digest.partition("=")
        data = (root / path).read_bytes()
        assert base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode() == value, path
        checked += 1
    return checked


@dataclass(frozen=True)
class PytestRun:
    """One pytest subprocess: its exit code and output, each test's outcome by id ("passed",
    "failed", "error", "skipped"), and the report's text of each failed or erred test."""

    returncode: int
    output: str
    outcomes: dict[str, str]
    failures: dict[str, str]


def read_junit(xml: Path, test_file: Path, among_others: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """Outcomes and failure texts by test id from pytest's --junitxml report. The id is the test's
    name, after its class (`TestX::test_y`) where it has one: junit's classname is a dotted path
    whose module part depends on the rootdir, so it is cut at the file's stem. `among_others`: the
    report holds other files' tests too (under a rootdir above them all), which are left out."""
    outcomes, failures = {}, {}
    for case in ElementTree.parse(xml).getroot().iter("testcase"):
        _, stem, owner = case.get("classname", "").rpartition(test_file.stem)
        if among_others and not stem:
            continue
        owner = owner.lstrip(".")
        test_id = f"{owner}::{case.get('name')}" if owner else case.get("name")
        outcomes[test_id] = "passed"
        for kind, outcome in (("skipped", "skipped"), ("error", "error"), ("failure", "failed")):
            if (element := case.find(kind)) is not None:
                outcomes[test_id] = outcome
                if kind != "skipped":
                    failures[test_id] = f"{element.get('message', '')}\n{element.text or ''}"
    return outcomes, failures


def run_pytest(
    package_roots: list[Path],
    test_file: Path,
    cwd: Path,
    plugins: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> PytestRun:
    """Run one test file with pytest in a subprocess, `package_roots` first on PYTHONPATH (the
    stock or patched package, plus any CPU stand-ins); each test's outcome from its junit report."""
    return run_pytest_files(package_roots, [test_file], cwd, plugins, extra_env)[test_file]


def run_pytest_files(
    package_roots: list[Path],
    test_files: list[Path],
    cwd: Path,
    plugins: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> dict[Path, PytestRun]:
    """Run test files in one pytest subprocess (one import of the package for all of them): per
    file, the run's exit code and output and each of its tests' outcome. Several files run under
    the folder that holds them all as rootdir, so that each test's report names its file."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(r) for r in package_roots)
    env.update(extra_env or {})
    several = len(test_files) > 1
    rootdir = os.path.commonpath(test_files) if several else cwd
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
        for plugin in plugins:
            args += ["-p", plugin]
        proc = subprocess.run(
            [*args, "--rootdir", str(rootdir), *map(str, test_files)],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=1200,
        )
        output = proc.stdout + proc.stderr
        assert xml.is_file(), f"pytest wrote no report (exit {proc.returncode}):\n{output[-6000:]}"
        runs = {f: PytestRun(proc.returncode, output, *read_junit(xml, f, several)) for f in test_files}
        if several and proc.returncode in (0, 1):  # each file's own exit code: 1 where one of its tests failed
            runs = {
                f: replace(r, returncode=int(bool({"failed", "error"} & set(r.outcomes.values()))))
                for f, r in runs.items()
            }
        return runs


TREE_ENV = "SGL_OVERLAY_TREE"


def per_tree(stock: object, patched: object) -> object:
    """In a test module run_per_tree runs once per package: the value expected on the package this run
    tests, so each test states both."""
    return {"stock": stock, "patched": patched}[os.environ[TREE_ENV]]


def run_per_tree(roots: dict[str, Path], test_files: list[Path], tmp_path_factory) -> dict[str, dict[Path, PytestRun]]:
    """Run test modules that state their values with per_tree once on each package (label -> package root):
    one pytest process a package (one import of it for all the modules), the runs at once; the modules'
    folder and the one above are on PYTHONPATH after the package."""
    here = test_files[0].parent
    return side_by_side(
        {
            label: lambda root=root, label=label, cwd=tmp_path_factory.mktemp(label): run_pytest_files(
                [root, here, here.parent], test_files, cwd, extra_env={TREE_ENV: label}
            )
            for label, root in roots.items()
        }
    )


def check_pytest_run(run: PytestRun, outcomes: dict[str, str]) -> None:
    """Each test's outcome is as expected, and the exit code is pytest's for them: 1 where a test
    failed or erred, else 0."""
    assert run.outcomes == outcomes, run.output[-6000:]
    assert run.returncode == (1 if {"failed", "error"} & set(outcomes.values()) else 0), run.output[-6000:]


def check_in_patch_test(package_root: Path, target: str, rel: str, cwd: Path, outcomes: dict[str, str]) -> None:
    """Run a patch's own test file against one package: each test's outcome is as expected."""
    check_pytest_run(run_pytest([package_root], in_patch_test(target, rel), cwd), outcomes)
