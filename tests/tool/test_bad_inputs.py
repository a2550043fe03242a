"""Every bad input: one-line cause + next step, non-zero exit, and the tree byte-identical."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from synth import MODEL_PY, cli, clone, edit_line, git, make_overlay, make_upstream, make_wheel, snapshot, write


def _checkout(tmp: Path, ov) -> Path:
    return clone(ov.upstream, tmp / "checkout")


def _commit_conflicting_change(co: Path) -> None:
    """A local commit on the line patch 0002 changes: it conflicts even under -3."""
    write(co, "python/sglang/hook.py", edit_line((co / "python/sglang/hook.py").read_text(), "hook 5\n", "hook 5 theirs\n"))
    git(co, "commit", "-qam", "conflicting local change")


def case_sha256_mismatch(tmp: Path):
    ov = make_overlay(tmp)
    cache = tmp / "cache"
    cache.mkdir()
    make_wheel(cache / "sglang-1.0-py3-none-any.whl", {"sglang/model.py": MODEL_PY})
    trees = tmp / "trees"
    return (["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(trees), "fetch", "--offline"],
            [trees, cache], 1, r"sha256 mismatch for sglang-1\.0-py3-none-any\.whl: expected 0{64}, found [0-9a-f]{64}; delete .* and run `sgl-overlay fetch` again")


def case_preimage_mismatch_strict(tmp: Path):
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    write(co, "python/sglang/model.py", edit_line(MODEL_PY, "line 1\n", "line 1 local\n"))
    git(co, "commit", "-qam", "local change")
    return (["--patches", str(ov.patches), "apply", "--strict", "--checkout", str(co)], [co], 1,
            r"pre-image differs: python/sglang/model\.py: expected blob [0-9a-f]{40}, found [0-9a-f]{40} \(--strict\); use the pinned upstream version or drop --strict")


def case_missing_file(tmp: Path):
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    git(co, "rm", "-q", "python/sglang/hook.py")
    git(co, "commit", "-qm", "drop hook")
    return (["--patches", str(ov.patches), "apply", "--checkout", str(co)], [co], 1,
            r"0002-hook-fix-line-5-and-model-line-30\.patch: missing file python/sglang/hook\.py in .*; this checkout is not a version the sglang patches support")


def case_missing_patch_file(tmp: Path):
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    ov.series[1].unlink()
    return (["--patches", str(ov.patches), "apply", "--checkout", str(co)], [co], 1,
            r"missing patch file .*0002-hook-fix-line-5-and-model-line-30\.patch; restore it with `git checkout -- ")


def case_dirty_checkout(tmp: Path):
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    write(co, "python/sglang/hook.py", "my uncommitted work\n")
    return (["--patches", str(ov.patches), "apply", "--checkout", str(co)], [co], 1,
            r"has uncommitted changes in 1 file\(s\) \(first: python/sglang/hook\.py\); commit or stash them, then try again")


def case_half_applied_am(tmp: Path):
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    _commit_conflicting_change(co)
    git(co, "am", "-q", str(ov.series[0]), str(ov.series[1]), check=False)  # stops on the second
    assert (co / ".git" / "rebase-apply").exists()
    return (["--patches", str(ov.patches), "apply", "--checkout", str(co)], [co], 1,
            r"has a `git am` or rebase in progress \(half-applied series\?\); finish it or run `git am --abort`")


def case_half_applied_series(tmp: Path):
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    git(co, "am", "-q", str(ov.series[0]))
    return (["--patches", str(ov.patches), "apply", "--checkout", str(co)], [co], 1,
            r"half-applied series: 1 of 2 sglang patches are applied in .*; run `sgl-overlay revert` there, then apply again")


def case_not_git(tmp: Path):
    ov = make_overlay(tmp)
    plain = tmp / "plain"
    write(plain, "python/sglang/model.py", MODEL_PY)
    return (["--patches", str(ov.patches), "apply", "--checkout", str(plain)], [plain], 1,
            r"not a git directory: .*plain; pass the root of a git checkout of sgl-project/sglang or kvcache-ai/sglang")


def case_corrupt_patch(tmp: Path):
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    text = ov.series[1].read_text()
    ov.series[1].write_text(text.replace("@@ -", "@@ garbage -", 1))
    return (["--patches", str(ov.patches), "apply", "--checkout", str(co)], [co], 1,
            r"corrupt patch file .*0002-hook-fix-line-5-and-model-line-30\.patch \(.*\); restore it with `git checkout -- ")


def case_unknown_project(tmp: Path):
    ov = make_overlay(tmp)
    other = make_upstream(tmp / "other", name="vllm", files={"vllm/x.py": "x = 1\n"})
    return (["--patches", str(ov.patches), "apply", "--checkout", str(other)], [other], 1,
            r"unknown project in .*other: neither python/pyproject\.toml names sglang or sglang-kt nor sgl-kernel/ is there")


def case_conflict_3way(tmp: Path):
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    _commit_conflicting_change(co)
    return (["--patches", str(ov.patches), "apply", "--checkout", str(co)], [co], 1,
            r"0002-hook-fix-line-5-and-model-line-30\.patch conflicts in .*: patch failed: python/sglang/hook\.py:\d+; tree left unchanged")


CASES = {
    "wheel sha256 mismatch": case_sha256_mismatch,
    "pre-image blob mismatch under --strict": case_preimage_mismatch_strict,
    "missing file": case_missing_file,
    "missing patch file": case_missing_patch_file,
    "dirty checkout": case_dirty_checkout,
    "half-applied series (git am stopped)": case_half_applied_am,
    "half-applied series (1 of 2 committed)": case_half_applied_series,
    "not a git directory": case_not_git,
    "corrupt patch file": case_corrupt_patch,
    "checkout of an unknown project": case_unknown_project,
    "patch conflicts under -3": case_conflict_3way,
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name: str, tmp_path: Path) -> None:
    args, watched, code, pattern = CASES[name](tmp_path)
    before = [snapshot(p) for p in watched]
    proc = cli(*args)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert len(err) == 1 and err[0].startswith("sgl-overlay: error: "), proc.stderr
    assert re.search(pattern, err[0]), err[0]
    assert [snapshot(p) for p in watched] == before, "the tree changed"


def test_already_applied_changes_nothing(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    co = _checkout(tmp_path, ov)
    first = cli("--patches", str(ov.patches), "apply", "--checkout", str(co))
    assert first.returncode == 0, first.stderr
    before = snapshot(co)
    second = cli("--patches", str(ov.patches), "apply", "--checkout", str(co))
    assert second.returncode == 0, second.stderr
    assert "already applied: 2 patch(es)" in second.stdout
    assert snapshot(co) == before


def test_check_refuses_what_apply_refuses(tmp_path: Path) -> None:
    """`check` is apply's dry run: a dirty checkout fails it too, and nothing changes."""
    ov = make_overlay(tmp_path)
    co = _checkout(tmp_path, ov)
    write(co, "python/sglang/hook.py", "my uncommitted work\n")
    before = snapshot(co)
    proc = cli("--patches", str(ov.patches), "check", "--checkout", str(co))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "would fail: " in proc.stdout and "has uncommitted changes in 1 file(s)" in proc.stdout, proc.stdout
    assert snapshot(co) == before


