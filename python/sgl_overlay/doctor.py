"""`doctor`: is each fix present in a Python environment? Installed files are compared by blob id."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from sgl_overlay import gitutil, routes, subproc
from sgl_overlay.errors import OverlayError, UsageError, Why
from sgl_overlay.manifest import Kind, Manifest, Target
from sgl_overlay.series import Patch, Series
from sgl_overlay.wheels import no_wheel_fits, patched_wheel_name, shipped_changes, wheel_for_python, wheel_path_of

KERNEL_DISTS = ("sglang-kernel", "sgl-kernel")
EXT_DIST = "sgl-kernel-ext"
EXT_MODULE = "sgl_kernel_ext"
EXT_FAST_PATH = Version("0.2.0")  # first sgl_kernel_ext with the runner's list entry point
KERNEL_NAMES = (*KERNEL_DISTS, EXT_DIST)  # every kernel distribution doctor looks for

# Runs inside the inspected interpreter: standard library only.
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, re, sys
names = sys.argv[1:]
dists = {}
for name in names:
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    dists[name] = {"version": d.version, "root": str(d.locate_file(""))}
    dists[name]["requires"] = d.requires or []
plugins = [[ep.name, ep.value] for ep in md.entry_points(group="sglang.srt.plugins")]
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
ext = None  # loading the extension needs torch and its CUDA libraries, not a GPU
if "sgl-kernel-ext" in dists and torch_version is not None:
    try:
        import sgl_kernel_ext
        ext = {"loaded": sgl_kernel_ext.ensure_loaded(), "list_entry_point": hasattr(sgl_kernel_ext, "list_entry_point")}
    except Exception as exc:
        ext = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
live = None
if "--live" in names and "sgl-kernel-ext" in dists:
    try:
        import torch
        if torch.cuda.is_available():
            import sgl_kernel_ext
            src = torch.arange(16, dtype=torch.int32) * 7 - 3
            dst = torch.empty(16, dtype=torch.int32, device="cuda")
            sgl_kernel_ext.copy_to_gpu_no_ce(src, dst)
            fast = sgl_kernel_ext.copy_list_to_gpu_no_ce(src.tolist())
            torch.cuda.synchronize()
            live = bool(torch.equal(dst.cpu(), src) and torch.equal(fast.cpu(), src))
    except Exception as exc:
        live = f"{type(exc).__name__}: {exc}"
print(json.dumps({"dists": dists, "plugins": plugins, "live": live, "python": sys.executable,
                  "version": list(sys.version_info[:2]), "torch": torch_version, "kernel": kernel, "ext": ext}))
"""


@dataclass
class Finding:
    target: str
    what: str
    ok: bool
    fix: str  # what makes it ok (a command, or why none exists), shown only when it is not


def default_dist(root: Path) -> Path:
    """Where the fix commands find the patched wheels: the checkout's `dist/` (beside its `patches/`),
    else `dist/` in the current folder, where the README's install commands run."""
    return root / "dist" if (root / "dist").is_dir() else Path("dist")


def probe(python: str, dists: list[str], live: bool, site: Path | None = None) -> dict:
    names = [*dists, *KERNEL_NAMES] + (["--live"] if live else [])
    env = {}
    if site is not None:  # an install made with `pip install --target DIR`
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    proc = subproc.run([python, "-c", _PROBE, *names], f"inspecting {python}", env=env)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    try:
        found = json.loads(last)
    except ValueError:
        found = None
    if not isinstance(found, dict):  # not a Python that runs the probe (a wrapper that prints its own text)
        raise OverlayError(Why.PROBE_NOT_JSON, python=python, line=last[:80])
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
    final = shipped_changes(series)
    root = Path(info["root"])
    findings = []
    for patch in series.patches:
        files = [rel for p in patch.touched() if (rel := wheel_path_of(target, p)) is not None]
        ok = all(gitutil.file_blob(root / rel) == final[rel] for rel in files) or _holds_change(patch, root, target)
        findings.append(Finding(name, f"{patch.subject} ({len(files)} file(s))", ok, fix))
    if installed.base_version == target.version:
        return findings
    if all(f.ok for f in findings):  # a build of a checkout with the series in (`wheels --checkout`, pip)
        what = f"installed {installed}: its files are the series' post-images (a build of a patched checkout)"
        return [Finding(name, what, True, "")]
    if installed.local == manifest.local_version:
        what = f"installed {installed}: built by `sgl-overlay wheels --checkout` once the series was in"
        return [Finding(name, what, True, "")]
    what = f"installed {installed}, the overlay pins {target.version}: fixes not checked"
    return [Finding(name, what, False, f"pip install {target.requirement} && {fix}" if fits else fix)]


