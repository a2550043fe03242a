"""Compatibility matrix: on which released upstream versions each patch applies, and whether
its own tests pass there. The method (layout per version, seeded blobs for 3-way, variants,
outcome classes) is described in docs/DESIGN.md; `matrix_report` writes the results.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from xml.etree import ElementTree

from packaging.version import InvalidVersion, Version

from sgl_overlay import fetch, gitutil, operations, tree
from sgl_overlay.errors import OverlayError, UsageError
from sgl_overlay.manifest import Kind, Manifest, MatrixSpec, PinnedWheel, Target
from sgl_overlay.patchfile import Patch, Series
from sgl_overlay.series import ScratchIndex, State, series_status
from sgl_overlay.subproc import failure_reason

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout this package sits in (its venvs)
TEST_TIMEOUT_S = 900


class Outcome(StrEnum):
    """Where a patch stands on one version; the legend lists them in this order."""

    EXACT = "exact"
    OFFSETS = "offsets"
    THREE_WAY = "3way"
    CONFLICT = "conflict"
    ABSENT = "absent"
    UPSTREAM = "upstream"

    @property
    def applies(self) -> bool:
        return self in (Outcome.EXACT, Outcome.OFFSETS, Outcome.THREE_WAY)


LEGEND = {
    Outcome.EXACT: "applies exactly: every file it modifies is byte-identical to the pinned pre-image (same blob id)",
    Outcome.OFFSETS: "applies cleanly with `git apply`, but a file it modifies differs from the pin "
    "(hunks may sit at other lines)",
    Outcome.THREE_WAY: "applies only through a 3-way merge (`git am -3`) against the pinned pre-image",
    Outcome.CONFLICT: "does not apply, not even 3-way; the failing hunk is named",
    Outcome.ABSENT: "a file the patch modifies does not exist in that version (the feature is not there)",
    Outcome.UPSTREAM: "the fix is already present upstream (the patch reverse-applies cleanly)",
}


class Tests(StrEnum):
    """What running a patch's own tests on one version gave."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"  # pytest could not run them
    NO_TESTS = "no tests"
    NOT_RUN = "not run"
    NA = "n/a"  # the patch did not apply: nothing to test


_TEST_FILE = re.compile(r"(^|/)tests?/(.+/)?(test_[^/]*|[^/]*_test)\.py$")


@dataclass
class TestResult:
    result: Tests
    reason: str = ""
    files: list[str] = field(default_factory=list)


@dataclass
class Cell:
    outcome: Outcome
    detail: str = ""
    patch_file: str = ""
    variant: bool = False
    tests: TestResult | None = None


@dataclass
class VersionRun:
    version: str
    wheel: str = ""
    sha256: str = ""
    error: str = ""
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass
class TargetRun:
    target: str
    pinned: str
    source: str
    note: str = ""
    patches: list[str] = field(default_factory=list)
    variants: list[dict] = field(default_factory=list)
    tests_env: str = ""
    versions: list[VersionRun] = field(default_factory=list)


# ----------------------------------------------------------------------------- config


def _version_key(v: str):
    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


# ----------------------------------------------------------------------------- trees


def _version_target(target: Target, version: str, wheel: Path | None, sha: str, patches: tuple[str, ...]) -> Target:
    if target.kind != Kind.WHEEL:
        return dataclasses.replace(target, patches=patches)
    return dataclasses.replace(
        target, version=version, wheels=(PinnedWheel(wheel.name, sha),) if wheel else (), patches=patches
    )


def prepare_tree(series: Series, dest: Path, wheel: Path | None, sha: str, pinned: bool) -> str:
    """A laid-out tree at its `upstream` commit, clean: reused when the same wheel made it.
    Only the pinned version must match the manifest's pre-image blobs."""
    vt = series.target
    if tree.is_ready(dest, vt) and gitutil.config_get(dest, "sgl-overlay.matrix-sha256") == (sha or "none"):
        operations.rollback(dest, gitutil.out(dest, "rev-parse", tree.BASE_TAG))
        gitutil.git(dest, "clean", "-qfdx")
        return f"{dest} reused"
    line = tree.lay_out(vt, dest, wheel, series, force=True, check_pins=pinned)
    gitutil.git(dest, "config", "sgl-overlay.matrix-sha256", sha or "none")
    return line


