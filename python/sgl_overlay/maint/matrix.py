"""Compatibility matrix: on which released upstream versions each patch applies, and whether
its own tests pass there. The method (layout per version, seeded blobs for 3-way, variants,
outcome classes) is described in docs/DESIGN.md; `matrix_report` writes the results.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from xml.etree import ElementTree

from packaging.version import InvalidVersion, Version

from sgl_overlay.builds import fetch, tree
from sgl_overlay.builds.fetch import Log
from sgl_overlay.engine import gitutil, subproc, transaction
from sgl_overlay.engine.manifest import Kind, Manifest, MatrixSpec, PinnedWheel, Target
from sgl_overlay.engine.scratch import folder
from sgl_overlay.engine.series import Patch, Series
from sgl_overlay.engine.states import ON_TOP, PENDING, Outcome, PatchStatus, ScratchIndex, State, series_status
from sgl_overlay.engine.subproc import failure_reason
from sgl_overlay.errors import OverlayError, UsageError

SOURCE_ROOT = Path(__file__).resolve().parents[3]  # the checkout this package sits in (its venvs)
TEST_TIMEOUT_S = 900
# pytest as the matrix runs it: no cache files in the tree, none of upstream's own addopts
PYTEST = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=")


APPLIES = tuple(o for o in Outcome if o.state in PENDING)  # the patch is committed, its tests run

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


@dataclass
class Options:
    root: Path  # repository root (venvs are relative to it)
    cache: Path
    build: Path  # build/matrix
    run_tests: bool = True
    offline: bool = False
    python: dict[str, Path] = field(default_factory=dict)  # target -> interpreter, overrides the spec

    def repo_path(self, rel: str) -> Path:
        """A path of the manifest's matrix table: relative to the repo root (else this package's checkout)."""
        return next((p for p in (self.root / rel, SOURCE_ROOT / rel) if p.exists()), self.root / rel)


@dataclass
class _VersionTree:
    """One version laid out at its `upstream` commit, with the series to try there."""

    path: Path
    series: Series  # the series at this version, variants substituted
    stands_for: dict[str, str]  # patch file -> the series patch it stands for
    run: VersionRun


def lay_out_version(target: Target, spec: MatrixSpec, version: str, opts: Options, log: Log) -> _VersionTree:
    """Fetch one version and lay it out, clean: reused when the same wheel made it.
    Only the pinned version must match the manifest's pre-image blobs."""
    variants = [spec.variant_for(name, version) for name in target.patches]
    files = tuple(v.file if v else name for v, name in zip(variants, target.patches))
    run = VersionRun(version=version)
    at_version = dataclasses.replace(target, patches=files)  # the target as of this version
    wheel = None
    if target.kind == Kind.WHEEL:
        wheel, run.sha256 = fetch.fetch_version_wheel(target, version, opts.cache, opts.offline, log)
        run.wheel = wheel.name
        at_version = dataclasses.replace(at_version, version=version, wheels=(PinnedWheel(wheel.name, run.sha256),))
    series = Series.read(at_version)
    dest = opts.build / f"{target.name}-{version}"
    made_by = run.sha256 or "none"  # the wheel the tree is laid out from
    t0 = time.monotonic()
    if tree.is_ready(dest, at_version) and gitutil.config_get(dest, "sgl-overlay.matrix-sha256") == made_by:
        transaction.discard_leftovers(dest)
        transaction.rollback(dest, gitutil.out(dest, "rev-parse", tree.BASE_TAG))
        gitutil.git(dest, "clean", "-qfdx")
        laid = None
    else:
        laid = tree.lay_out(at_version, dest, wheel, series, force=True, check_pins=version == target.pinned)
        gitutil.git(dest, "config", "sgl-overlay.matrix-sha256", made_by)
    what = f"{dest} reused" if laid is None else laid.line()
    log(f"matrix {target.name} {version}: {what} ({time.monotonic() - t0:.1f} s)")
    return _VersionTree(dest, series, dict(zip(files, target.patches)), run)


