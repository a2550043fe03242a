"""The tool on a hostile machine: git environment variables, concurrent runs, kill -9, half-finished git
operations, hooks, a missing or broken git. Every case: one line, its exit code, the tree as before."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from synth import (
    HOLD,
    KERNEL,
    KERNEL_CU,
    KERNEL_TEST,
    KERNEL_TEST_PY,
    PARK,
    REPO_ROOT,
    TOOL,
    add_kernel_target,
    cli,
    clone,
    git,
    make_fork_checkout,
    make_fork_overlay,
    make_overlay,
    one_error,
    snapshot,
    spawn,
    wait_for,
    write,
)

LOCK = "sgl-overlay.lock"
JOURNAL = "sgl-overlay-journal.json"


def _setup(tmp: Path) -> tuple[list[str], Path]:
    ov = make_overlay(tmp)
    return ["--patches", str(ov.patches)], clone(ov.upstream, tmp / "checkout")


def _hook(co: Path, name: str, body: str) -> Path:
    hook = co / ".git" / "hooks" / name
    hook.write_text(f"#!/bin/sh\n{body}\n")
    hook.chmod(0o755)
    return hook


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _owned_temp(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("sgl-overlay-"))


# ----------------------------------------------------------------------------- kill -9, lock, journal


def test_sigkill_inside_git_am_is_rolled_back_by_abort(tmp_path: Path) -> None:
    """SIGKILL of the tool while git am holds the first patch committed: git dies with it, the next apply names
    the dead run and `apply --abort`; that restores the tree exactly, and a later run sweeps its temp folders."""
    base, co = _setup(tmp_path)
    temp = tmp_path / "temp"
    temp.mkdir()
    marker = tmp_path / "hook-ran"
    _hook(co, "post-applypatch", PARK.format(marker=marker))
    before = snapshot(co)
    proc = spawn(*base, "apply", "--checkout", str(co), env={"TMPDIR": str(temp)})
    wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    wait_for(Path(f"{marker}.done"))  # git am, killed with the tool, is gone
    assert (co / ".git" / JOURNAL).exists()
    line = one_error(cli(*base, "apply", "--checkout", str(co), env={"TMPDIR": str(temp)}))
    assert line == (
        f"a killed `sgl-overlay apply` (pid {proc.pid}) left {co} mid-change (journal {co / '.git' / JOURNAL}, "
        f"HEAD before {before[0][:12]}); roll it back with `sgl-overlay apply --abort --checkout {co}`"
    )
    assert _owned_temp(temp) == []  # swept by the run that refused
    status = cli(*base, "status", "--checkout", str(co))
    assert status.stdout.startswith(f"note: a killed `sgl-overlay apply` (pid {proc.pid})"), status.stdout
    (co / ".git" / "hooks" / "post-applypatch").unlink()
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0, abort.stderr
    assert abort.stdout.startswith(f"rolled back the killed `sgl-overlay apply` (pid {proc.pid}) in {co}: HEAD ")
    assert snapshot(co) == before
    assert not any((co / ".git" / n).exists() for n in (LOCK, JOURNAL, "rebase-apply"))
    assert "applied 2 patch(es)" in cli(*base, "apply", "--checkout", str(co)).stdout


@pytest.mark.parametrize("killed_after", [1, 2, 3])
def test_sigkill_across_two_targets_rolls_back_both(tmp_path: Path, killed_after: int) -> None:
    """An sgl-project checkout holds sglang (two patches) and sgl-kernel (one): SIGKILL after the 1st, 2nd or
    3rd commit of the one `apply`, then `apply --abort`: neither target is left applied."""
    ov = make_overlay(tmp_path)
    add_kernel_target(ov, tmp_path, "https://example.com/sglang")
    co = clone(ov.upstream, tmp_path / "checkout")
    write(co, KERNEL, KERNEL_CU)
    write(co, KERNEL_TEST, KERNEL_TEST_PY)
    git(co, "add", "-A")
    git(co, "commit", "-qm", "sgl-kernel/")
    base = ["--patches", str(ov.patches)]
    count, marker = tmp_path / "count", tmp_path / "hook-ran"
    _hook(
        co,
        "post-applypatch",
        f"echo x >> {count}\nif [ $(wc -l < {count}) -eq {killed_after} ]; then\n{PARK.format(marker=marker)}fi",
    )
    before = snapshot(co)
    proc = spawn(*base, "apply", "--checkout", str(co))
    wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    wait_for(Path(f"{marker}.done"))
    (co / ".git" / "hooks" / "post-applypatch").unlink()
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0 and abort.stdout.startswith("rolled back the killed"), (abort.stdout, abort.stderr)
    assert snapshot(co) == before
    out = cli(*base, "apply", "--checkout", str(co)).stdout
    assert out.startswith("applied 3 patch(es)"), out


@pytest.mark.parametrize("delay", [0.15, 0.4, 0.8, 1.5])
def test_sigkill_at_any_time_leaves_all_or_nothing(tmp_path: Path, delay: float) -> None:
    """SIGKILL after `delay` seconds: after `apply --abort` the tree is exactly as before or (the run had
    finished) fully applied, never in between, with no lock, journal, git operation or temp folder left."""
    base, co = _setup(tmp_path)
    temp = tmp_path / "temp"
    temp.mkdir()
    _hook(co, "post-applypatch", "sleep 0.3")  # widen the window in which git am runs
    before = snapshot(co)
    proc = spawn(*base, "apply", "--checkout", str(co), env={"TMPDIR": str(temp)})
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    time.sleep(0.3)
    abort = cli(*base, "apply", "--abort", "--checkout", str(co), env={"TMPDIR": str(temp)})
    assert abort.returncode == 0, abort.stderr
    assert not any((co / ".git" / n).exists() for n in (LOCK, JOURNAL, "rebase-apply"))
    assert _owned_temp(temp) == []
    subjects = git(co, "log", "--format=%s", f"{before[0]}..HEAD").splitlines()
    assert subjects in ([], ["hook: fix line 5 and model line 30", "model: fix line 10"]), subjects
    if not subjects:
        assert snapshot(co) == before
    assert git(co, "status", "--porcelain") == ""


def test_two_applies_at_once_one_wins(tmp_path: Path) -> None:
    """A second apply while the first runs exits 1 naming the first's pid; the first applies the series once."""
    base, co = _setup(tmp_path)
    marker = tmp_path / "hook-ran"
    _hook(co, "post-applypatch", HOLD.format(marker=marker))
    first = spawn(*base, "apply", "--checkout", str(co))
    wait_for(marker, first)
    line = one_error(cli(*base, "apply", "--checkout", str(co)))
    Path(f"{marker}.release").touch()
    assert line.startswith(f"{co} is being changed by `sgl-overlay apply` (pid {first.pid}) since "), line
    assert line.endswith(f"(lock {co / '.git' / LOCK}); wait for it to finish")
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and "applied 2 patch(es)" in out, (out, err)
    assert len(git(co, "log", "--format=%s", "origin/main..HEAD").splitlines()) == 2