def seed_pinned_objects(dest: Path, pinned_tree: Path, patches: list[Patch]) -> None:
    """Write the pinned pre-images and the series' intermediate blobs into `dest`'s object store.

    Lets `git apply --3way` / `git am -3` find the base each `index` line names. Nothing but
    loose objects is added to `dest` (no ref, commit or work-tree file changes).
    """
    paths = sorted({c.path for p in patches for c in p.changes if c.old_blob})
    with ScratchIndex(dest, base=None) as scratch:
        for path in paths:
            data = gitutil.cat_blob(pinned_tree, tree.BASE_TAG, path)
            if data is None:
                continue
            blob = gitutil.hash_bytes(data, write_to=dest)
            gitutil.git(dest, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=scratch.env)
        for p in patches:  # writes each post-image blob, i.e. the next patch's pre-image
            scratch.apply(p.path)


# ----------------------------------------------------------------------------- classification


def _hunk_of(patch: Patch, detail: str) -> str:
    """'patch failed: path:LINE' -> which hunk of that file, with its header."""
    m = re.search(r"patch failed: (.+):(\d+)", detail)
    if not m:
        return detail
    path, line = m.group(1), int(m.group(2))
    for pf in patch.patchset:
        if pf.path != path:
            continue
        for i, h in enumerate(pf):
            if h.source_start == line:
                header = f" {h.section_header.strip()}" if h.section_header.strip() else ""
                return (
                    f"{path}: hunk {i + 1}/{len(pf)}, @@ -{h.source_start},{h.source_length} "
                    f"+{h.target_start},{h.target_length} @@{header}"
                )
    return f"{path}: hunk at pinned line {line}"


def _differs_from_pin(patch: Patch, vtree: Path, vt: Target) -> list[str]:
    """Files the patch modifies that are, in this version, neither the pinned blob nor the
    patch's own `index` pre-image (a variant authored on that version's file)."""
    differ = []
    for c in patch.changes:
        if not c.old_blob:
            continue
        here = gitutil.blob_at(vtree, tree.BASE_TAG, c.path)
        if here is None or not (here == vt.preimages.get(c.path) or here.startswith(c.old_blob)):
            differ.append(c.path)
    return differ


def classify(vtree: Path, series: Series) -> list[tuple[Patch, Cell]]:
    """One cell per patch of a tree freshly reset to `upstream` (so nothing is APPLIED yet)."""
    vt = series.target
    rows = []
    for st in series_status(vtree, series):
        if st.state == State.APPLICABLE:
            differ = _differs_from_pin(st.patch, vtree, vt)
            offs = st.detail.replace(".; ", "; ").rstrip(".") or "no line offsets"
            cell = (
                Cell(Outcome.OFFSETS, f"{', '.join(differ)} differ from the pin; {offs}")
                if differ
                else Cell(Outcome.EXACT, "pre-image blob ids equal the pin")
            )
        elif st.state == State.APPLICABLE_3WAY:
            detail = st.detail if st.detail.startswith("patch failed") else ""
            cell = Cell(
                Outcome.THREE_WAY, detail and f"exact apply fails at {_hunk_of(st.patch, detail)}; 3-way merge is clean"
            )
        elif st.state == State.CONFLICTING:
            cell = Cell(Outcome.CONFLICT, f"{_hunk_of(st.patch, st.detail)} (fails exact and 3-way)")
        elif st.state == State.ABSENT:
            cell = Cell(Outcome.ABSENT, f"missing {st.detail}")
        elif st.state == State.UPSTREAM:
            cell = Cell(Outcome.UPSTREAM, st.detail)
        else:
            raise OverlayError(f"{st.patch.label}: unexpected state {st.state.value} in a fresh matrix tree")
        rows.append((st.patch, cell))
    return rows


# ----------------------------------------------------------------------------- apply + tests


