"""Which overlay targets a git checkout holds, and whether it is safe to write to."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from sgl_overlay import gitutil
from sgl_overlay.errors import OverlayError
from sgl_overlay.manifest import Manifest, Target


@dataclass(frozen=True)
class Checkout:
    path: Path
    targets: tuple[Target, ...]
    embedded: bool  # a tree `sgl-overlay fetch` laid out (fixed identity, reproducible commits)


def _project_name(repo: Path) -> str | None:
    pyproject = repo / "python" / "pyproject.toml"
    try:
        return tomllib.loads(pyproject.read_text()).get("project", {}).get("name")
    except (FileNotFoundError, tomllib.TOMLDecodeError):
        return None


def detect(path: Path, manifest: Manifest, only: list[str] | None = None) -> Checkout:
    """Find the targets in `path`: the tree marker, python/pyproject.toml's name, marker files."""
    repo = gitutil.toplevel(path)
    marked = gitutil.config_get(repo, "sgl-overlay.target")
    if marked:
        found = [manifest.get(marked)]
    else:
        name = _project_name(repo)
        found = [
            t
            for t in manifest.targets.values()
            if (t.project_name and t.project_name == name) or (t.marker and (repo / t.marker).exists())
        ]
    if only:
        wanted = [manifest.get(n) for n in only]
        missing = [t.name for t in wanted if t not in found]
        if missing and found:
            raise OverlayError(
                f"{repo} does not hold target {missing[0]} (it holds {', '.join(t.name for t in found)})"
            )
        found = wanted if not found else [t for t in found if t in wanted]
    if not found:
        raise OverlayError(
            f"unknown project in {repo}: neither python/pyproject.toml names sglang or sglang-kt nor "
            "sgl-kernel/ is there; pass a checkout of sgl-project/sglang or kvcache-ai/sglang"
        )
    return Checkout(path=repo, targets=tuple(found), embedded=bool(marked))


def ensure_writable(co: Checkout) -> None:
    """Refuse a tree with a half-finished git operation or uncommitted changes."""
    busy = gitutil.operation_in_progress(co.path)
    if busy:
        raise OverlayError(
            f"{co.path} has {busy} in progress (half-applied series?); finish it or run "
            "`git am --abort` / `git rebase --abort` there, then try again"
        )
    dirty = gitutil.dirty_files(co.path)
    if dirty:
        raise OverlayError(
            f"{co.path} has uncommitted changes in {len(dirty)} file(s) (first: {dirty[0]}); "
            "commit or stash them, then try again"
        )
