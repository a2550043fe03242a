"""Download pinned wheels from the registry with pip, verified by sha256, cached under the repo."""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from sgl_overlay.engine import subproc
from sgl_overlay.engine.manifest import Kind, PinnedWheel, Target
from sgl_overlay.errors import OverlayError

Log = Callable[[str], None]  # where progress lines go (the command line prints them)


def sha256_of(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def pip_tag_args(wheel_name: str) -> list[str]:
    """pip flags that select exactly the pinned wheel's tags, whatever Python runs the tool."""
    _, _, _, tags = parse_wheel_filename(wheel_name)
    args: list[str] = ["--only-binary=:all:"]
    for tag in sorted(tags, key=str):
        args += ["--platform", tag.platform, "--abi", tag.abi]
        if tag.interpreter.startswith("cp"):
            args += ["--implementation", "cp", "--python-version", tag.interpreter[2:]]
    return args


def download(requirement: str, tags_like: str, cache: Path) -> Path:
    """pip-download one wheel of `requirement` with the tags of wheel file `tags_like` into `cache`."""
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--progress-bar", "off"]
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        proc = subproc.run([*pip, "-d", tmp, *pip_tag_args(tags_like), requirement], "pip download", check=False)
        got = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(got) != 1:
            full = short_of_space([Path(tempfile.gettempdir()), cache])
            if full:
                raise OverlayError(
                    f"pip could not download {requirement}: only {full[1] // (1024 * 1024)} MB free in {full[0]}, and "
                    "pip reports a full disk as a connectivity problem; free some space and run again"
                )
            raise OverlayError(
                f"pip could not download {requirement}: {subproc.failure_reason(proc)}; check the network, or put the "
                "wheel into the cache folder by hand"
            )
        return Path(shutil.move(got[0], cache / got[0].name))


# The largest pinned wheel is under 100 MB; pip also unpacks into its temporary folder.
MIN_FREE_BYTES = 512 * 1024 * 1024


def short_of_space(folders: list[Path]) -> tuple[Path, int] | None:
    """The first folder whose disk has less than MIN_FREE_BYTES free, and its free bytes."""
    for folder in folders:
        free = shutil.disk_usage(folder).free
        if free < MIN_FREE_BYTES:
            return folder, free
    return None


def fetch_wheel(target: Target, cache: Path, offline: bool, log: Log, pin: PinnedWheel | None = None) -> Path:
    """Return the cached, verified wheel `pin` of `target` (default: the tree's), downloading it if needed."""
    pin = pin or target.wheels[0]
    cache.mkdir(parents=True, exist_ok=True)
    dest = cache / pin.file
    cached = dest.exists()
    if not cached:
        if offline:
            raise OverlayError(
                f"{pin.file} is not in the wheel cache {cache}, and this command reads only the cache; run "
                "`sgl-overlay fetch` (online) first"
            )
        log(f"fetch {target.name}: downloading {target.requirement} ({pin.file})")
        got = download(target.requirement, pin.file, cache)
        if got.name != pin.file:
            got.unlink()
            raise OverlayError(
                f"pip downloaded {got.name} for {target.requirement}, the manifest pins {pin.file}; check the pin in "
                "patches/manifest.toml"
            )
    found = sha256_of(dest)
    if found != pin.sha256:
        if not cached:  # a fresh download that fails its pin is not kept
            dest.unlink()
        raise OverlayError(
            f"sha256 mismatch for {pin.file}: expected {pin.sha256}, found {found}; delete {dest} and run "
            "`sgl-overlay fetch` again (or check the pin in patches/manifest.toml)"
        )
    log(
        f"fetch {target.name}: {pin.file} "
        + ("from cache (sha256 ok)" if cached else f"{dest.stat().st_size / 1e6:.1f} MB, sha256 ok")
    )
    return dest


def fetch_wheels(target: Target, cache: Path, offline: bool, log: Log) -> list[Path]:
    """Every pinned wheel of `target`, in manifest order (the first is the tree's)."""
    return [fetch_wheel(target, cache, offline, log, pin) for pin in target.wheels]


def _cached_wheel(cache: Path, dist: str, version: str) -> Path | None:
    found = []
    for p in cache.glob("*.whl"):
        try:
            name, ver, _, _ = parse_wheel_filename(p.name)
        except InvalidWheelFilename:  # foreign files in the cache are ignored
            continue
        if name == dist and ver == Version(version):
            found.append(p)
    if len(found) > 1:
        raise OverlayError(f"several wheels of {dist} {version} in {cache}: {[p.name for p in found]}; keep one")
    return found[0] if found else None


def fetch_version_wheel(target: Target, version: str, cache: Path, offline: bool, log: Log) -> tuple[Path, str]:
    """The wheel of any released `version` (cache first, else pip with the pinned wheel's tags) and
    its sha256; only the pinned version's sha256 is checked against the manifest."""
    if target.kind == Kind.WHEEL and version == target.version:
        return fetch_wheel(target, cache, offline, log), target.wheels[0].sha256
    dist = target.dist_name
    path = _cached_wheel(cache, dist, version)
    if path is None:
        if offline:
            raise OverlayError(f"no wheel of {dist} {version} in {cache} and --offline was given")
        requirement = f"{dist}=={version}"
        log(f"fetch {target.name}: downloading {requirement}")
        path = download(requirement, target.wheel, cache)
    return path, sha256_of(path)