def apply_and_commit(vtree: Path, patch: Patch) -> str:
    """`git am -3` one patch; '' on success, else a one-line reason (tree rolled back)."""
    orig = gitutil.head(vtree)
    proc = operations.run_am(vtree, [patch.path], embedded=True)
    if proc.returncode == 0:
        return ""
    operations.rollback(vtree, orig)
    return operations.am_failure(proc)


def patch_test_files(patch: Patch) -> list[str]:
    return [c.path for c in patch.changes if c.new_blob and _TEST_FILE.search(c.path)]


def _junit_reason(xml: Path, tree: Path) -> str:
    """'N passed, N failed, ...; FAILED case - first error line', from pytest's --junitxml report."""
    try:
        root = ElementTree.parse(xml).getroot()
    except (OSError, ElementTree.ParseError):
        return ""
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return ""
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    parts = [
        (passed, "passed"),
        (counts["failures"], "failed"),
        (counts["skipped"], "skipped"),
        (counts["errors"], "error" if counts["errors"] == 1 else "errors"),
    ]
    reason = ", ".join(f"{n} {what}" for n, what in parts if n)
    for case in suite.iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is None:
            continue
        lines = [ln[1:].strip() for ln in (bad.text or "").splitlines() if ln.startswith("E ")]
        why = lines[0] if lines else (bad.get("message") or "").splitlines()[0]
        name = "::".join(filter(None, (case.get("classname"), case.get("name"))))
        kind = "FAILED" if bad.tag == "failure" else "ERROR"
        reason += f"; {kind} {name} - {why}"
        break
    return reason.replace(str(tree), "<tree>")[:300]  # no machine paths in committed output


