"""`doctor`: whether each fix is installed in a Python environment, as its report says it.

Installed files are compared by blob id. The findings' words, the command that fixes each and the report's lines
are made here, beside the findings they say."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from sgl_overlay.builds import routes
from sgl_overlay.builds.wheels import (
    BUILD_MARK,
    no_wheel_fits,
    patched_wheel_name,
    shipped_changes,
    wheel_for_python,
    wheel_path_of,
)
from sgl_overlay.engine import gitutil, subproc
from sgl_overlay.engine.manifest import Kind, Manifest, Target
from sgl_overlay.engine.series import Patch, Series
from sgl_overlay.errors import OverlayError, UsageError

KERNEL_NAMES = ("sglang-kernel", "sgl-kernel")  # every kernel distribution doctor looks for

# Runs inside the inspected interpreter: standard library only.
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, re, sys
names = sys.argv[2:]
dists = {}
for name in names:
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    dists[name] = {"version": d.version, "root": str(d.locate_file(""))}
    dists[name]["requires"] = d.requires or []
    dists[name]["build"] = d.read_text(sys.argv[1])  # what `wheels --checkout` wrote (None: another build)
try:
    torch_version = md.version("torch")
except md.PackageNotFoundError:
    torch_version = None
kernel = None  # the sgl_kernel package, found without importing it (its native library needs a GPU driver)
try:
    spec = importlib.util.find_spec("sgl_kernel")
except (ImportError, ValueError):
    spec = None
if spec is not None and spec.submodule_search_locations:
    where = list(spec.submodule_search_locations)[0]
    version = None
    for file, pattern in (("_payload_manifest.py", "VERSION"), ("version.py", "__version__")):
        try:
            found = re.search(r"^" + pattern + r"\s*=\s*['\"]([^'\"]+)", open(os.path.join(where, file)).read(), re.M)
        except OSError:
            found = None
        if found:
            version = found.group(1)
            break
    owners = sorted(set(md.packages_distributions().get("sgl_kernel", [])))
    if not owners:  # a package that ships sgl_kernel without declaring it (kt-kernel): its RECORD says
        owners = sorted({d.metadata["Name"] for d in md.distributions()
                         if any(f.parts[:2] == ("sgl_kernel", "__init__.py") for f in d.files or ())})
    kernel = {"where": where, "version": version, "owners": owners}
live = None  # the installed DeepGEMM runner's copy_list_to_gpu_no_ce at N = 16, on a GPU
if "--live" in names and ("sglang" in dists or "sglang-kt" in dists):
    try:
        import torch
        if torch.cuda.is_available():
            from sglang.srt.layers.moe.moe_runner.deep_gemm import copy_list_to_gpu_no_ce
            counts = [i * 7 - 3 for i in range(16)]
            out = copy_list_to_gpu_no_ce(counts)
            live = out.cpu().tolist() == counts and out.dtype == torch.int32 and out.is_contiguous()
    except Exception as exc:
        live = f"{type(exc).__name__}: {exc}".splitlines()[0]
print(json.dumps({"dists": dists, "live": live, "python": sys.executable,
                  "version": list(sys.version_info[:2]), "torch": torch_version, "kernel": kernel}))
"""


@dataclass
class Finding:
    target: str
    what: str
    ok: bool
    fix: str  # what makes it ok (a command, or why none exists), shown only when it is not
    modified: Edited | None = None  # a file neither stock nor patched (a user's edit or rebuild); None: stock or ok


@dataclass(frozen=True)
class Edited:
    """An installed file that is neither the stock one nor the patched one: its blob and those two (None: absent)."""

    file: Path
    have: str | None
    stock: str | None
    patched: str | None


def default_dist(root: Path) -> Path:
    """Where the fix commands find the patched wheels: the checkout's `dist/` (beside its `patches/`),
    else `dist/` in the current folder, where the README's install commands run."""
    return root / "dist" if (root / "dist").is_dir() else Path("dist")


def probe(python: str, dists: list[str], live: bool, site: Path | None = None) -> dict:
    names = [*dists, *KERNEL_NAMES] + (["--live"] if live else [])
    env = {}
    if site is not None:  # an install made with `pip install --target DIR`
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    proc = subproc.run([python, "-c", _PROBE, BUILD_MARK, *names], f"inspecting {python}", env=env)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    try:
        found = json.loads(last)
    except ValueError:
        found = None
    if not isinstance(found, dict):  # not a Python that runs the probe (a wrapper that prints its own text)
        raise OverlayError(
            f"{python} did not answer the environment probe (its last line: {last[:80]!r}); pass --python the "
            "environment's Python interpreter itself"
        )
    return found


def wheel_fix(manifest: Manifest, target: Target, dist_dir: Path, python: tuple[int, int]) -> tuple[str, bool]:
    """The command that installs the patched twin of the wheel pip picks for this Python; False when
    no pinned wheel fits that Python (the text then says which do)."""
    pin = wheel_for_python(target, python)
    if pin is None:
        return f"{no_wheel_fits(target, python)}: use one of those Pythons", False
    patched = dist_dir / patched_wheel_name(pin.file, manifest.local_version)
    fix = f"pip install --no-deps --force-reinstall {patched}"
    return fix + ("" if patched.is_file() else " (not built yet: run `sgl-overlay wheels` first)"), True


