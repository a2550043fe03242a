"""Default trees and wheel cache: beside a checkout's patches/, in the user's cache for the wheel's copy."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import REPO_ROOT
from sgl_overlay.builds import places as places_module
from sgl_overlay.builds.places import places
from synth import TOOL, clone, git, make_overlay, one_error


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


def homeless(*args: str, cwd: Path, site: Path) -> subprocess.CompletedProcess:
    """The tool as a container's user runs it: a uid with no passwd entry and no $HOME (a user namespace maps this
    user to uid 12345), from an installed copy of the package (`site`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    user = ["unshare", "--user", "--map-user=12345", "--map-group=12345"]
    return subprocess.run(
        [*user, *TOOL, *args], capture_output=True, text=True, cwd=cwd, env={**env, "PYTHONPATH": str(site)}
    )


def test_a_user_without_a_home_works_on_a_checkout(tmp_path: Path) -> None:
    """status/apply/revert/doctor need no cache folder; a command that needs one names how to give it."""
    if subprocess.run(["unshare", "--user", "--map-user=12345", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespaces here (`unshare --user` fails)")
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    site = tmp_path / "site"
    shutil.copytree(
        Path(places_module.__file__).parents[1],
        site / "sgl_overlay",
        ignore=shutil.ignore_patterns("patches", "__pycache__"),
    )
    shutil.copytree(ov.patches, site / "sgl_overlay" / "patches")
    for command in ("status", "apply", "status", "revert"):
        proc = homeless(command, "--checkout", str(co), cwd=tmp_path, site=site)
        assert proc.returncode == 0 and not proc.stderr, (command, proc.stdout, proc.stderr)
    assert git(co, "rev-parse", "HEAD") == git(ov.upstream, "rev-parse", "HEAD")
    doctor = homeless("doctor", "--no-live", cwd=tmp_path, site=site)
    assert "no sglang" in doctor.stdout and not doctor.stderr, doctor.stderr
    line = one_error(homeless("fetch", cwd=tmp_path, site=site))
    assert "uid 12345 has no home directory; set XDG_CACHE_HOME=DIR, or pass --trees DIR and --cache DIR" in line