def test_concurrent_applies_are_consistent(tmp_path: Path) -> None:
    """Two applies started together: each either applies, finds it applied, or names the lock; the
    series is in exactly once."""
    base, co = _setup(tmp_path)
    runs = [spawn(*base, "apply", "--checkout", str(co)) for _ in range(2)]
    results = [(r.wait(timeout=60), *r.communicate()) for r in runs]
    for code, out, err in results:
        assert (code, err) == (0, "") or (code == 1 and "is being changed by `sgl-overlay apply`" in err), (out, err)
    assert sum("applied 2 patch(es)" in out for _, out, _ in results) == 1, results
    assert len(git(co, "log", "--format=%s", "origin/main..HEAD").splitlines()) == 2
    assert git(co, "status", "--porcelain") == ""


@pytest.mark.parametrize("holder", ["dead", "reused"])
def test_stale_lock_is_named_and_removed_by_abort(tmp_path: Path, holder: str) -> None:
    """A lock whose pid no longer runs, or now runs another process (a reused pid: another start time, though
    its command line names sgl-overlay, as an sglang server's would), is stale."""
    base, co = _setup(tmp_path)
    other = subprocess.Popen(["sh", "-c", "sleep 60", "sgl-overlay"]) if holder == "reused" else None
    pid = other.pid if other else _dead_pid()
    lock = co / ".git" / LOCK
    lock.write_text(f'{{"pid": {pid}, "start": 1, "command": "apply", "started": 0}}')
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--checkout", str(co)))
    assert line == (
        f"stale lock {lock} of `sgl-overlay apply` (pid {pid}), which no longer runs; remove it with "
        f"`sgl-overlay apply --abort --checkout {co}`"
    )
    assert snapshot(co) == before
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert (
        abort.stdout.strip()
        == f"removed the stale lock {lock} of `sgl-overlay apply` (pid {pid}); nothing to roll back in {co}"
    )
    assert "applied 2 patch(es)" in cli(*base, "apply", "--checkout", str(co)).stdout
    if other:
        other.kill()
        other.wait()


