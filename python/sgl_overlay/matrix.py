"""Compatibility matrix: on which released upstream versions each patch applies, and works.

For each target and each version of its range (`[targets.<t>.matrix] versions` in the
manifest, or `--versions`), the version's wheel is downloaded with pip into the wheel
cache (its sha256 is *recorded*, not pinned: only the pinned version's is checked) and
laid out exactly like the pinned tree (`tree.lay_out` with a copy of the target for that
version) under `build/matrix/<target>-<version>/`. The series (with the per-version
variants of `[[targets.<t>.variants]]` substituted) is then classified there by
`series.series_status` and refined into one outcome per patch x version:

- ``exact``: applies, and every pre-existing file it touches is byte-identical to the pin;
- ``offsets``: applies cleanly, but some touched file differs from the pin (hunks may move);
- ``3way``: applies only through a 3-way merge against the pinned pre-image;
- ``conflict``: does not apply, not even 3-way (the failing hunk is named);
- ``absent``: a file the patch modifies does not exist in that version;
- ``upstream``: the change is already there (the patch reverse-applies).

3-way needs the blobs named by the patch's `index` lines, which a tree laid out from
another version's wheel does not hold. Before classifying, the pinned pre-image blobs
(read from the pinned version's own matrix tree) are written into each version tree's
object store with `git hash-object -w`, and the series is replayed onto them in a
throw-away index, which also stores every intermediate blob a later patch's `index` line
names. Only objects are added: no commit, ref or file of that tree changes. This is what
`git am -3` would find in a real clone of upstream's history, so "3way" here means what it
means for a user of a checkout.

Every version where some patch applies then gets the applicable patches committed with
`git am -3`, and each applied patch's own tests (the test files it adds or changes under
test/ or tests/) run with the target's venv and PYTHONPATH=<tree>/python. Outcomes go to
`compat-matrix.md` and `compat-matrix.json` (written by `matrix_report`). Conflicts and failing tests are results, not
errors; only a failure of the tool itself (a download, a layout) makes the run fail.
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

from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sgl_overlay import fetch, gitutil, operations, tree
from sgl_overlay.errors import OverlayError, UsageError
from sgl_overlay.manifest import Kind, Manifest, MatrixSpec, PinnedWheel, Target
from sgl_overlay.patchfile import Patch, Series
from sgl_overlay.series import ScratchIndex, State, series_status

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


# ----------------------------------------------------------------------------- wheels


def _cached_wheel(cache: Path, dist: str, version: str) -> Path | None:
    if not cache.is_dir():
        return None
    found = []
    for p in cache.glob("*.whl"):
        try:
            name, ver, _, _ = parse_wheel_filename(p.name)
        except Exception:  # noqa: BLE001 - foreign files in the cache are ignored
            continue
        if name == dist and ver == Version(version):
            found.append(p)
    if len(found) > 1:
        raise OverlayError(f"several wheels of {dist} {version} in {cache}: {[p.name for p in found]}; "
                           "keep one")
    return found[0] if found else None


def fetch_version_wheel(target: Target, version: str, cache: Path, offline: bool) -> tuple[Path, str]:
    """The wheel of `version` (cache first, else pip with the pinned wheel's tags) and its sha256."""
    if target.kind == Kind.WHEEL and version == target.version:
        path = fetch.fetch_wheel(target, cache, offline)  # the pin: sha256 checked against the manifest
        return path, target.sha256
    dist = target.dist_name
    path = _cached_wheel(cache, dist, version)
    if path is None:
        if offline:
            raise OverlayError(f"no wheel of {dist} {version} in {cache} and --offline was given")
        requirement = f"{dist}=={version}"
        print(f"matrix {target.name}: downloading {requirement}", flush=True)
        path = fetch.download(requirement, target.wheel, cache)
    return path, fetch.sha256_of(path)


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
                return (f"{path}: hunk {i + 1}/{len(pf)}, @@ -{h.source_start},{h.source_length} "
                        f"+{h.target_start},{h.target_length} @@{header}")
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
            cell = (Cell(Outcome.OFFSETS, f"{', '.join(differ)} differ from the pin; {offs}") if differ
                    else Cell(Outcome.EXACT, "pre-image blob ids equal the pin"))
        elif st.state == State.APPLICABLE_3WAY:
            detail = st.detail if st.detail.startswith("patch failed") else ""
            cell = Cell(Outcome.THREE_WAY, detail and f"exact apply fails at {_hunk_of(st.patch, detail)}; "
                                              "3-way merge is clean")
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


def _pytest_reason(out: str) -> str:
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    words = re.compile(r"\b(passed|failed|error|errors|skipped|no tests ran)\b")
    summary = next((l for l in reversed(lines) if words.search(l)), "")
    summary = re.sub(r"\s+in [0-9.]+s.*$", "", summary.strip("= ")).strip("= ")
    first = next((l for l in lines if l.startswith(("FAILED ", "ERROR "))), "")
    errs = [l[1:].strip() for l in lines if l.startswith("E ") and l[1:].strip()]
    error = errs[0] if errs else ""
    if error.endswith(":") and len(errs) > 1:  # the message continues on the next line
        error = f"{error} {errs[1]}"
    if error and " - " not in first:
        first = f"{first} - {error}" if first else error
    reason = summary
    if first:
        reason = f"{summary}; {first}" if summary else first
    return reason[:300]


def run_patch_tests(python: Path, vtree: Path, files: list[str], timeout: int = TEST_TIMEOUT_S,
                    extra_path: list[Path] | None = None, pytest_args: tuple[str, ...] = ()) -> TestResult:
    if not files:
        return TestResult(Tests.NO_TESTS, "the patch adds or changes no test file")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(vtree / "python"), *map(str, extra_path or [])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *pytest_args, *files]
    try:
        proc = subprocess.run(cmd, cwd=vtree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return TestResult(Tests.ERROR, f"timed out after {timeout} s", files)
    out = proc.stdout + proc.stderr
    reason = _pytest_reason(out).replace(str(vtree), "<tree>")  # no machine paths in committed output
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


def run_target(target: Target, spec: MatrixSpec, opts: Options, log=print) -> TargetRun:
    wheel_kind = target.kind == Kind.WHEEL
    run = TargetRun(
        target=target.name,
        pinned=target.version if wheel_kind else target.commit,
        source="registry" if wheel_kind else "pinned commit only",
        patches=list(target.patches),
        variants=[dataclasses.asdict(v) for v in spec.variants],
    )
    if not wheel_kind:
        run.note = (f"{target.name} has no registry source (no wheel or sdist of this tree is published): "
                    f"its row covers the pinned commit {target.commit[:12]} only, rebuilt from the "
                    "full-context patches.")
    if not target.patches:
        run.note = (run.note + " " if run.note else "") + (
            f"No patches are listed for {target.name} in patches/manifest.toml at the time of this run; "
            "the versions were fetched and laid out, nothing was classified.")
    versions = sorted(dict.fromkeys(spec.versions), key=_version_key) if wheel_kind else [run.pinned[:12]]
    python = _python_for(target, spec, opts)
    extra_path = [_repo_path(p, opts) for p in spec.pythonpath]
    run.tests_env = _tests_env(python, spec, opts) if spec.run_tests else ""

    # The pinned tree first: its blobs seed every other version's 3-way merges.
    def tree_for(version: str) -> tuple[Path, Series, VersionRun, dict[str, str]]:
        vr = VersionRun(version=version)
        files, stands_for = _series_for(target, spec, version)
        if wheel_kind:
            wheel, sha = fetch_version_wheel(target, version, opts.cache, opts.offline)
            vr.wheel, vr.sha256 = wheel.name, sha
        else:
            wheel, sha = None, ""
        vs = Series.read(_version_target(target, version, wheel, sha, files))
        dest = opts.build / f"{target.name}-{version}"
        t0 = time.monotonic()
        line = prepare_tree(vs, dest, wheel, sha, pinned=version == pinned_version)
        log(f"matrix {target.name} {version}: {line} ({time.monotonic() - t0:.1f} s)")
        return dest, vs, vr, stands_for

    pinned_version = target.version if wheel_kind else run.pinned[:12]
    try:
        pinned_tree, *_ = tree_for(pinned_version)
    except OverlayError as exc:  # nothing can be compared without the pin
        run.versions = [VersionRun(version=v, error=f"pinned tree: {exc}") for v in versions]
        log(f"matrix {target.name}: error: {exc}")
        return run
    for version in versions:
        try:
            vtree, vs, vr, stands_for = tree_for(version)
        except OverlayError as exc:  # recorded; the run goes on and fails at the end
            run.versions.append(VersionRun(version=version, error=str(exc)))
            log(f"matrix {target.name} {version}: error: {exc}")
            continue
        run.versions.append(vr)
        if not target.patches:
            continue
        seed_pinned_objects(vtree, pinned_tree, list(vs.patches))
        rows = classify(vtree, vs)
        applied: list[tuple[Patch, Cell]] = []
        for patch, cell in rows:
            rel = str(patch.path.relative_to(target.patch_dir))
            cell.patch_file, cell.variant = rel, rel != stands_for[rel]
            if cell.variant and cell.outcome == Outcome.EXACT:
                cell.detail = "the variant's pre-image blob ids are this version's files"
            vr.cells[stands_for[rel]] = cell
            if cell.outcome.applies:
                why = apply_and_commit(vtree, patch)
                if why:
                    cell.tests = TestResult(Tests.NOT_RUN, f"git am -3 failed: {why}")
                else:
                    applied.append((patch, cell))
            else:
                cell.tests = TestResult(Tests.NA, "")
        # A fix already upstream: its tests still say whether upstream's version of it works.
        # Only the patch's new test files are written (work tree, no commit).
        for patch, cell in rows:
            if cell.outcome == Outcome.UPSTREAM and patch_test_files(patch):
                new = [f"--include={f}" for f in patch_test_files(patch)
                       if gitutil.blob_at(vtree, "HEAD", f) is None]
                if new and gitutil.git(vtree, "apply", *new, str(patch.path), check=False).returncode == 0:
                    applied.append((patch, cell))
        for patch, cell in applied:
            files = patch_test_files(patch)
            if not (opts.run_tests and spec.run_tests):
                why = spec.no_tests_reason or "--no-tests"
                cell.tests = TestResult(Tests.NOT_RUN, why, files)
            elif files and not python.exists():
                cell.tests = TestResult(Tests.NOT_RUN, f"no venv: {python} is missing (scripts/setup_venvs.sh)", files)
            else:
                t0 = time.monotonic()
                cell.tests = run_patch_tests(python, vtree, files, extra_path=extra_path,
                                             pytest_args=spec.pytest_args)
                log(f"matrix {target.name} {version}: {patch.label} tests {cell.tests.result} "
                    f"({time.monotonic() - t0:.1f} s)")
        log(f"matrix {target.name} {version}: " + ", ".join(f"{k}={c.outcome}" for k, c in vr.cells.items()))
    return run


def run_matrix(manifest: Manifest, names: list[str] | None, versions: dict[str, list[str]],
               opts: Options, log=print) -> list[TargetRun]:
    selected = manifest.select(names)
    unknown = sorted(set(versions) - {t.name for t in selected})
    if unknown:
        raise UsageError(f"--versions names {unknown[0]!r}, which is not among the selected targets "
                         f"({', '.join(t.name for t in selected)})")
    runs = []
    t0 = time.monotonic()
    for target in selected:
        spec = target.matrix
        if target.name in versions:
            spec = dataclasses.replace(spec, versions=tuple(versions[target.name]))
        runs.append(run_target(target, spec, opts, log))
    cells = sum(len(v.cells) for r in runs for v in r.versions)
    log(f"matrix: {len(runs)} target(s), {sum(len(r.versions) for r in runs)} version(s), {cells} cell(s) "
        f"in {time.monotonic() - t0:.0f} s")
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
