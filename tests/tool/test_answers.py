"""The answer names what is there: a read-only checkout (status still right, including a 3-way merge and uncommitted
files), a bare repository, an unborn branch, a sparse checkout, a dirty checkout `wheels --checkout` would build,
a file a user edited in an installed package (doctor), and the pre-commit hook `git am` bypasses."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from synth import (
    MODEL_PY,
    cli,
    clone,
    edit_line,
    git,
    kill_inside_am,
    make_overlay,
    one_error,
    pin_wheel,
    snapshot,
    write,
)


@contextlib.contextmanager
def _read_only(co: Path, where: Path) -> Iterator[Path]:
    """`co` seen through a read-only bind mount at `where` (root only; skips where the machine does not allow it)."""
    where.mkdir(parents=True)
    proc = subprocess.run(["mount", "--bind", "-o", "ro", str(co), str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here ({proc.stderr.strip() or 'not root'})")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(where)], check=False)
        if os.access(where / ".git" / "objects", os.W_OK):
            pytest.skip("the bind mount is writable here: no read-only case to test")
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _needs_three_way(tmp: Path) -> tuple[list[str], Path]:
    """A checkout where upstream changed line 7 since the pins: the first patch (line 10) applies only 3-way."""
    ov = make_overlay(tmp)
    co = clone(ov.upstream, tmp / "checkout")
    write(co, "python/sglang/model.py", edit_line(MODEL_PY, "line 7\n", "line 7 upstream\n"))
    git(co, "commit", "-qam", "upstream: line 7")
    return ["--patches", str(ov.patches)], co


@pytest.mark.parametrize("uncommitted", [False, True])
def test_status_on_a_read_only_checkout_is_right_and_says_read_only(tmp_path: Path, uncommitted: bool) -> None:
    """The 3-way merge status needs writes git objects: on a read-only checkout they go to a private store, so the
    states are those of a writable copy (not "conflicting"), with a note that it is read-only; check says
    apply would fail there because it is read-only."""
    base, co = _needs_three_way(tmp_path)
    if uncommitted:
        write(co, "notes.txt", "x\n")
        git(co, "add", "notes.txt")
        write(co, "python/sglang/hook.py", (co / "python/sglang/hook.py").read_text() + "# mine\n")
    writable = cli(*base, "status", "--checkout", str(co)).stdout.splitlines()
    assert "applicable (3-way)" in "\n".join(writable), writable
    with _read_only(co, tmp_path / "ro") as view:
        before = snapshot(view)
        status = cli(*base, "status", "--checkout", str(view))
        lines = status.stdout.replace(str(view), str(co)).splitlines()
        assert lines[0].startswith(f"note: {co} is read-only: the states below are read all the same"), lines
        assert lines[1:] == writable, (lines, writable)
        check = cli(*base, "check", "--checkout", str(view))
        assert check.returncode == 1, check
        assert check.stdout.startswith(f"would fail: {view} is read-only (git cannot write its objects)"), check
        assert snapshot(view) == before


def test_abort_on_a_read_only_checkout_says_it_is_read_only(tmp_path: Path) -> None:
    """An apply killed mid `git am`, the checkout then seen read-only: `--abort` says so in one line, naming the
    killed run and the step that rolls it back once it is writable (not a file of git's it could not remove),
    and changes nothing; that step then rolls the run back."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    head = git(co, "rev-parse", "HEAD")
    kill_inside_am(tmp_path, co, base, "post-applypatch", 1)
    with _read_only(co, tmp_path / "ro") as view:
        before = snapshot(view)
        line = one_error(cli(*base, "apply", "--abort", "--checkout", str(view)))
        assert line.startswith(f"{view} is read-only: `--abort` cannot roll back the killed `sgl-overlay apply`"), line
        assert line.endswith(f"then run `sgl-overlay apply --abort --checkout {view}` again"), line
        assert snapshot(view) == before
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0 and git(co, "rev-parse", "HEAD") == head, abort


def test_a_bare_repository_is_named(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(ov.upstream), str(bare))
    line = one_error(cli("--patches", str(ov.patches), "status", "--checkout", str(bare)))
    assert line == (
        f"{bare} is a bare repository (no working tree to patch); pass a checkout of it: `git clone {bare} DIR`, "
        "then `--checkout DIR`"
    )


def test_an_unborn_branch_is_named(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    co = tmp_path / "new"
    co.mkdir()
    git(co, "init", "-q", "-b", "work")
    write(co, "python/pyproject.toml", '[project]\nname = "sglang"\n')
    for command in ("status", "apply", "revert"):
        line = one_error(cli("--patches", str(ov.patches), command, "--checkout", str(co)))
        assert line.startswith(f"{co} has no commit yet (branch work is unborn); "), line
        assert "git <command>" not in line


def test_a_sparse_checkout_without_the_project_files_is_named(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "sparse")
    git(co, "sparse-checkout", "set", "docs")
    line = one_error(cli("--patches", str(ov.patches), "status", "--checkout", str(co)))
    assert line.startswith(f"{co} is a sparse checkout that leaves out the files naming its project"), line
    assert "`git sparse-checkout add python sgl-kernel`" in line, line


def test_wheels_checkout_refuses_uncommitted_changes(tmp_path: Path) -> None:
    """The series is in, then a tracked file is edited: `wheels --checkout` refuses (pip would build the edit),
    naming the file; nothing is built."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "co")
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    write(co, "python/sglang/hook.py", "edited\n")
    out = tmp_path / "dist"
    line = one_error(cli(*base, "wheels", "--checkout", str(co), "--out", str(out)))
    assert line.startswith(f"{co} has uncommitted changes in 1 file(s) (first: python/sglang/hook.py): "), line
    assert "`wheels --checkout` would build them" in line and "(nothing was built)" in line, line
    assert not out.exists() or not list(out.iterdir())


def test_doctor_says_modified_and_what_differs(tmp_path: Path) -> None:
    """A patched install whose hook.py the user edited: doctor says MODIFIED for that patch, naming the file and its
    blob beside the stock and patched ones, not MISSING."""
    ov = make_overlay(tmp_path)
    cache = tmp_path / "cache"
    pin_wheel(ov, cache)
    base = ["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(tmp_path / "trees")]
    for step in (["fetch", "--offline"], ["apply"], ["wheels", "--out", str(tmp_path / "dist")]):
        assert cli(*base, *step).returncode == 0
    (built,) = (tmp_path / "dist").glob("*.whl")
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", "--target"]
    subprocess.run([*pip, str(site), str(built)], check=True)
    (site / "sglang/hook.py").write_text("my rebuild\n")
    proc = cli(*base, "doctor", "--no-live", "--site", str(site), "--dist", str(tmp_path / "dist"))
    assert proc.returncode == 1, proc
    rows = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip().startswith("[")]
    assert rows[0].startswith("[ok] sglang: model: fix line 10"), rows
    assert rows[1].startswith(f"[MODIFIED] sglang: hook: fix line 5 and model line 30 (2 file(s)): {site}"), rows
    assert "hook.py is blob " in rows[1] and "neither the stock file (blob " in rows[1], rows
    assert rows[1].endswith("): edited or rebuilt there"), rows


def test_apply_says_the_pre_commit_hook_was_bypassed(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "co")
    hook = co / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    proc = cli(*base, "apply", "--checkout", str(co))
    assert proc.returncode == 0, proc
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("applied 2 patch(es)"), lines
    assert lines[1].startswith(f"note: `git am` does not run the pre-commit hook ({hook}): these 2 commit(s)"), lines
    assert "`pre-commit run --from-ref " in lines[1], lines