def _holds_change(patch: Patch, root: Path, target: Target) -> bool:
    """The installed files hold the patch's change amid other edits (a user's build of a patched checkout
    whose files are not the pinned ones): the patch reverse-applies to them (`git apply -R --check`)."""
    shipped = {p: rel for p in patch.touched() if (rel := wheel_path_of(target, p)) is not None}
    if not shipped:
        return False
    tree_path, rel = next(iter(shipped.items()))
    strip = 1 + tree_path.count("/") - rel.count("/")  # a/ and the tree folders the wheel does not have
    includes = [f"--include={rel}" for rel in shipped.values()]
    check = ["git", "apply", "--check", "-R", f"-p{strip}", *includes, str(patch.path)]
    ceiling = {"GIT_CEILING_DIRECTORIES": str(root.parent)}  # the files alone, not a repository around them
    return subproc.run(check, f"checking {root}", check=False, env=ceiling, cwd=root).returncode == 0


def _ext_build(torch: str) -> str:
    return f"build sgl_kernel_ext against torch {torch}: scripts/build_ext_torch.sh (sgl_kernel_ext/README.md)"


def _ext_install(dist_dir: Path, torch: str | None) -> str:
    """How to install the sgl_kernel_ext built for this torch: the wheel in dist_dir that requires it
    (pip would replace torch to satisfy another's pin), else how to build one."""
    if torch is None:
        return f"pip install {dist_dir}/sgl_kernel_ext-*.whl"
    wheel = routes.ext_wheel_for(dist_dir, torch)
    if wheel is None:
        return _ext_build(torch)
    if wheel.path.parent == dist_dir:
        return f"pip install {wheel.path}"
    return f'pip install --no-index --find-links {wheel.path.parent} "{EXT_DIST}=={wheel.version}"'


def _ext_findings(data: dict, fix: str, pin: str | None) -> list[Finding]:
    """sgl_kernel_ext installed, and loading with this environment's torch (what it was built for); the
    load is not checked where no torch is installed (nothing can serve there; an image's stand-in)."""
    dists = data["dists"]
    findings = [
        Finding("sgl-kernel", f"{EXT_DIST} installed (copy_to_gpu_no_ce for any N <= 512)", EXT_DIST in dists, fix)
    ]
    torch = data.get("torch")
    if EXT_DIST not in dists or torch is None:
        return findings
    built_for = routes.torch_pin(dists[EXT_DIST].get("requires"))
    ext = data.get("ext") or {}
    what = f"{EXT_DIST} {dists[EXT_DIST]['version']} (built for torch{built_for or ' of any version'}) loads with torch {torch}"
    ok = "error" not in ext and routes.pin_allows(built_for, torch)
    rebuild = _ext_build(torch)
    if pin is not None and not routes.pin_allows(pin, torch):
        rebuild += f"; the serving stack pins torch{pin}"
    findings.append(Finding("sgl-kernel", what, ok, f"{ext['error']}; {rebuild}" if "error" in ext else rebuild))
    return findings


def _lengths_finding(data: dict, covered: bool, fix: str) -> Finding | None:
    """Can the installed sgl-kernel's own copy_to_gpu_no_ce raise `unexpected N`? ok when the route sends
    those copies to sgl_kernel_ext."""
    kernel = data.get("kernel")
    if kernel is None:
        return None
    owner = f" (in {', '.join(kernel['owners'])})" if kernel["owners"] else ""
    name = f"sgl_kernel {kernel['version'] or '(no version file)'}{owner}"
    lengths = routes.kernel_lengths(kernel["version"])
    if lengths is None:
        what = f"{name}: which N its copy_to_gpu_no_ce has is not known here; stock kernels raise `unexpected N`"
    else:
        what = f"{name}: copy_to_gpu_no_ce has N = {', '.join(map(str, lengths))} only, others raise `unexpected N`"
    return Finding("sgl-kernel", what + ("; the route sends them to sgl_kernel_ext" if covered else ""), covered, fix)


