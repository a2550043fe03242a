"""`doctor`: is each fix present in a Python environment? Installed files are compared by blob id."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from sgl_overlay import gitutil, subproc
from sgl_overlay.errors import UsageError, Why
from sgl_overlay.manifest import Kind, Manifest
from sgl_overlay.series import Series
from sgl_overlay.wheels import no_wheel_fits, patched_wheel_name, shipped_changes, wheel_for_python, wheel_path_of

KERNEL_DISTS = ("sglang-kernel", "sgl-kernel")
EXT_DIST = "sgl-kernel-ext"
EXT_MODULE = "sgl_kernel_ext"
EXT_FAST_PATH = Version("0.2.0")  # first sgl_kernel_ext with the runner's list entry point
KERNEL_NAMES = (*KERNEL_DISTS, EXT_DIST)  # every kernel distribution doctor looks for

# Runs inside the inspected interpreter: standard library only.
_PROBE = r"""
import importlib.metadata as md, json, sys
names = sys.argv[1:]
dists = {}
for name in names:
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    dists[name] = {"version": d.version, "root": str(d.locate_file(""))}
plugins = [[ep.name, ep.value] for ep in md.entry_points(group="sglang.srt.plugins")]
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
                  "version": list(sys.version_info[:2])}))
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
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_python_target(
    manifest: Manifest, series: Series, info: dict, dist_dir: Path, python: tuple[int, int]
) -> list[Finding]:
    target = series.target
    name = target.name
    pin = wheel_for_python(target, python)  # the patched twin of the wheel pip picks for this Python
    if pin is None:
        fix = f"{no_wheel_fits(target, python)}: use one of those Pythons"
    else:
        patched = dist_dir / patched_wheel_name(pin.file, manifest.local_version)
        fix = f"pip install --no-deps --force-reinstall {patched}"
        if not patched.is_file():
            fix += " (not built yet: run `sgl-overlay wheels` first)"
    installed = Version(info["version"])
    if installed.local == manifest.local_version and installed.base_version != target.version:
        what = f"installed {installed}: built by `sgl-overlay wheels --checkout` once the series was in"
        return [Finding(name, what, True, "")]
    if installed.base_version != target.version:
        what = f"installed {installed}, the overlay pins {target.version}: fixes not checked"
        return [Finding(name, what, False, f"pip install {target.requirement} && {fix}" if pin else fix)]
    final = shipped_changes(series)
    root = Path(info["root"])
    findings = []
    for patch in series.patches:
        files = [rel for p in patch.touched() if (rel := wheel_path_of(target, p)) is not None]
        ok = all(gitutil.file_blob(root / rel) == final[rel] for rel in files)
        findings.append(Finding(name, f"{patch.subject} ({len(files)} file(s))", ok, fix))
    return findings


def check_kernel(data: dict, dist_dir: Path) -> list[Finding]:
    dists = data["dists"]
    if not any(name in dists for name in KERNEL_NAMES):
        return []
    fix = f"pip install {dist_dir}/sgl_kernel_ext-*.whl"
    wired = any(ep[1].startswith(EXT_MODULE) for ep in data["plugins"])
    findings = [
        Finding("sgl-kernel", f"{EXT_DIST} installed (copy_to_gpu_no_ce for any N <= 512)", EXT_DIST in dists, fix),
        Finding("sgl-kernel", "wired into sglang through a sglang.srt.plugins entry point", wired, fix),
    ]
    if EXT_DIST in dists:
        what = (
            "fast caller path: the DeepGEMM runner's count list read in C++, one launch "
            "(plugin hooks on copy_list_to_gpu_no_ce / copy_list_to_gpu)"
        )
        findings.append(Finding("sgl-kernel", what, Version(dists[EXT_DIST]["version"]) >= EXT_FAST_PATH, fix))
    if data["live"] is not None:
        what = "live N=16 copy on the GPU (tensor op and list entry point)"
        findings.append(Finding("sgl-kernel", what, data["live"] is True, f"{data['live']}; reinstall: {fix}"))
    return findings


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


def doctor(
    manifest: Manifest, python: str, dist_dir: Path, live: bool = True, site: Path | None = None
) -> DoctorReport:
    if site is not None and not site.is_dir():
        raise UsageError(Why.SITE_NOT_A_FOLDER, site=site)
    wheel_targets = [t for t in manifest.targets.values() if t.kind == Kind.WHEEL]
    data = probe(python, [t.dist_name for t in wheel_targets], live, site)
    installed: list[tuple[str, str, str | None]] = []
    findings: list[Finding] = []
    for target in wheel_targets:
        info = data["dists"].get(target.dist_name)
        if info is not None:
            installed.append((target.dist_name, info["version"], info["root"]))
            findings += check_python_target(manifest, Series.read(target), info, dist_dir, tuple(data["version"]))
    installed += [(k, data["dists"][k]["version"], None) for k in KERNEL_NAMES if k in data["dists"]]
    findings += check_kernel(data, dist_dir)
    unchecked = () if any(k in data["dists"] for k in KERNEL_NAMES) else KERNEL_NAMES
    return DoctorReport(data["python"], installed, findings, tuple(unchecked))