def seed_pinned_objects(dest: Path, pinned_tree: Path, patches: tuple[Patch, ...]) -> None:
    """Write the pinned pre-images and the series' intermediate blobs into `dest`'s object store.

    Lets `git apply --3way` / `git am -3` find the base each `index` line names. Nothing but
    loose objects is added to `dest` (no ref, commit or work-tree file changes).
    """
    paths = sorted({c.path for p in patches for c in p.changes if c.old_blob})
    with ScratchIndex(dest, base=None) as scratch:
        for path in paths:  # a file the pin lacks has no pinned pre-image to seed
            if (data := gitutil.cat_blob(pinned_tree, tree.BASE_TAG, path)) is not None:
                blob = gitutil.hash_bytes(data, write_to=dest)
                gitutil.git(dest, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=scratch.env)
        for p in patches:  # writes each post-image blob, i.e. the next patch's pre-image
            scratch.apply(p.path)


def _hunk_of(patch: Patch, detail: str) -> str:
    """'patch failed: path:LINE' -> which hunk of that file, with its header."""
    m = re.search(r"patch failed: (.+):(\d+)", detail)
    if not m:
        return detail
    path, line = m.group(1), int(m.group(2))
    for pf in (pf for pf in patch.patchset if pf.path == path):
        for i, h in enumerate(pf):
            if h.source_start == line:
                span = f"@@ -{h.source_start},{h.source_length} +{h.target_start},{h.target_length} @@"
                header = f" {h.section_header.strip()}" if h.section_header.strip() else ""
                return f"{path}: hunk {i + 1}/{len(pf)}, {span}{header}"
    return f"{path}: hunk at pinned line {line}"


def _differs_from_pin(patch: Patch, vtree: Path, at_version: Target) -> list[str]:
    """Files the patch modifies that are, in this version, neither the patch's own `index` pre-image
    (a variant authored on that version's file) nor the pinned blob. A file that neither upstream nor
    the pin holds is one an earlier patch of the series adds: it is at the pin."""
    found = patch.not_at_preimage(lambda path: gitutil.blob_at(vtree, tree.BASE_TAG, path))
    return [c.path for c, here in found if here != at_version.preimages.get(c.path)]


def classify(st: PatchStatus, vtree: Path, at_version: Target) -> Cell:
    """The cell of one patch in a tree freshly reset to `upstream` (so no commit of the tool's is there yet)."""
    if st.state in ON_TOP:
        raise OverlayError(f"{st.patch.label}: unexpected state {st.state.value} in a fresh matrix tree")
    differ = _differs_from_pin(st.patch, vtree, at_version) if st.state == State.APPLICABLE else []
    outcome = Outcome.of(st.state, at_pin=not differ)
    match outcome:
        case Outcome.EXACT:
            detail = "pre-image blob ids equal the pin"
        case Outcome.OFFSETS:
            detail = f"{', '.join(differ)} differ from the pin; {st.detail or 'no line offsets'}"
        case Outcome.THREE_WAY:  # git does not always name where the exact apply failed
            where = _hunk_of(st.patch, st.detail) if st.detail.startswith("patch failed") else ""
            detail = where and f"exact apply fails at {where}; 3-way merge is clean"
        case Outcome.CONFLICT:
            detail = f"{_hunk_of(st.patch, st.detail)} (fails exact and 3-way)"
        case Outcome.ABSENT:
            detail = f"missing {st.detail}"
        case _:
            detail = st.detail
    return Cell(outcome, detail)


def apply_and_commit(vtree: Path, patch: Patch) -> str:
    """`git am -3` one patch; '' on success, else a one-line reason (tree rolled back)."""
    try:
        with transaction.locked(vtree, "matrix"), transaction.Change(vtree, "matrix", [patch.subject]):
            proc = transaction.run_am(vtree, [patch.path], laid_out=True)
            if proc.returncode != 0:
                raise _AmStopped(proc)
    except _AmStopped as stop:
        return transaction.am_failure(stop.proc).reason()
    finally:
        subproc.release()  # the cell is settled: Ctrl-C stops the matrix again
    return ""


class _AmStopped(Exception):
    """`git am` stopped in a matrix tree (the Change rolls it back)."""

    def __init__(self, proc: subprocess.CompletedProcess):
        super().__init__(proc.returncode)
        self.proc = proc


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
    failed, skipped, errors = (int(suite.get(k, 0)) for k in ("failures", "skipped", "errors"))
    passed = int(suite.get("tests", 0)) - failed - skipped - errors
    counts = {"passed": passed, "failed": failed, "skipped": skipped, "error" if errors == 1 else "errors": errors}
    reason = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    for case in suite.iter("testcase"):
        bad = next((b for b in (case.find("failure"), case.find("error")) if b is not None), None)
        if bad is not None:
            lines = [ln[1:].strip() for ln in (bad.text or "").splitlines() if ln.startswith("E ")]
            why = lines[0] if lines else (bad.get("message") or "").splitlines()[0]
            name = "::".join(filter(None, (case.get("classname"), case.get("name"))))
            reason += f"; {'FAILED' if bad.tag == 'failure' else 'ERROR'} {name} - {why}"
            break
    return reason.replace(str(tree), "<tree>")[:300]  # no machine paths in committed output