def test_abort_keeps_commits_the_dead_run_did_not_make(tmp_path: Path) -> None:
    """A journal whose HEAD the user has committed on top of since: abort refuses and says how to keep them."""
    base, co = _setup(tmp_path)
    head = git(co, "rev-parse", "HEAD")
    run = {"version": 2, "pid": _dead_pid(), "start": None, "host": socket.gethostname(), "run": "0-0"}
    lists = dict.fromkeys(("subjects", "paths", "blobs"), [])
    (co / ".git" / JOURNAL).write_text(
        json.dumps({**run, "command": "apply", "started": 0, "head": head, "branch": "refs/heads/main", **lists})
    )
    write(co, "notes.txt", "mine\n")
    git(co, "add", "notes.txt")
    git(co, "commit", "-qm", "my own work")
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--abort", "--checkout", str(co)))
    assert "did not make (first: " in line and "my own work" in line and f"`rm {co / '.git' / JOURNAL}" in line, line
    assert snapshot(co) == before


def test_dead_run_temp_folders_are_swept(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    (temp / f"sgl-overlay-{_dead_pid()}-index-abc").mkdir(parents=True)
    (temp / f"sgl-overlay-{os.getpid()}-index-abc").mkdir()  # a live process's: kept
    (temp / "sgl-overlay-notours").mkdir()
    base, co = _setup(tmp_path)
    assert cli(*base, "status", "--checkout", str(co), env={"TMPDIR": str(temp)}).returncode == 0
    assert _owned_temp(temp) == sorted([f"sgl-overlay-{os.getpid()}-index-abc", "sgl-overlay-notours"])


# ----------------------------------------------------------------------------- git's environment


def test_git_dir_of_another_repo_is_left_alone(tmp_path: Path) -> None:
    """GIT_DIR / GIT_WORK_TREE / GIT_INDEX_FILE naming another repository: status reads the checkout it is
    given, and the other repository's index stays byte-identical; apply changes only the named checkout."""
    base, co = _setup(tmp_path)
    other = clone(co, tmp_path / "other")
    write(other, "python/sglang/model.py", "staged only\n")
    git(other, "add", "-A")
    index = (other / ".git" / "index").read_bytes()
    env = {"GIT_DIR": str(other / ".git"), "GIT_WORK_TREE": str(other), "GIT_INDEX_FILE": str(other / ".git/index")}
    plain = cli(*base, "status", "--checkout", str(co))
    hostile = cli(*base, "status", "--checkout", str(co), env=env)
    assert (hostile.returncode, hostile.stdout, hostile.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert (other / ".git" / "index").read_bytes() == index
    other_before = snapshot(other)
    assert "applied 2 patch(es)" in cli(*base, "apply", "--checkout", str(co), env=env).stdout
    assert snapshot(other) == other_before and (other / ".git" / "index").read_bytes() == index


def test_git_dir_of_the_checkout_itself_keeps_a_staged_change(tmp_path: Path) -> None:
    """GIT_DIR at the checkout's own .git while a change is staged, on a fork whose sgl-kernel patch is judged
    in scratch repositories (the narrowed-context check): status stages nothing, the user's index stays as is."""
    ov = make_fork_overlay(tmp_path)
    co = make_fork_checkout(ov, tmp_path / "fork")
    write(co, "notes.txt", "staged only\n")
    git(co, "add", "-A")
    index = (co / ".git" / "index").read_bytes()
    proc = cli("--patches", str(ov.patches), "status", "--checkout", str(co), env={"GIT_DIR": str(co / ".git")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("note: 1 file(s) have uncommitted changes"), proc.stdout
    assert (co / ".git" / "index").read_bytes() == index
    assert git(co, "diff", "--cached", "--name-only") == "notes.txt"


# ----------------------------------------------------------------------------- settings that would change history


def test_bisect_in_progress_is_refused(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    git(co, "bisect", "start")
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--checkout", str(co)))
    assert line.startswith(f"{co} has a bisect in progress") and "run `git bisect reset` there" in line, line
    assert snapshot(co) == before


def test_merge_in_progress_gets_merge_advice(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    git(co, "checkout", "-qb", "side")
    write(co, "python/sglang/hook.py", "side\n")
    git(co, "commit", "-qam", "side")
    git(co, "checkout", "-q", "main")
    write(co, "python/sglang/hook.py", "main\n")
    git(co, "commit", "-qam", "main")
    git(co, "merge", "side", check=False)
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--checkout", str(co)))
    assert line == f"{co} has a merge in progress; finish it or run `git merge --abort` there, then try again"
    assert snapshot(co) == before


def test_commit_msg_hook_is_not_bypassed(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    hook = _hook(co, "commit-msg", "exit 0")
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--checkout", str(co)))
    assert line.startswith(f"{co} has a commit-msg hook ({hook}) that `git am` does not run"), line
    assert f"`chmod -x {hook}`" in line
    assert snapshot(co) == before


def test_a_silently_failing_hook_is_named(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    hook = _hook(co, "pre-applypatch", "exit 1")
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--checkout", str(co)))
    assert f"the pre-applypatch hook ({hook}) refused it" in line and "tree left unchanged" in line, line
    assert snapshot(co) == before


def test_revert_without_identity_says_so(tmp_path: Path) -> None:
    """A revert that needs `git revert` (a commit on top) where git has no identity names that, not a conflict."""
    base, co = _setup(tmp_path)
    assert cli(*base, "apply", "--checkout", str(co)).returncode == 0
    write(co, "notes.txt", "later\n")
    git(co, "add", "notes.txt")
    git(co, "commit", "-qm", "later work")
    git(co, "config", "user.useConfigOnly", "true")
    before = snapshot(co)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "EMAIL": ""}
    line = one_error(cli(*base, "revert", "--checkout", str(co), env=env))
    assert "git has no identity for the revert commits; set it with `git config user.name NAME`" in line, line
    assert snapshot(co) == before


def test_untracked_file_where_a_patch_adds_one(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    write(co, "test/test_model.py", "my own test\n")
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--checkout", str(co)))
    assert line == (
        f"sglang/0001-model-fix-line-10.patch adds test/test_model.py, but an untracked file is there in {co}; "
        "move it away, then apply again (tree left unchanged)"
    )
    assert snapshot(co) == before


# ----------------------------------------------------------------------------- the machine itself


def test_git_missing_from_path(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    line = one_error(cli(*base, "status", "--checkout", str(co), env={"PATH": str(empty)}))
    assert line == "git is not on PATH (git --version); install it or add it to PATH"


def test_broken_git_first_on_path(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "git").write_text("#!/bin/sh\necho 'git: cannot load libgit' >&2\nexit 127\n")
    (fake / "git").chmod(0o755)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    line = one_error(cli(*base, "status", "--checkout", str(co), env=env))
    assert line == (
        f"{fake / 'git'} does not work as git (`git --version`: git: cannot load libgit); put a working git first on PATH"
    )


def test_manifest_not_utf8(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    manifest = Path(base[1]) / "manifest.toml"
    manifest.write_bytes(manifest.read_bytes() + b"# caf\xe9\n")
    line = one_error(cli(*base, "status", "--checkout", str(co)))
    assert line.startswith(f"{manifest} is not UTF-8 text (") and "restore it with `git checkout" in line, line


def test_doctor_python_that_does_not_exist(tmp_path: Path) -> None:
    base, _ = _setup(tmp_path)
    line = one_error(cli(*base, "doctor", "--python", "/nonexistent/python", "--no-live"))
    assert line.startswith("/nonexistent/python does not exist ("), line


def test_doctor_site_that_does_not_exist(tmp_path: Path) -> None:
    base, _ = _setup(tmp_path)
    line = one_error(cli(*base, "doctor", "--site", str(tmp_path / "nope"), "--no-live"), code=2)
    assert line.startswith(f"--site {tmp_path / 'nope'} is not a folder"), line


def test_global_options_after_the_command(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    proc = cli("status", *base, "--checkout", str(co))
    assert proc.returncode == 0 and "applicable" in proc.stdout, proc.stderr


def test_unknown_target_is_a_usage_error(tmp_path: Path) -> None:
    base, co = _setup(tmp_path)
    line = one_error(cli(*base, "status", "-t", "nope", "--checkout", str(co)), code=2)
    assert line.startswith("unknown target 'nope'; known targets: sglang"), line


# ----------------------------------------------------------------------------- newcomer friction


def test_missing_file_names_the_target_that_applies_alone(tmp_path: Path) -> None:
    """An sgl-project checkout without a file the sglang patches need, whose sgl-kernel patch applies: the
    error says that `-t sgl-kernel` applies there."""
    ov = make_overlay(tmp_path)
    add_kernel_target(ov, tmp_path, "https://example.com/sglang")
    co = clone(ov.upstream, tmp_path / "checkout")
    git(co, "rm", "-q", "python/sglang/hook.py")
    write(co, KERNEL, KERNEL_CU)
    write(co, KERNEL_TEST, KERNEL_TEST_PY)
    git(co, "add", "-A")
    git(co, "commit", "-qm", "no hook.py; sgl-kernel/")
    before = snapshot(co)
    line = one_error(cli("--patches", str(ov.patches), "apply", "--checkout", str(co)))
    assert "missing file python/sglang/hook.py" in line, line
    assert line.endswith(f"; `sgl-overlay apply -t sgl-kernel --checkout {co}` applies sgl-kernel alone"), line
    assert snapshot(co) == before


def test_fork_status_starts_with_the_states(tmp_path: Path) -> None:
    """On a fork whose files differ from the pins, status lists the states first and the warning after."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "checkout")
    write(co, "python/sglang/model.py", "line 0\n" + (co / "python/sglang/model.py").read_text())
    git(co, "commit", "-qam", "fork: a line on top")
    out = cli("--patches", str(ov.patches), "status", "--checkout", str(co)).stdout.splitlines()
    assert out[0] == f"sglang in {co}:", out
    assert out[-1].startswith("warning: sglang: pre-image differs: python/sglang/model.py"), out
    assert ".;" not in "\n".join(out) and "offset 1 line" in out[1], out


# Where the KeyboardInterrupt that Python's SIGINT handler raises lands, by a stand-in on PYTHONPATH that
# raises it there whatever the load's timing: inside cli's imports (a stand-in unidiff), or while Python's
# import machinery loads cli itself, before any line of it runs (a finder sitecustomize installs).
RAISE_WHILE_STARTING = {
    "unidiff": ("unidiff.py", "raise KeyboardInterrupt\n"),
    "cli": (
        "sitecustomize.py",
        "import sys\n\n\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'sgl_overlay.cli':\n"
        "            raise KeyboardInterrupt\n\n\n"
        "sys.meta_path.insert(0, Interrupt())\n",
    ),
}


def _console_script() -> list[str]:
    """`sgl-overlay` as the script pip generates runs it: the entry point python/pyproject.toml names."""
    pyproject = REPO_ROOT / "python" / "pyproject.toml"
    module, func = tomllib.loads(pyproject.read_text())["project"]["scripts"]["sgl-overlay"].split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())"]


@pytest.mark.parametrize("where", sorted(RAISE_WHILE_STARTING))
@pytest.mark.parametrize("way_in", ["python -m", "console script"])
def test_ctrl_c_while_starting_is_one_line(tmp_path: Path, where: str, way_in: str) -> None:
    """Ctrl-C while the tool's modules load: one line, exit 130, no traceback."""
    stand_in = tmp_path / "stand-in"
    stand_in.mkdir()
    name, text = RAISE_WHILE_STARTING[where]
    (stand_in / name).write_text(text)
    path = os.pathsep.join([str(stand_in), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    argv = TOOL if way_in == "python -m" else _console_script()
    proc = subprocess.run([*argv, "--version"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "sgl-overlay: interrupted while starting; nothing was changed"


def test_output_to_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    """`sgl-overlay status | head -1`: the reader going away is no error line (exit 141, as a shell reports it)."""
    base, co = _setup(tmp_path)
    proc = spawn(*base, "status", "--checkout", str(co))
    proc.stdout.close()  # before the tool writes: its first write meets a closed pipe
    err = proc.stderr.read()
    assert (proc.wait(timeout=60), err) == (141, "")
