"""Download pinned wheels from the registry with pip, verified by sha256, cached under the repo."""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from sgl_overlay import subproc
from sgl_overlay.errors import OverlayError
from sgl_overlay.manifest import Kind, PinnedWheel, Target


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def pip_tag_args(wheel_name: str) -> list[str]:
    """pip flags that select exactly the pinned wheel's tags, whatever Python runs the tool."""
    _, _, _, tags = parse_wheel_filename(wheel_name)
    args: list[str] = ["--only-binary=:all:"]
    for tag in sorted(tags, key=str):
        args += ["--platform", tag.platform, "--abi", tag.abi]
        if tag.interpreter.startswith("cp"):
            args += ["--implementation", "cp", "--python-version", tag.interpreter[2:]]
    return args


def verify_wheel(path: Path, expected: str) -> None:
    found = sha256_of(path)
    if found != expected:
        raise OverlayError(
            f"sha256 mismatch for {path.name}: expected {expected}, found {found}; "
            f"delete {path} and run `sgl-overlay fetch` again (or check the pin in patches/manifest.toml)"
        )


def download(requirement: str, tags_like: str, cache: Path) -> Path:
    """pip-download one wheel of `requirement` with the tags of wheel file `tags_like` into `cache`."""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            "-d",
            tmp,
            *pip_tag_args(tags_like),
            requirement,
        ]
        proc = subproc.run(cmd, "pip download", check=False)
        got = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(got) != 1:
            raise OverlayError(
                f"pip could not download {requirement}: {subproc.failure_reason(proc)}; "
                "check the network, or put the wheel into the cache folder by hand"
            )
        dest = cache / got[0].name
        shutil.move(str(got[0]), dest)
    return dest


def fetch_wheel(target: Target, cache: Path, offline: bool = False, pin: PinnedWheel | None = None) -> Path:
    """Return the cached, verified wheel `pin` of `target` (default: the tree's), downloading it if needed."""
    pin = pin or target.wheels[0]
    cache.mkdir(parents=True, exist_ok=True)
    dest = cache / pin.file
    if dest.exists():
        verify_wheel(dest, pin.sha256)
        print(f"fetch {target.name}: {pin.file} from cache (sha256 ok)", flush=True)
        return dest
    if offline:
        raise OverlayError(
            f"{pin.file} is not in the cache {cache} and --offline was given; run `sgl-overlay fetch` online once"
        )
    print(f"fetch {target.name}: downloading {target.requirement} ({pin.file})", flush=True)
    got = download(target.requirement, pin.file, cache)
    if got.name != pin.file:
        got.unlink()
        raise OverlayError(
            f"pip downloaded {got.name} for {target.requirement}, the manifest pins {pin.file}; "
            "check the pin in patches/manifest.toml"
        )
    try:
        verify_wheel(got, pin.sha256)
    except OverlayError:
        got.unlink()
        raise
    size_mb = dest.stat().st_size / 1e6
    print(f"fetch {target.name}: {pin.file} {size_mb:.1f} MB, sha256 ok", flush=True)
    return dest


def fetch_wheels(target: Target, cache: Path, offline: bool = False) -> list[Path]:
    """Every pinned wheel of `target`, in manifest order (the first is the tree's)."""
    return [fetch_wheel(target, cache, offline, pin) for pin in target.wheels]


def _cached_wheel(cache: Path, dist: str, version: str) -> Path | None:
    if not cache.is_dir():
        return None
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


def fetch_version_wheel(target: Target, version: str, cache: Path, offline: bool) -> tuple[Path, str]:
    """The wheel of any released `version` (cache first, else pip with the pinned wheel's tags) and
    its sha256; only the pinned version's sha256 is checked against the manifest."""
    if target.kind == Kind.WHEEL and version == target.version:
        return fetch_wheel(target, cache, offline), target.sha256
    dist = target.dist_name
    path = _cached_wheel(cache, dist, version)
    if path is None:
        if offline:
            raise OverlayError(f"no wheel of {dist} {version} in {cache} and --offline was given")
        requirement = f"{dist}=={version}"
        print(f"fetch {target.name}: downloading {requirement}", flush=True)
        path = download(requirement, target.wheel, cache)
    return path, sha256_of(path)