def check_python_target(
    manifest: Manifest, series: Series, info: dict, dist_dir: Path, python: tuple[int, int]
) -> list[Finding]:
    target = series.target
    name = target.name
    fix, fits = wheel_fix(manifest, target, dist_dir, python)
    installed = Version(info["version"])
    built = _checkout_build(info)
    if built and built["series"] != shipped_changes(series):
        what = f"installed {installed}: {_built_by(built)} with another version of the series"
        rebuild = f"rebuild it with `sgl-overlay wheels --checkout {built['checkout']}` (it names what to do first)"
        return [Finding(name, what, False, f"{rebuild}, then install that wheel")]
    final = built["blobs"] if built else shipped_changes(series)  # what the files are where the fixes are in
    root = Path(info["root"])
    findings = []
    stock = series.preimages()
    for patch in series.patches:
        shipped = {p: rel for p in patch.touched() if (rel := wheel_path_of(target, p)) is not None}
        have = {rel: gitutil.file_blob(root / rel) for rel in shipped.values()}
        ok = all(have[rel] == final.get(rel) for rel in have) or _holds_change(patch, root, target)
        edited = [(rel, p) for p, rel in shipped.items() if have[rel] not in (final.get(rel), stock.get(p))]
        modified = None
        if not ok and edited and not _holds_change(patch, root, target, reverse=False):
            rel, p = edited[0]
            modified = Edited(root / rel, have[rel], stock.get(p), final.get(rel))
        findings.append(Finding(name, f"{patch.subject} ({len(shipped)} file(s))", ok, fix, modified))
    if built and all(f.ok for f in findings):
        what = f"installed {installed}: {_built_by(built)}, where the series was in; its files are that commit's"
        return [Finding(name, what, True, "")]
    if built or installed.base_version == target.version:
        return findings
    if all(f.ok for f in findings):  # a build of a checkout with the series in (pip's own)
        what = f"installed {installed}: its files are the series' post-images (a build of a patched checkout)"
        return [Finding(name, what, True, "")]
    what = f"installed {installed}, the overlay pins {target.version}: fixes not checked"
    return [Finding(name, what, False, f"pip install {target.requirement} && {fix}" if fits else fix)]


def _checkout_build(info: dict) -> dict | None:
    """What `wheels --checkout` recorded in the installed wheel (BUILD_MARK), None for another build or a record
    this version cannot read."""
    try:
        mark = json.loads(info.get("build") or "null")
    except ValueError:
        return None
    keys = {"checkout": str, "commit": str, "series": dict, "blobs": dict}
    return mark if isinstance(mark, dict) and all(isinstance(mark.get(k), t) for k, t in keys.items()) else None


def _built_by(mark: dict) -> str:
    return f"built by `sgl-overlay wheels --checkout` from {mark['checkout']} at {mark['commit'][:12]}"


def _holds_change(patch: Patch, root: Path, target: Target, reverse: bool = True) -> bool:
    """The installed files hold the patch's change amid other edits (a user's build of a patched checkout
    whose files are not the pinned ones): the patch reverse-applies to them (`git apply -R --check`); with
    `reverse` False, they lack it amid other edits (a build of an unpatched fork): the patch applies."""
    shipped = {p: rel for p in patch.touched() if (rel := wheel_path_of(target, p)) is not None}
    if not shipped:
        return False
    tree_path, rel = next(iter(shipped.items()))
    strip = 1 + tree_path.count("/") - rel.count("/")  # a/ and the tree folders the wheel does not have
    includes = [f"--include={rel}" for rel in shipped.values()]
    check = ["git", "apply", "--check", *(["-R"] if reverse else []), f"-p{strip}", *includes, str(patch.path)]
    ceiling = {"GIT_CEILING_DIRECTORIES": str(root.parent)}  # the files alone, not a repository around them
    return subproc.run(check, f"checking {root}", check=False, env=ceiling, cwd=root).returncode == 0


def check_kernel(data: dict, runner: Finding | None = None, sent: tuple[int, ...] = ()) -> list[Finding]:
    """The installed sgl_kernel's copy_to_gpu_no_ce: which N it has, and whether the installed DeepGEMM
    runner (`runner`: its caller patch in, or not; `sent`: the lengths the patched one sends) sends only
    lengths it has; the live copy on a GPU."""
    kernel = data.get("kernel")
    if kernel is None and not any(name in data["dists"] for name in KERNEL_NAMES):
        return []
    kernel = kernel or {"version": None, "owners": []}
    owner = f" (in {', '.join(kernel['owners'])})" if kernel["owners"] else ""
    name = f"sgl_kernel {kernel['version'] or '(no version file)'}{owner}"
    lengths = routes.kernel_lengths(kernel["version"])
    if lengths is None:
        what = f"{name}: which N its copy_to_gpu_no_ce has is not known here"
    else:
        what = f"{name}: copy_to_gpu_no_ce has N = {', '.join(map(str, lengths))} only, others raise `unexpected N`"
    covered = runner is not None and runner.ok and (lengths is None or set(sent) <= set(lengths))
    fix = runner.fix if runner is not None else "install the patched sglang or sglang-kt wheel (its DeepGEMM runner)"
    if sent:
        what += f"; the patched DeepGEMM runner sends N = {', '.join(map(str, sent))} only"
    findings = [Finding("sgl-kernel", what, covered, fix)]
    if data["live"] is not None:
        what = "live N=16 copy on the GPU through the installed DeepGEMM runner"
        findings.append(Finding("sgl-kernel", what, data["live"] is True, f"{data['live']}; reinstall: {fix}"))
    return findings


