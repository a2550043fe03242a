"""Where the tool keeps its laid-out trees and its wheel cache when `--trees` / `--cache` are not given."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # sgl_overlay/, which this module's folder sits in


def user_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/sgl-overlay`, else `~/.cache/sgl-overlay` (where pip-installed tools keep theirs)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "sgl-overlay"


@dataclass(frozen=True)
class Places:
    root: Path  # the folder patches/ sits in: a checkout, or the installed package
    trees: Path
    cache: Path
    packaged: bool  # the manifest is the copy an installed wheel carries


def places(manifest_path: Path, trees: Path | None, cache: Path | None) -> Places:
    """A checkout (or a patches/ folder named with --patches / $SGL_OVERLAY_PATCHES) keeps them beside
    that folder, in build/trees and .cache/wheels; the copy an installed wheel carries, in the user's
    cache folder, never inside site-packages."""
    patches = manifest_path.resolve().parent
    root = patches.parent
    packaged = patches.is_relative_to(PACKAGE_DIR)
    home = user_cache_dir() if packaged else None
    default_trees = home / "trees" if home else root / "build" / "trees"
    default_cache = home / "wheels" if home else root / ".cache" / "wheels"
    return Places(root, (trees or default_trees).resolve(), (cache or default_cache).resolve(), packaged)
