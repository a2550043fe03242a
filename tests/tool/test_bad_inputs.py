"""Every bad input: one-line cause + next step, non-zero exit, and the tree byte-identical."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sgl_overlay.engine.states import ScratchIndex
from sgl_overlay.errors import OverlayError
from synth import (
    HOLD,
    MODEL_PY,
    cli,
    clone,
    edit_line,
    git,
    make_overlay,
    make_upstream,
    make_wheel,
    snapshot,
    spawn,
    wait_for,
    write,
)


@dataclass(frozen=True)
class BadInput:
    """A command that must fail: its arguments, the paths it must leave byte-identical, the
    pattern its one error line matches, and its exit code."""

    args: list[str]
    watched: list[Path]
    message: str
    exit_code: int = 1


def _checkout(tmp: Path, ov) -> Path:
    return clone(ov.upstream, tmp / "checkout")


def _commit_conflicting_change(co: Path) -> None:
    """A local commit on the line patch 0002 changes: it conflicts even under -3."""
    write(
        co,
        "python/sglang/hook.py",
        edit_line((co / "python/sglang/hook.py").read_text(), "hook 5\n", "hook 5 theirs\n"),
    )
    git(co, "commit", "-qam", "conflicting local change")


def case_sha256_mismatch(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    cache = tmp / "cache"
    cache.mkdir()
    make_wheel(cache / "sglang-1.0-py3-none-any.whl", {"sglang/model.py": MODEL_PY})
    trees = tmp / "trees"
    return BadInput(
        args=["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(trees), "fetch", "--offline"],
        watched=[trees, cache],
        message=r"sha256 mismatch for sglang-1\.0-py3-none-any\.whl: expected 0{64}, found [0-9a-f]{64}; delete .* and run `sgl-overlay fetch` again",
    )


def case_preimage_mismatch_strict(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    write(co, "python/sglang/model.py", edit_line(MODEL_PY, "line 1\n", "line 1 local\n"))
    git(co, "commit", "-qam", "local change")
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--strict", "--checkout", str(co)],
        watched=[co],
        message=r"pre-image differs: python/sglang/model\.py: expected blob [0-9a-f]{40}, found [0-9a-f]{40} \(--strict\); use the pinned upstream version or drop --strict",
    )


def case_missing_file(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    git(co, "rm", "-q", "python/sglang/hook.py")
    git(co, "commit", "-qm", "drop hook")
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(co)],
        watched=[co],
        message=r"0002-hook-fix-line-5-and-model-line-30\.patch: missing file python/sglang/hook\.py in .*; this checkout is not a version the sglang patches support",
    )


def case_missing_patch_file(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    ov.series[1].unlink()
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(co)],
        watched=[co],
        message=r"missing patch file .*0002-hook-fix-line-5-and-model-line-30\.patch; restore it with `git checkout -- ",
    )


def case_dirty_checkout(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    write(co, "python/sglang/hook.py", "my uncommitted work\n")
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(co)],
        watched=[co],
        message=r"has uncommitted changes in 1 file\(s\) \(first: python/sglang/hook\.py\); commit or stash them, then try again",
    )


def case_half_applied_am(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    _commit_conflicting_change(co)
    git(co, "am", "-q", str(ov.series[0]), str(ov.series[1]), check=False)  # stops on the second
    assert (co / ".git" / "rebase-apply").exists()
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(co)],
        watched=[co],
        message=r"has a `git am` in progress \(half-applied series\?\); finish it or run `git am --abort` there",
    )


def case_half_applied_series(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    assert cli("--patches", str(ov.patches), "apply", "--checkout", str(co)).returncode == 0
    git(co, "reset", "-q", "--hard", "HEAD~1")  # the tool's first commit stays
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(co)],
        watched=[co],
        message=r"half-applied series: 1 of 2 sglang patches are applied in .*; run `sgl-overlay revert` there, then apply again",
    )


def case_not_git(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    plain = tmp / "plain"
    write(plain, "python/sglang/model.py", MODEL_PY)
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(plain)],
        watched=[plain],
        message=r"not a git directory: .*plain; pass the root of a git checkout of sgl-project/sglang or kvcache-ai/sglang",
    )


def case_corrupt_patch(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    text = ov.series[1].read_text()
    ov.series[1].write_text(text.replace("@@ -", "@@ garbage -", 1))
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(co)],
        watched=[co],
        message=r"corrupt patch file .*0002-hook-fix-line-5-and-model-line-30\.patch \(.*\); restore it with `git checkout -- ",
    )


def case_unknown_project(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    other = make_upstream(tmp / "other", name="vllm", files={"vllm/x.py": "x = 1\n"})
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(other)],
        watched=[other],
        message=r"unknown project in .*other: neither python/pyproject\.toml names sglang or sglang-kt nor sgl-kernel/ is there",
    )


def case_conflict_3way(tmp: Path) -> BadInput:
    ov = make_overlay(tmp)
    co = _checkout(tmp, ov)
    _commit_conflicting_change(co)
    return BadInput(
        args=["--patches", str(ov.patches), "apply", "--checkout", str(co)],
        watched=[co],
        message=r"0002-hook-fix-line-5-and-model-line-30\.patch conflicts in .*: patch failed: python/sglang/hook\.py:\d+; tree left unchanged",
    )


CASES: dict[str, Callable[[Path], BadInput]] = {
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
    case = CASES[name](tmp_path)
    before = [snapshot(p) for p in case.watched]
    proc = cli(*case.args)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == case.exit_code, (proc.stdout, proc.stderr)
    assert len(err) == 1 and err[0].startswith("sgl-overlay: error: "), proc.stderr
    assert re.search(case.message, err[0]), err[0]
    assert [snapshot(p) for p in case.watched] == before, "the tree changed"


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
    """SIGINT while `git am` runs, after the first of the two patches is committed ("during") or
    after the last one is ("after", before the tool returns): the tree is exactly as before."""
    ov = make_overlay(tmp_path)
    co = _checkout(tmp_path, ov)
    marker, count = tmp_path / "hook-ran", tmp_path / "hook-count"
    stop_at = 1 if when == "during" else 2
    hook = co / ".git" / "hooks" / "post-applypatch"  # runs after each patch is committed
    hook.write_text(
        f"#!/bin/sh\necho x >> {count}\nif [ $(wc -l < {count}) -eq {stop_at} ]; then\n{HOLD.format(marker=marker)}fi\n"
    )
    hook.chmod(0o755)
    before = snapshot(co)
    proc = spawn("--patches", str(ov.patches), "apply", "--checkout", str(co))
    wait_for(marker, proc)  # git am reached the hook
    os.kill(proc.pid, signal.SIGINT)
    Path(f"{marker}.release").touch()  # the hook lets git am go on: the tool has the signal by then
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err.strip().splitlines() == [
        f"sgl-overlay: error: interrupted: apply rolled back, {co} is as before (HEAD {before[0][:12]})"
    ], err
    assert not (co / ".git" / "rebase-apply").exists()
    assert snapshot(co) == before


def test_scratch_index_that_cannot_be_read_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing `git read-tree` (a bad base) raises the one-line error and removes its temp folder."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    co = _checkout(tmp_path, make_overlay(tmp_path))
    with pytest.raises(OverlayError) as raised:
        ScratchIndex(co, "deadbeef")
    assert re.fullmatch(
        r"git read-tree deadbeef in .* failed: fatal: Not a valid object name deadbeef", str(raised.value)
    )
    assert not list(temp.iterdir())


# What pip 26.3 prints when its temporary folder fills up mid-download (captured with TMPDIR on
# a 4 MB tmpfs): it blames the network.
PIP_FULL_TMPDIR_STDERR = """\
  WARNING: Connection interrupted while downloading.