def run_patch_tests(
    python: Path, vtree: Path, files: list[str], extra_path: list[Path] | None = None, pytest_args: tuple[str, ...] = ()
) -> TestResult:
    if not files:
        return TestResult(Tests.NO_TESTS, "the patch adds or changes no test file")
    pythonpath = os.pathsep.join([str(vtree / "python"), *map(str, extra_path or [])])
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1"}
    with folder("junit") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [str(python), *PYTEST, f"--junitxml={xml}", *pytest_args, *files]
        try:
            proc = subprocess.run(cmd, cwd=vtree, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return TestResult(Tests.ERROR, f"timed out after {TEST_TIMEOUT_S} s", files)
        reason = _junit_reason(xml, vtree) or failure_reason(proc)
    if proc.returncode == 0:
        only_skipped = "passed" not in reason and "skipped" in reason
        return TestResult(Tests.SKIP if only_skipped else Tests.PASS, reason, files)
    if proc.returncode == 1:
        return TestResult(Tests.FAIL, reason, files)
    if proc.returncode == 5:
        return TestResult(Tests.NO_TESTS, reason or "pytest collected nothing", files)
    return TestResult(Tests.ERROR, f"pytest exit {proc.returncode}: {reason}", files)


@dataclass
class _TestRunner:
    """How a target's patch tests run: interpreter, extra PYTHONPATH, pytest options, or why not."""

    python: Path
    extra_path: list[Path]
    pytest_args: tuple[str, ...]
    skip_reason: str  # non-empty: tests are not run
    log: Log

    def run(self, vt: _VersionTree, patch: Patch) -> TestResult:
        files = patch_test_files(patch)
        if self.skip_reason:
            return TestResult(Tests.NOT_RUN, self.skip_reason, files)
        if files and not self.python.exists():
            return TestResult(Tests.NOT_RUN, f"no venv: {self.python} is missing (scripts/setup_venvs.sh)", files)
        t0 = time.monotonic()
        result = run_patch_tests(self.python, vt.path, files, extra_path=self.extra_path, pytest_args=self.pytest_args)
        took = time.monotonic() - t0
        self.log(f"matrix {vt.series.target.name} {vt.run.version}: {patch.label} tests {result.result} ({took:.1f} s)")
        return result


def run_version(vt: _VersionTree, pinned_tree: Path, tests: _TestRunner) -> None:
    """Classify every patch on one version, commit the applicable ones, run their tests."""
    seed_pinned_objects(vt.path, pinned_tree, vt.series.patches)
    rows = [(st.patch, classify(st, vt.path, vt.series.target)) for st in series_status(vt.path, vt.series)]
    applied: list[tuple[Patch, Cell]] = []
    for patch, cell in rows:
        rel = str(patch.path.relative_to(vt.series.target.patch_dir))
        cell.patch_file, cell.variant = rel, rel != vt.stands_for[rel]
        if cell.variant and cell.outcome == Outcome.EXACT:
            cell.detail = "the variant's pre-image blob ids are this version's files"
        vt.run.cells[vt.stands_for[rel]] = cell
        if cell.outcome not in APPLIES:
            cell.tests = TestResult(Tests.NA)
        elif why := apply_and_commit(vt.path, patch):
            cell.tests = TestResult(Tests.NOT_RUN, f"git am -3 failed: {why}")
        else:
            applied.append((patch, cell))
    # A fix already upstream: its tests still say whether upstream's version of it works.
    # Only the patch's new test files are written (work tree, no commit).
    for patch, cell in rows:
        if cell.outcome == Outcome.UPSTREAM:
            new = [f"--include={f}" for f in patch_test_files(patch) if gitutil.blob_at(vt.path, "HEAD", f) is None]
            if new and gitutil.git(vt.path, "apply", *new, str(patch.path), check=False).returncode == 0:
                applied.append((patch, cell))
    for patch, cell in applied:
        cell.tests = tests.run(vt, patch)


def _version_key(v: str):
    """Release order; a version string packaging cannot parse sorts last."""
    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


def _new_run(target: Target, spec: MatrixSpec, opts: Options, python: Path) -> TargetRun:
    """A target's row before any version is tried: its source, notes, and how its tests run."""
    notes = []
    if target.kind != Kind.WHEEL:
        notes.append(
            f"{target.name} has no registry source (no wheel or sdist of this tree is published): its row "
            f"covers the pinned commit {target.pinned} only, rebuilt from the full-context patches."
        )
    if not target.patches:
        notes.append(
            f"No patches are listed for {target.name} in patches/manifest.toml at the time of this run; "
            "the versions were fetched and laid out, nothing was classified."
        )
    run = TargetRun(
        target=target.name,
        pinned=target.pinned,
        source="registry" if target.kind == Kind.WHEEL else "pinned commit only",
        note=" ".join(notes),
        patches=list(target.patches),
        variants=[dataclasses.asdict(v) for v in spec.variants],
    )
    if spec.run_tests:  # in words, the interpreter relative to the repo: no machine paths
        shown = next((python.relative_to(b) for b in (opts.root, SOURCE_ROOT) if python.is_relative_to(b)), python)
        args = " ".join(spec.pytest_args)
        path = ":".join(["<tree>/python", *spec.pythonpath])
        run.tests_env = f"`{shown} -m pytest{' ' + args if args else ''}` with `PYTHONPATH={path}`"
    return run


def run_target(target: Target, spec: MatrixSpec, opts: Options, log: Log) -> TargetRun:
    venv = spec.venv or f".venvs/{target.name}"
    python = opts.python.get(target.name) or opts.repo_path(f"{venv}/bin/python")
    run = _new_run(target, spec, opts, python)
    skip = "" if opts.run_tests and spec.run_tests else (spec.no_tests_reason or "--no-tests")
    tests = _TestRunner(python, [opts.repo_path(p) for p in spec.pythonpath], spec.pytest_args, skip, log)
    versions = sorted(dict.fromkeys(spec.versions), key=_version_key) if target.kind == Kind.WHEEL else [target.pinned]
    try:  # the pinned tree first: its blobs seed every other version's 3-way merges
        pinned = lay_out_version(target, spec, target.pinned, opts, log)
    except OverlayError as exc:  # nothing can be compared without the pin
        run.versions = [VersionRun(version=v, error=f"pinned tree: {exc}") for v in versions]
        log(f"matrix {target.name}: error: {exc}")
        return run
    for version in versions:
        try:
            vt = pinned if version == target.pinned else lay_out_version(target, spec, version, opts, log)
        except OverlayError as exc:  # recorded; the run goes on and fails at the end
            run.versions.append(VersionRun(version=version, error=str(exc)))
            log(f"matrix {target.name} {version}: error: {exc}")
            continue
        run.versions.append(vt.run)
        if target.patches:
            run_version(vt, pinned.path, tests)
            log(f"matrix {target.name} {version}: " + ", ".join(f"{k}={c.outcome}" for k, c in vt.run.cells.items()))
    return run


def run_matrix(
    manifest: Manifest, names: list[str] | None, versions: dict[str, list[str]], opts: Options, log: Log
) -> list[TargetRun]:
    selected = manifest.select(names)
    if unknown := sorted(set(versions) - {t.name for t in selected}):
        raise UsageError(
            f"--versions names {unknown[0]!r}, which is not among the selected targets "
            f"({', '.join(t.name for t in selected)})"
        )
    runs = []
    t0 = time.monotonic()
    for target in selected:
        wanted = tuple(versions.get(target.name, target.matrix.versions))
        runs.append(run_target(target, dataclasses.replace(target.matrix, versions=wanted), opts, log))
    done = [v for r in runs for v in r.versions]
    cells = sum(len(v.cells) for v in done)
    log(f"matrix: {len(runs)} target(s), {len(done)} version(s), {cells} cell(s) in {time.monotonic() - t0:.0f} s")
    return runs


def errors(runs: list[TargetRun]) -> list[str]:
    """The line of each version the run could not cover, for the closing list of `matrix`."""
    return [f"error: {r.target} {v.version}: {v.error}" for r in runs for v in r.versions if v.error]


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
