"""Default trees and wheel cache: beside a checkout's patches/, in the user's cache for the wheel's copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import REPO_ROOT
from sgl_overlay.builds import places as places_module
from sgl_overlay.builds.places import places


def test_a_checkout_keeps_them_beside_its_patches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    at = places(REPO_ROOT / "patches" / "manifest.toml", None, None)
    want = (REPO_ROOT / "build" / "trees", (REPO_ROOT / ".cache" / "wheels").resolve(), False)
    assert (at.trees, at.cache, at.packaged) == want
    other = places(tmp_path / "copy" / "patches" / "manifest.toml", None, None)
    assert other.trees == tmp_path / "copy" / "build" / "trees"


@pytest.mark.parametrize("xdg", ["XDG", "", "relative/dir"])
def test_the_packaged_copy_uses_the_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xdg: str) -> None:
    """A relative or empty $XDG_CACHE_HOME is ignored, as the XDG spec says. (In a checkout the package's
    patches/ is a link to the checkout's: an installed package folder stands in here.)"""
    package = tmp_path / "site-packages" / "sgl_overlay"
    (package / "patches").mkdir(parents=True)
    monkeypatch.setattr(places_module, "PACKAGE_DIR", package)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / xdg) if xdg == "XDG" else xdg)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    base = tmp_path / "XDG" if xdg == "XDG" else tmp_path / "home" / ".cache"
    at = places(package / "patches" / "manifest.toml", None, None)
    assert (at.trees, at.cache, at.packaged) == (base / "sgl-overlay" / "trees", base / "sgl-overlay" / "wheels", True)
    given = places(package / "patches" / "manifest.toml", tmp_path / "t", tmp_path / "c")
    assert (given.trees, given.cache) == (tmp_path / "t", tmp_path / "c")