def runner_finding(manifest: Manifest, series: Series, info: dict, dist_dir: Path, python: tuple[int, int]) -> Finding:
    """Is the installed DeepGEMM runner the one the series ships (it sends the counts in lengths the
    target's released kernels have)?"""
    target = series.target
    final = shipped_changes(series).get(routes.RUNNER)
    names = [p.subject for p in series.patches if routes.RUNNER in map(lambda t: wheel_path_of(target, t), p.touched())]
    ok = final is not None and gitutil.file_blob(Path(info["root"]) / routes.RUNNER) == final
    what = f"the DeepGEMM runner ({routes.RUNNER}) from {target.name}'s caller patch"
    if names:
        what += f" ({names[-1]})"
    return Finding("sgl-kernel", what, ok, wheel_fix(manifest, target, dist_dir, python)[0])


@dataclass
class DoctorReport:
    """What an environment has: its interpreter, the distributions found, each fix's finding."""

    python: str
    installed: list[tuple[str, str, str | None]]  # (distribution, version, where: None for the kernel's)
    findings: list[Finding]
    kernel_unchecked: tuple[str, ...] = ()  # the kernel distributions looked for, when none is installed

    @property
    def ok(self) -> bool:
        return bool(self.findings) and all(f.ok for f in self.findings)


def report_lines(r: DoctorReport) -> list[str]:
    """The environment, what is installed there, then each finding (a missing one with its fix, each fix once)."""
    lines = [f"environment: {r.python}"] + [
        f"{d} {v}" if root is None else f"{d} {v} at {root}" for d, v, root in r.installed
    ]
    if not r.findings:
        return lines + ["no sglang, sglang-kt or sgl-kernel installed here; pass --python of the serving env"]
    if r.kernel_unchecked:
        lines.append(
            f"no {' or '.join(r.kernel_unchecked)} installed here: its copy_to_gpu_no_ce lengths are not checked"
        )
    shown: set[str] = set()  # one fix often mends several findings: print it once, under the first
    for f in r.findings:
        if f.modified is not None:
            m = f.modified
            lines.append(
                f"  [MODIFIED] {f.target}: {f.what}: {m.file} is {_blob(m.have)}, neither the stock file "
                f"({_blob(m.stock)}) nor the patched one ({_blob(m.patched)}): edited or rebuilt there"
            )
        else:
            lines.append(f"  [{'ok' if f.ok else 'MISSING'}] {f.target}: {f.what}")
        if not f.ok:
            lines.append(f"      fix: {f.fix}" if f.fix not in shown else "      fix: the one above")
            shown.add(f.fix)
    return lines


def _blob(blob: str | None) -> str:
    return f"blob {blob[:12]}" if blob else "absent"


def doctor(
    manifest: Manifest,
    series_of: Callable[[Target], Series],
    python: str,
    dist_dir: Path,
    live: bool = True,
    site: Path | None = None,
) -> DoctorReport:
    if site is not None and not site.is_dir():
        raise UsageError(f"--site {site} is not a folder; pass the DIR of `pip install --target DIR`")
    wheel_targets = [t for t in manifest.targets.values() if t.kind == Kind.WHEEL]
    data = probe(python, [t.dist_name for t in wheel_targets], live, site)
    version = tuple(data["version"])
    installed: list[tuple[str, str, str | None]] = []
    findings: list[Finding] = []
    runner, sent = None, ()
    for target in wheel_targets:
        info = data["dists"].get(target.dist_name)
        if info is not None:
            installed.append((target.dist_name, info["version"], info["root"]))
            series = series_of(target)
            findings += check_python_target(manifest, series, info, dist_dir, version)
            if runner is None:
                runner = runner_finding(manifest, series, info, dist_dir, version)
                sent = routes.RUNNER_LENGTHS.get(target.name, ())
    installed += [(k, data["dists"][k]["version"], None) for k in KERNEL_NAMES if k in data["dists"]]
    findings += check_kernel(data, runner, sent)
    kernel_found = any(k in data["dists"] for k in KERNEL_NAMES) or data.get("kernel") is not None
    unchecked = () if kernel_found else KERNEL_NAMES
    return DoctorReport(data["python"], installed, findings, tuple(unchecked))
