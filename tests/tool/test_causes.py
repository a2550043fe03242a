"""Every cause named, with the next step that works: a full disk, a checkout another user owns, a read-only
checkout, a CRLF patch file, a revert git cannot sign, a --python that prints no JSON; and doctor telling a
user's own patched build (files that hold the series' change amid other edits) from a stock one."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from synth import cli, clone, git, make_overlay, one_error, snapshot, write


@contextlib.contextmanager
def _mounted(where: Path, *options: str) -> Iterator[Path]:
    """A mount the test makes (root only); skips the test where the machine does not allow it."""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", *options, str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here ({proc.stderr.strip() or 'not root'}): the case needs a mount")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(folder: Path) -> None:
    """Write into `folder` until its file system is full."""
    for size in (65536, 4096, 512, 1):
        with contextlib.suppress(OSError), (folder / f"filler-{size}").open("wb", buffering=0) as f:
            while True:
                f.write(b"\0" * size)


@pytest.mark.parametrize("pages", [0, 1, 2, 4, 8, 16])
def test_a_full_disk_is_named(tmp_path: Path, pages: int) -> None:
    """The checkout's file system full but for `pages` pages of 4 KiB (so the lock, the journal or git's own
    writes are what fails): apply says no space is left, in one line, and leaves the tree as it was (no 'missing
    file', no conflict, no journal)."""
    ov = make_overlay(tmp_path)
    small = tmp_path / "small"
    with _mounted(small, "-t", "tmpfs", "-o", "size=2m", "tmpfs"):
        co = clone(ov.upstream, small / "checkout")
        _fill(small)
        filler = small / "filler-65536"
        os.truncate(filler, max(filler.stat().st_size - pages * 4096, 0))
        before = snapshot(co)
        proc = cli("--patches", str(ov.patches), "apply", "--checkout", str(co))
        if proc.returncode == 0:  # the room left was enough
            assert pages > 0 and proc.stdout.startswith("applied 2 patch(es)"), proc
            return
        line = one_error(proc)
        assert "no space left on" in line.lower() and "free some space" in line, line
        assert "missing file" not in line and "conflict" not in line, line
        assert snapshot(co) == before
        assert not (co / ".git" / "sgl-overlay-journal.json").exists()


def test_a_read_only_checkout_names_its_lock_not_a_temp_name(tmp_path: Path) -> None:
    """A checkout on a read-only mount: apply names the lock it could not create and why, changing nothing."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "checkout")
    view = tmp_path / "ro"
    with _mounted(view, "--bind", "-o", "ro", str(co)):
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=False)
        if os.access(view, os.W_OK) and (view / ".git").exists():
            probe = view / ".git" / "probe"
            try:
                probe.write_text("")
                probe.unlink()
                pytest.skip("the bind mount is writable here: no read-only case to test")
            except OSError:
                pass
        line = one_error(cli("--patches", str(ov.patches), "apply", "--checkout", str(view)))
        assert line.startswith(f"cannot create {view / '.git' / 'sgl-overlay.lock'} (Read-only file system)"), line
        assert ".lock." not in line and "must be writable" in line, line


def test_a_checkout_another_user_owns_is_named(tmp_path: Path) -> None:
    """git's "dubious ownership" refusal is named as that, with git's own way to trust the folder."""
    if os.getuid() != 0:
        pytest.skip("needs root to give the checkout to another user")
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "checkout")
    shutil.chown(co, 4242, 4242)
    for root, dirs, files in os.walk(co):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), 4242, 4242)
    line = one_error(cli("--patches", str(ov.patches), "status", "--checkout", str(co), env={"HOME": str(tmp_path)}))
    assert line.startswith(f"git refuses {co}: another user owns it"), line
    assert f"`git config --global --add safe.directory {co}`" in line, line


def test_a_crlf_patch_file_is_named_and_no_advice_writes_the_manifest(tmp_path: Path) -> None:
    """A patch file converted to CRLF (core.autocrlf): one line naming it and how to restore it; not the
    `sgl-overlay pins` advice, which would write the CRLF blob ids into manifest.toml."""
    ov = make_overlay(tmp_path)
    patch = ov.series[0]
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n"))
    manifest = (ov.patches / "manifest.toml").read_bytes()
    co = clone(ov.upstream, tmp_path / "checkout")
    line = one_error(cli("--patches", str(ov.patches), "status", "--checkout", str(co)))
    assert line.startswith(f"{patch} has CRLF line ends"), line
    assert "sgl-overlay pins" not in line and "core.autocrlf false" in line, line
    assert (ov.patches / "manifest.toml").read_bytes() == manifest


def test_a_revert_gpg_cannot_sign_is_named(tmp_path: Path) -> None:
    """`revert` through `git revert` (a commit on top) where commit.gpgSign is set and gpg fails: named as that,
    with the two ways on; the tree as it was."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    write(co, "notes.txt", "later\n")
    git(co, "add", "notes.txt")
    git(co, "commit", "-qm", "later work")
    git(co, "config", "commit.gpgSign", "true")
    git(co, "config", "gpg.program", "false")
    before = snapshot(co)
    line = one_error(cli(*base, "revert", "--checkout", str(co)))
    assert "gpg could not sign the revert commits" in line and "commit.gpgSign false" in line, line
    assert snapshot(co) == before


def test_doctor_python_that_prints_no_json(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'Python wrapper: hello'\n")
    fake.chmod(0o755)
    line = one_error(cli("--patches", str(ov.patches), "doctor", "--python", str(fake), "--no-live"))
    assert line == (
        f"{fake} did not answer the environment probe (its last line: 'Python wrapper: hello'); pass --python the "
        "environment's Python interpreter itself"
    )


def test_doctor_knows_a_users_own_patched_build(tmp_path: Path) -> None:
    """An sglang installed from the user's own patched checkout (`wheels --checkout`, or pip), whose files hold
    the series' change amid the checkout's own edits: doctor says [ok], not [MISSING]; a stock one stays
    [MISSING]."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "checkout")
    write(co, "python/sglang/model.py", (co / "python/sglang/model.py").read_text() + "line 41, the fork's own\n")
    git(co, "commit", "-qam", "fork: a line of its own")
    stock = {name: (co / "python/sglang" / name).read_text() for name in ("model.py", "hook.py")}
    assert cli("--patches", str(ov.patches), "apply", "--checkout", str(co)).returncode == 0
    for label, files in (("patched", None), ("stock", stock)):
        site = tmp_path / label
        (site / "sglang").mkdir(parents=True)
        for name in ("model.py", "hook.py"):
            text = files[name] if files else (co / "python/sglang" / name).read_text()
            (site / "sglang" / name).write_text(text)
        info = site / "sglang-1.0+local.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 1.0+local\n")
        proc = cli("--patches", str(ov.patches), "doctor", "--site", str(site), "--no-live")
        if label == "patched":
            assert proc.returncode == 0 and "MISSING" not in proc.stdout, proc.stdout + proc.stderr
        else:
            assert proc.returncode == 1 and "[MISSING] sglang" in proc.stdout, proc.stdout + proc.stderr


def test_wheels_checkout_of_the_kt_fork_names_its_version_variable(tmp_path: Path) -> None:
    """The KT fork's python/setup.py takes the version from SGLANG_KT_VERSION (tags play no part): a build
    without it (0.0.0.dev0) is refused naming that variable, not `git fetch --tags`."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    (co / "python/pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "sglang"\ndynamic = ["version"]\n\n[tool.setuptools]\npackages = ["sglang"]\n'
    )
    (co / "python/setup.py").write_text(
        'import os\n\nfrom setuptools import setup\n\nsetup(version=os.environ.get("SGLANG_KT_VERSION", "0.0.0.dev0"))\n'
    )
    (co / "python/sglang/__init__.py").write_text("")
    git(co, "add", "-A")
    git(co, "commit", "-qm", "packaging as the KT fork has it")
    base = ["--patches", str(ov.patches)]
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    out = tmp_path / "dist"
    line = one_error(cli(*base, "wheels", "--checkout", str(co), "--out", str(out)))
    assert "setup.py takes the version from $SGLANG_KT_VERSION, not from tags" in line, line
    assert "git fetch --tags" not in line, line


def test_an_edit_hidden_by_skip_worktree_is_named(tmp_path: Path) -> None:
    """A file marked --skip-worktree and edited: git shows no change, and `git am` would stop on it; apply names
    the file and the flag before touching anything, the edit kept."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "checkout")
    git(co, "update-index", "--skip-worktree", "python/sglang/model.py")
    write(co, "python/sglang/model.py", (co / "python/sglang/model.py").read_text().replace("line 20\n", "mine\n"))
    before = snapshot(co)
    line = one_error(cli("--patches", str(ov.patches), "apply", "--checkout", str(co)))
    assert line.startswith(f"python/sglang/model.py in {co} is edited but marked --skip-worktree"), line
    assert snapshot(co) == before