error: incomplete-download

× Download failed after 6 attempts because not enough bytes were received (2.1 MB/39.1 MB)
╰─> URL: https://files.pythonhosted.org/packages/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl

note: This is an issue with network connectivity, not pip.
hint: Use --resume-retries to configure resume attempt limit.
"""


@pytest.mark.parametrize("free_mb", [100, 4096])
def test_download_failure_names_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free_mb: int) -> None:
    from sgl_overlay.builds import fetch
    from sgl_overlay.engine import subproc

    failed = subprocess.CompletedProcess(["pip"], 1, stdout="", stderr=PIP_FULL_TMPDIR_STDERR)
    monkeypatch.setattr(subproc, "run", lambda *args, **kwargs: failed)
    real_usage = fetch.shutil.disk_usage
    tmp = Path(tempfile.gettempdir())

    def usage(path):
        got = real_usage(path)
        return got._replace(free=free_mb * 1024 * 1024) if Path(path) == tmp else got

    monkeypatch.setattr(fetch.shutil, "disk_usage", usage)
    with pytest.raises(OverlayError) as err:
        fetch.download("sglang==0.5.23", "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", tmp_path)
    if free_mb < 512:
        assert str(err.value) == (
            f"pip could not download sglang==0.5.23: only {free_mb} MB free in {tmp}, and pip reports a full "
            "disk as a connectivity problem; free some space and run again"
        )
    else:
        # enough space: pip's own error line, not its guess about the network
        assert str(err.value) == (
            "pip could not download sglang==0.5.23: Download failed after 6 attempts because not enough bytes "
            "were received (2.1 MB/39.1 MB); "
            "check the network, or put the wheel into the cache folder by hand"
        )
