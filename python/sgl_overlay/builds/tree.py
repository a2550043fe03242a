"""Lay out a pinned target as a git checkout: one `upstream` commit, patches on top."""

from __future__ import annotations

import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from sgl_overlay.engine import gitutil
from sgl_overlay.engine.manifest import Kind, Target
from sgl_overlay.engine.series import Series, check_preimages, preimage_from_full_context
from sgl_overlay.errors import OverlayError

BASE_TAG = "upstream"


def _extract_wheel(wheel: Path, target: Target, dest: Path) -> int:
    """Extract the wheel's packages to their checkout paths; WheelFile checks RECORD hashes."""
    from wheel.wheelfile import WheelFile  # only `fetch` extracts: the other commands start without zipfile

    count = 0
    with WheelFile(wheel) as wf:
        for info in wf.infolist():
            top, _, rest = info.filename.partition("/")
            if info.is_dir() or top not in target.layout:
                continue
            out = dest / target.layout[top] / rest
            out.parent.mkdir(parents=True, exist_ok=True)
            with wf.open(info) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            if (info.external_attr >> 16) & stat.S_IXUSR:  # the zip entry's Unix mode
                out.chmod(0o755)
            count += 1
    return count


def _rebuild_from_patches(series: Series, dest: Path) -> int:
    """Write each pinned file's pre-image, taken from the first full-context patch touching it."""
    pinned = series.preimages()
    for path, blob in pinned.items():
        source = series.source_of(path)
        data = preimage_from_full_context(source, path)
        found = gitutil.hash_bytes(data)
        if found != blob:
            raise OverlayError(
                f"pre-image of {path} rebuilt from {source.label} hashes to {found}, manifest pins {blob}; "
                "the patch was edited by hand: re-export it from the tree"
            )
        out = dest / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    return len(pinned)


def base_commit(target: Target, tree: Path) -> str:
    """The commit a target's series applies to, as each patch's `base-commit:` names it: the pinned
    upstream commit (sgl-kernel), else the laid-out tree's `upstream` commit, made reproducibly from
    the pinned wheel (fixed identity, date and message), since no upstream commit is that wheel."""
    return target.commit if len(target.commit) == 40 else gitutil.out(tree, "rev-parse", f"{BASE_TAG}^{{commit}}")


def is_ready(dest: Path, target: Target) -> bool:
    return (
        (dest / ".git").exists()
        and gitutil.config_get(dest, "sgl-overlay.target") == target.name
        and gitutil.config_get(dest, "sgl-overlay.version") == target.version
        and gitutil.git(dest, "rev-parse", "--verify", "--quiet", BASE_TAG, check=False).returncode == 0
    )


def require_ready(dest: Path, target: Target, first: str = "`sgl-overlay fetch`") -> None:
    """Refuse a target whose laid-out tree is not at `dest`, naming what to run `first`."""
    if not is_ready(dest, target):
        raise OverlayError(f"no tree for {target.name} at {dest}; run {first} first")


def no_op(patch: str, target: str, tree: str) -> str:
    """The refusal of a patch that changes nothing on a pinned tree."""
    return (
        f"{patch} changes nothing on {tree}: every file of it there already holds its post-image; "
        f"record where upstream has it under [targets.{target}.applied_upstream] in patches/manifest.toml "
        "and drop it from the series"
    )


@dataclass(frozen=True)
class LaidOut:
    """A target's tree at `dest`: there already (`files` None), or laid out now from `files` files."""

    target: str
    dest: Path
    version: str
    files: int | None = None
    head: str = ""

    def line(self) -> str:
        if self.files is None:
            return f"tree {self.target}: {self.dest} ready (upstream {self.version})"
        return f"tree {self.target}: {self.dest} laid out ({self.files} files, commit {self.head[:12]})"


def lay_out(
    target: Target, dest: Path, wheel: Path | None, series: Series, force: bool = False, check_pins: bool = True
) -> LaidOut:
    """Create `dest` as a git tree of the pinned target (idempotent) from its `wheel`, or for a
    patch-context target from its `series`. `check_pins=False` (the matrix, for versions other
    than the pin) skips the pre-image check."""
    if is_ready(dest, target) and not force:
        return LaidOut(target.name, dest, target.version)
    if dest.exists():
        if not force and any(dest.iterdir()):
            raise OverlayError(f"{dest} exists but is not the {target.label} tree; remove it or pass --force")
        shutil.rmtree(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    made_parent = not dest.parent.exists()
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if target.kind == Kind.WHEEL:
            assert wheel is not None
            count = _extract_wheel(wheel, target, tmp)
        else:
            count = _rebuild_from_patches(series, tmp)
        gitutil.git(tmp, "init", "-q", "-b", "main")
        gitutil.git(tmp, "config", "sgl-overlay.target", target.name)
        gitutil.git(tmp, "config", "sgl-overlay.version", target.version)
        gitutil.git(tmp, "config", "core.autocrlf", "false")
        gitutil.git(tmp, "add", "-A")
        msg = f"upstream {target.name} {target.version}\n\nSource: {target.wheel or target.upstream + '@' + target.commit}\n"
        gitutil.git(tmp, "commit", "-q", "-m", msg, env=gitutil.TOOL_IDENTITY)
        gitutil.git(tmp, "tag", BASE_TAG)
        no_ops = series.no_ops(lambda path: gitutil.blob_at(tmp, BASE_TAG, path)) if check_pins else []
        if no_ops:
            raise OverlayError(no_op(no_ops[0].label, no_ops[0].path.parent.name, target.label))
        problems = check_preimages(tmp, BASE_TAG, series) if check_pins else []
        if problems:
            raise OverlayError(
                f"{target.label}: pinned pre-image differs: {problems[0].line()}; fix patches/manifest.toml"
            )
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if made_parent:
            shutil.rmtree(dest.parent, ignore_errors=True)
        raise
    return LaidOut(target.name, dest, target.version, count, gitutil.head(dest))
