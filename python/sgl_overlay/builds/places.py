"""Where the tool keeps its laid-out trees and its wheel cache when `--trees` / `--cache` are not given."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sgl_overlay.errors import OverlayError

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # sgl_overlay/, which this module's folder sits in


def user_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/sgl-overlay`, else `~/.cache/sgl-overlay` (where pip-installed tools keep theirs)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if os.path.isabs(base):
        return Path(base) / "sgl-overlay"
    try:
        home = Path.home()
    except RuntimeError:  # no $HOME and no home in the passwd database (a container's random uid)
        raise OverlayError(
            f"no folder for sgl-overlay's trees and wheel cache: $XDG_CACHE_HOME and $HOME are unset and uid "
            f"{os.getuid()} has no home directory; set XDG_CACHE_HOME=DIR, or pass --trees DIR and --cache DIR"
        ) from None
    return home / ".cache" / "sgl-overlay"


@dataclass(frozen=True)
class Places:
    """A checkout (or a patches/ folder named with --patches / $SGL_OVERLAY_PATCHES) keeps them beside that
    folder, in build/trees and .cache/wheels; the copy an installed wheel carries, in the user's cache folder,
    never inside site-packages. Each is found when a command first needs it (`--checkout` needs neither)."""

    root: Path  # the folder patches/ sits in: a checkout, or the installed package
    packaged: bool  # the manifest is the copy an installed wheel carries
    given_trees: Path | None = None
    given_cache: Path | None = None

    @property
    def trees(self) -> Path:
        return self._where(self.given_trees, "trees", self.root / "build" / "trees")

    @property
    def cache(self) -> Path:
        return self._where(self.given_cache, "wheels", self.root / ".cache" / "wheels")

    def _where(self, given: Path | None, name: str, beside: Path) -> Path:
        if given is not None:
            return given.resolve()
        return (user_cache_dir() / name if self.packaged else beside).resolve()


def places(manifest_path: Path, trees: Path | None, cache: Path | None) -> Places:
    patches = manifest_path.resolve().parent
    return Places(patches.parent, patches.is_relative_to(PACKAGE_DIR), trees, cache)