def check_kernel(
    data: dict, dist_dir: Path, route: routes.Route | None = None, runner: Finding | None = None
) -> list[Finding]:
    """The kernel fix on the route the environment takes: the plugin entry point (sglang with
    sglang.srt.plugins), or the DeepGEMM runner patched to call sgl_kernel_ext (sglang-kt, `runner`)."""
    dists = data["dists"]
    if not any(name in dists for name in KERNEL_NAMES) and data.get("kernel") is None:
        return []
    way = route.way if route is not None else routes.Way.PLUGIN
    fix = _ext_install(dist_dir, data.get("torch"))
    findings = _ext_findings(data, fix, route.torch_pin if route else None)
    if way == routes.Way.PLUGIN:
        wired = any(ep[1].startswith(EXT_MODULE) for ep in data["plugins"])
        findings.append(Finding("sgl-kernel", "wired into sglang through a sglang.srt.plugins entry point", wired, fix))
    elif way == routes.Way.RUNNER and runner is not None:
        findings.append(runner)
    elif way == routes.Way.NONE:
        why = "no sglang.srt.plugins and not the KT fork: no way in for sgl_kernel_ext"
        rebuild = "rebuild sgl-kernel from a checkout with the kernel patch in (`sgl-overlay apply -t sgl-kernel`)"
        findings.append(Finding("sgl-kernel", why, False, rebuild))
    if EXT_DIST in dists:
        what = "fast caller path: the DeepGEMM runner's count list read in C++, one launch " + (
            "(sgl_kernel_ext.list_entry_point, which the runner calls)"
            if way == routes.Way.RUNNER
            else "(plugin hooks on copy_list_to_gpu_no_ce / copy_list_to_gpu)"
        )
        findings.append(Finding("sgl-kernel", what, Version(dists[EXT_DIST]["version"]) >= EXT_FAST_PATH, fix))
    if data["live"] is not None:
        what = "live N=16 copy on the GPU (tensor op and list entry point)"
        findings.append(Finding("sgl-kernel", what, data["live"] is True, f"{data['live']}; reinstall: {fix}"))
    lengths = _lengths_finding(data, way != routes.Way.NONE and all(f.ok for f in findings), fix)
    return findings + ([lengths] if lengths else [])


def runner_finding(manifest: Manifest, series: Series, info: dict, dist_dir: Path, python: tuple[int, int]) -> Finding:
    """Is the installed DeepGEMM runner the one the series ships (it calls sgl_kernel_ext when installed)?"""
    target = series.target
    final = shipped_changes(series).get(routes.RUNNER)
    names = [p.subject for p in series.patches if routes.RUNNER in map(lambda t: wheel_path_of(target, t), p.touched())]
    ok = final is not None and gitutil.file_blob(Path(info["root"]) / routes.RUNNER) == final
    what = f"wired into the DeepGEMM runner ({routes.RUNNER}) by {target.name}'s runner patch"
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
    routes: list[routes.Route] = field(default_factory=list)  # how the kernel fix reaches each sglang installed

    @property
    def ok(self) -> bool:
        return bool(self.findings) and all(f.ok for f in self.findings)


def doctor(
    manifest: Manifest, python: str, dist_dir: Path, live: bool = True, site: Path | None = None
) -> DoctorReport:
    if site is not None and not site.is_dir():
        raise UsageError(Why.SITE_NOT_A_FOLDER, site=site)
    wheel_targets = [t for t in manifest.targets.values() if t.kind == Kind.WHEEL]
    data = probe(python, [t.dist_name for t in wheel_targets], live, site)
    version = tuple(data["version"])
    installed: list[tuple[str, str, str | None]] = []
    findings: list[Finding] = []
    found_routes: list[routes.Route] = []
    runner = None
    for target in wheel_targets:
        info = data["dists"].get(target.dist_name)
        if info is not None:
            installed.append((target.dist_name, info["version"], info["root"]))
            series = Series.read(target)
            findings += check_python_target(manifest, series, info, dist_dir, version)
            found_routes.append(routes.route_of(target.dist_name, info, data.get("torch")))
            if found_routes[-1].way == routes.Way.RUNNER:
                runner = runner_finding(manifest, series, info, dist_dir, version)
    installed += [(k, data["dists"][k]["version"], None) for k in KERNEL_NAMES if k in data["dists"]]
    findings += check_kernel(data, dist_dir, found_routes[0] if found_routes else None, runner)
    kernel_found = any(k in data["dists"] for k in KERNEL_NAMES) or data.get("kernel") is not None
    unchecked = () if kernel_found else KERNEL_NAMES
    return DoctorReport(data["python"], installed, findings, tuple(unchecked), found_routes)