def run_patch_tests(
    python: Path,
    vtree: Path,
    files: list[str],
    timeout: int = TEST_TIMEOUT_S,
    extra_path: list[Path] | None = None,
    pytest_args: tuple[str, ...] = (),
) -> TestResult:
    if not files:
        return TestResult(Tests.NO_TESTS, "the patch adds or changes no test file")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(vtree / "python"), *map(str, extra_path or [])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-junit-") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            f"--junitxml={xml}",
            *pytest_args,
            *files,
        ]
        try:
            proc = subprocess.run(cmd, cwd=vtree, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return TestResult(Tests.ERROR, f"timed out after {timeout} s", files)
        reason = _junit_reason(xml, vtree) or failure_reason(proc)
    if proc.returncode == 0:
        only_skipped = "passed" not in reason and "skipped" in reason
        return TestResult(Tests.SKIP if only_skipped else Tests.PASS, reason, files)
    if proc.returncode == 1:
        return TestResult(Tests.FAIL, reason, files)
    if proc.returncode == 5:
        return TestResult(Tests.NO_TESTS, reason or "pytest collected nothing", files)
    return TestResult(Tests.ERROR, f"pytest exit {proc.returncode}: {reason}", files)


# ----------------------------------------------------------------------------- driver


@dataclass
class Options:
    root: Path  # repository root (venvs are relative to it)
    cache: Path
    build: Path  # build/matrix
    run_tests: bool = True
    offline: bool = False
    python: dict[str, Path] = field(default_factory=dict)  # target -> interpreter, overrides the spec


def _python_for(target: Target, spec: MatrixSpec, opts: Options) -> Path:
    if target.name in opts.python:
        return opts.python[target.name]
    venv = spec.venv or f".venvs/{target.name}"
    return _repo_path(f"{venv}/bin/python", opts)


def _repo_path(rel: str, opts: Options) -> Path:
    """A path of the manifest's matrix table: relative to the repo root (else this package's checkout)."""
    candidates = [opts.root / rel, SOURCE_ROOT / rel]
    return next((p for p in candidates if p.exists()), candidates[0])


def _tests_env(python: Path, spec: MatrixSpec, opts: Options) -> str:
    def rel(p: Path) -> str:
        for base in (opts.root, SOURCE_ROOT):
            if p.is_relative_to(base):
                return str(p.relative_to(base))
        return str(p)

    path = ":".join(["<tree>/python", *spec.pythonpath])
    args = " ".join(spec.pytest_args)
    return f"`{rel(python)} -m pytest{' ' + args if args else ''}` with `PYTHONPATH={path}`"


def _series_for(target: Target, spec: MatrixSpec, version: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """The patch files to use at `version` and, for each, the series name it stands for."""
    files, stands_for = [], {}
    for name in target.patches:
        v = spec.variant_for(name, version)
        f = v.file if v else name
        files.append(f)
        stands_for[f] = name
    return tuple(files), stands_for


def _new_run(target: Target, spec: MatrixSpec) -> TargetRun:
    run = TargetRun(
        target=target.name,
        pinned=target.pinned,
        source="registry" if target.kind == Kind.WHEEL else "pinned commit only",
        patches=list(target.patches),
        variants=[dataclasses.asdict(v) for v in spec.variants],
    )
    notes = []
    if target.kind != Kind.WHEEL:
        notes.append(
            f"{target.name} has no registry source (no wheel or sdist of this tree is published): "
            f"its row covers the pinned commit {target.pinned} only, rebuilt from the "
            "full-context patches."
        )
    if not target.patches:
        notes.append(
            f"No patches are listed for {target.name} in patches/manifest.toml at the time of this run; "
            "the versions were fetched and laid out, nothing was classified."
        )
    run.note = " ".join(notes)
    return run


@dataclass
class _VersionTree:
    path: Path
    series: Series  # the series at this version, variants substituted
    stands_for: dict[str, str]  # patch file -> the series patch it stands for
    run: VersionRun


def _version_tree(target: Target, spec: MatrixSpec, version: str, opts: Options, log) -> _VersionTree:
    """Fetch and lay out one version (reused when the same wheel made it)."""
    vr = VersionRun(version=version)
    files, stands_for = _series_for(target, spec, version)
    wheel, sha = None, ""
    if target.kind == Kind.WHEEL:
        wheel, sha = fetch.fetch_version_wheel(target, version, opts.cache, opts.offline)
        vr.wheel, vr.sha256 = wheel.name, sha
    series = Series.read(_version_target(target, version, wheel, sha, files))
    dest = opts.build / f"{target.name}-{version}"
    t0 = time.monotonic()
    line = prepare_tree(series, dest, wheel, sha, pinned=version == target.pinned)
    log(f"matrix {target.name} {version}: {line} ({time.monotonic() - t0:.1f} s)")
    return _VersionTree(dest, series, stands_for, vr)


def run_version(vt: _VersionTree, pinned_tree: Path, spec: MatrixSpec, tests: _TestRunner) -> None:
    """Classify every patch on one version, commit the applicable ones, run their tests."""
    seed_pinned_objects(vt.path, pinned_tree, list(vt.series.patches))
    rows = classify(vt.path, vt.series)
    applied: list[tuple[Patch, Cell]] = []
    for patch, cell in rows:
        rel = str(patch.path.relative_to(vt.series.target.patch_dir))
        cell.patch_file, cell.variant = rel, rel != vt.stands_for[rel]
        if cell.variant and cell.outcome == Outcome.EXACT:
            cell.detail = "the variant's pre-image blob ids are this version's files"
        vt.run.cells[vt.stands_for[rel]] = cell
        if not cell.outcome.applies:
            cell.tests = TestResult(Tests.NA, "")
        elif why := apply_and_commit(vt.path, patch):
            cell.tests = TestResult(Tests.NOT_RUN, f"git am -3 failed: {why}")
        else:
            applied.append((patch, cell))
    # A fix already upstream: its tests still say whether upstream's version of it works.
    # Only the patch's new test files are written (work tree, no commit).
    for patch, cell in rows:
        if cell.outcome == Outcome.UPSTREAM and patch_test_files(patch):
            new = [f"--include={f}" for f in patch_test_files(patch) if gitutil.blob_at(vt.path, "HEAD", f) is None]
            if new and gitutil.git(vt.path, "apply", *new, str(patch.path), check=False).returncode == 0:
                applied.append((patch, cell))
    for patch, cell in applied:
        cell.tests = tests.run(vt, patch)


@dataclass
class _TestRunner:
    """How a target's patch tests run: interpreter, extra PYTHONPATH, pytest options, or why not."""

    python: Path
    extra_path: list[Path]
    pytest_args: tuple[str, ...]
    skip_reason: str  # non-empty: tests are not run
    log: Callable[[str], None]

    def run(self, vt: _VersionTree, patch: Patch) -> TestResult:
        files = patch_test_files(patch)
        if self.skip_reason:
            return TestResult(Tests.NOT_RUN, self.skip_reason, files)
        if files and not self.python.exists():
            return TestResult(Tests.NOT_RUN, f"no venv: {self.python} is missing (scripts/setup_venvs.sh)", files)
        t0 = time.monotonic()
        result = run_patch_tests(self.python, vt.path, files, extra_path=self.extra_path, pytest_args=self.pytest_args)
        self.log(
            f"matrix {vt.series.target.name} {vt.run.version}: {patch.label} tests {result.result} "
            f"({time.monotonic() - t0:.1f} s)"
        )
        return result


def run_target(target: Target, spec: MatrixSpec, opts: Options, log=print) -> TargetRun:
    run = _new_run(target, spec)
    versions = sorted(dict.fromkeys(spec.versions), key=_version_key) if target.kind == Kind.WHEEL else [target.pinned]
    python = _python_for(target, spec, opts)
    run.tests_env = _tests_env(python, spec, opts) if spec.run_tests else ""
    skip = "" if opts.run_tests and spec.run_tests else (spec.no_tests_reason or "--no-tests")
    tests = _TestRunner(python, [_repo_path(p, opts) for p in spec.pythonpath], spec.pytest_args, skip, log)
    try:  # the pinned tree first: its blobs seed every other version's 3-way merges
        pinned_tree = _version_tree(target, spec, target.pinned, opts, log).path
    except OverlayError as exc:  # nothing can be compared without the pin
        run.versions = [VersionRun(version=v, error=f"pinned tree: {exc}") for v in versions]
        log(f"matrix {target.name}: error: {exc}")
        return run
    for version in versions:
        try:
            vt = _version_tree(target, spec, version, opts, log)
        except OverlayError as exc:  # recorded; the run goes on and fails at the end
            run.versions.append(VersionRun(version=version, error=str(exc)))
            log(f"matrix {target.name} {version}: error: {exc}")
            continue
        run.versions.append(vt.run)
        if target.patches:
            run_version(vt, pinned_tree, spec, tests)
            log(f"matrix {target.name} {version}: " + ", ".join(f"{k}={c.outcome}" for k, c in vt.run.cells.items()))
    return run


def run_matrix(
    manifest: Manifest, names: list[str] | None, versions: dict[str, list[str]], opts: Options, log=print
) -> list[TargetRun]:
    selected = manifest.select(names)
    unknown = sorted(set(versions) - {t.name for t in selected})
    if unknown:
        raise UsageError(
            f"--versions names {unknown[0]!r}, which is not among the selected targets "
            f"({', '.join(t.name for t in selected)})"
        )
    runs = []
    t0 = time.monotonic()
    for target in selected:
        spec = target.matrix
        if target.name in versions:
            spec = dataclasses.replace(spec, versions=tuple(versions[target.name]))
        runs.append(run_target(target, spec, opts, log))
    cells = sum(len(v.cells) for r in runs for v in r.versions)
    log(
        f"matrix: {len(runs)} target(s), {sum(len(r.versions) for r in runs)} version(s), {cells} cell(s) "
        f"in {time.monotonic() - t0:.0f} s"
    )
    return runs


def errors(runs: list[TargetRun]) -> list[str]:
    return [f"{r.target} {v.version}: {v.error}" for r in runs for v in r.versions if v.error]


def parse_versions(values: list[str] | None, names: list[str] | None) -> dict[str, list[str]]:
    """`--versions T=V1,V2` (repeatable), or `--versions V1,V2` with exactly one `--target`."""
    result: dict[str, list[str]] = {}
    for value in values or []:
        name, sep, rest = value.partition("=")
        if not sep:
            if not names or len(names) != 1:
                raise UsageError(f"--versions {value}: name the target (T=V1,V2) or pass exactly one --target")
            name, rest = names[0], value
        result.setdefault(name, []).extend(v.strip() for v in rest.split(",") if v.strip())
    return result
