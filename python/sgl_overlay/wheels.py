"""Patched wheels: the pinned registry wheel with the series' post-images, under a local version."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from sgl_overlay import gitutil
from sgl_overlay.errors import OverlayError
from sgl_overlay.manifest import Target
from sgl_overlay.series import State, series_status
from sgl_overlay.verify import final_blobs, verify_tree


def wheel_path_of(target: Target, tree_path: str) -> str | None:
    """Map a checkout path (python/sglang/x.py) to its wheel path (sglang/x.py); None if not shipped."""
    for wheel_top, tree_top in target.layout.items():
        if tree_path == tree_top or tree_path.startswith(tree_top + "/"):
            return wheel_top + tree_path[len(tree_top) :]
    return None


def patched_wheel_name(target: Target, local_version: str) -> str:
    """The pinned wheel's file name with the local version label (what `wheel pack` writes)."""
    stem, _, tags = target.wheel[: -len(".whl")].partition(f"-{target.version}-")
    return f"{stem}-{target.version}+{local_version}-{tags}.whl"


def shipped_changes(target: Target) -> dict[str, str | None]:
    """Wheel path -> final blob id, for each file the series changes inside the wheel."""
    result = {}
    for path, blob in final_blobs(target).items():
        rel = wheel_path_of(target, path)
        if rel is not None:
            result[rel] = blob
    return result


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise OverlayError(f"{what} failed: {last[0]}")


def build_patched_wheel(target: Target, wheel: Path, tree: Path, out_dir: Path, local_version: str) -> Path:
    """Unpack the pinned wheel, write the patched files from the verified tree, repack.

    `wheel pack` regenerates RECORD and renames the dist-info for the local version; every
    other file keeps its bytes and the wheel keeps its original tags.
    """
    problems = verify_tree(tree, target)
    if problems:
        raise OverlayError(f"{problems[0]}; run `make trees` (fetch, apply, verify) first")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        _run([sys.executable, "-m", "wheel", "unpack", "-d", tmp, str(wheel)], f"unpacking {wheel.name}")
        (unpacked,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        for path, blob in final_blobs(target).items():
            rel = wheel_path_of(target, path)
            if rel is None:
                continue  # tests and tooling the patches add outside the package
            dest = unpacked / rel
            if blob is None:
                dest.unlink(missing_ok=True)
                continue
            data = gitutil.git(tree, "cat-file", "blob", f"HEAD:{path}", input=b"").stdout
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        _run([sys.executable, "-m", "wheel", "pack", "-d", str(out_dir), "--local-version", local_version,
              str(unpacked)], f"packing the patched {target.name} wheel")
    made = out_dir / patched_wheel_name(target, local_version)
    if not made.is_file():
        raise OverlayError(f"`wheel pack` did not write {made}; is the wheel package >= 0.46 installed?")
    return made


def build_from_checkout(checkout: Path, targets: list[Target], out_dir: Path) -> Path:
    """Upstream's own build of python/ in a checkout whose overlay series is fully in."""
    for target in targets:
        if not target.layout:
            continue
        pending = [r for r in series_status(checkout, target) if r.state not in (State.APPLIED, State.UPSTREAM)]
        if pending:
            raise OverlayError(
                f"{pending[0].patch.label} is {pending[0].state.value} in {checkout}; "
                f"run `sgl-overlay apply --checkout {checkout}` first"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.glob("*.whl"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out_dir), str(checkout / "python")],
         f"building {checkout / 'python'} with upstream's build")
    made = sorted(set(out_dir.glob("*.whl")) - before)
    if not made:
        raise OverlayError(f"pip wheel produced no wheel from {checkout / 'python'}")
    return made[0]