def test_usage_error_exits_2(tmp_path: Path) -> None:
    proc = cli("apply", "--no-such-flag")
    assert proc.returncode == 2
    assert "unrecognized arguments: --no-such-flag; see `sgl-overlay --help`" in proc.stderr


@pytest.mark.parametrize("when", ["during", "after"])
def test_ctrl_c_rolls_back(tmp_path: Path, when: str) -> None:
    """SIGINT while `git am` runs (held in a hook) leaves the tree exactly as before."""
    ov = make_overlay(tmp_path)
    co = _checkout(tmp_path, ov)
    marker = tmp_path / "hook-ran"
    hook = co / ".git" / "hooks" / "post-applypatch"
    # The hook runs after the first patch is committed: the series is half-way through.
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nsleep {'3' if when == 'during' else '0'}\n")
    hook.chmod(0o755)
    before = snapshot(co)
    proc = subprocess.Popen([sys.executable, "-m", "sgl_overlay", "--patches", str(ov.patches), "apply",
                             "--checkout", str(co)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "git am never reached the hook"
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert not (co / ".git" / "rebase-apply").exists()
    whole = git(co, "rev-list", "--count", "HEAD") == "3" and not git(co, "status", "--porcelain")
    if when == "during":
        assert proc.returncode == 130, (out, err)
        assert "interrupted: apply rolled back" in err
    # Never in between: exactly as before, or the whole series applied.
    assert snapshot(co) == before or whole
