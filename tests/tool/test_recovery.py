"""Recovery never destroys a user's work: `apply --abort` after a real SIGKILL rolls back only what the killed
run did (and refuses, changing nothing, when the user edited, staged or switched branches since), removes
the git lock files the killed git left, and tells a reused pid from the run; Ctrl-C and SIGTERM at any moment
of an apply either roll it back (exit 130) or, once it completed, leave it standing with a line saying so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from synth import (
    HOLD,
    KERNEL,
    KERNEL_CU,
    KT_URL,
    PARK,
    TOOL,
    add_kernel_target,
    cli,
    clone,
    git,
    hook,
    kill_inside_am,
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


# Where the kill lands: the first patch in the index but not committed (pre-applypatch), the first patch
# committed, both patches committed (the journal not yet removed).
POINTS = [("pre-applypatch", 1), ("post-applypatch", 1), ("post-applypatch", 2)]


@pytest.mark.parametrize("am_abort_first", [False, True])
@pytest.mark.parametrize(("hook", "nth"), POINTS)
def test_abort_keeps_edits_and_staged_files_made_after_the_kill(
    tmp_path: Path, hook: str, nth: int, am_abort_first: bool
) -> None:
    """SIGKILL inside git am, then the user edits a tracked file and stages a new one (after `git am --abort`
    or not): `--abort` rolls back the run's commits and files only; the edit and the staged file stay."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    head = git(co, "rev-parse", "HEAD")
    pristine = {p: (co / p).read_text() for p in ("python/sglang/model.py", "python/sglang/hook.py")}
    kill_inside_am(tmp_path, co, base, hook, nth)
    if am_abort_first and (co / ".git" / "rebase-apply").exists():
        git(co, "am", "--abort")
    mine = (co / "python/pyproject.toml").read_text() + "# my edit\n"
    write(co, "python/pyproject.toml", mine)
    write(co, "notes.txt", "my staged file\n")
    git(co, "add", "notes.txt")
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0 and abort.stdout.startswith("rolled back the killed"), abort
    assert git(co, "rev-parse", "HEAD") == head and git(co, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert (co / "python/pyproject.toml").read_text() == mine
    assert (co / "notes.txt").read_text() == "my staged file\n"
    assert git(co, "diff", "--cached", "--name-only") == "notes.txt"
    assert git(co, "status", "--porcelain") == "A  notes.txt\n M python/pyproject.toml"
    assert {p: (co / p).read_text() for p in pristine} == pristine
    assert not (co / "test/test_model.py").exists()
    assert not any((co / ".git" / n).exists() for n in (LOCK, JOURNAL, "rebase-apply"))


@pytest.mark.parametrize(("hook", "nth"), POINTS)
def test_abort_refuses_over_an_edit_of_the_runs_own_file(tmp_path: Path, hook: str, nth: int) -> None:
    """SIGKILL, then the user edits a file the run wrote too: `--abort` refuses in one line naming it, changing
    nothing; the step it names (`git checkout HEAD -- FILE`, abort again) then rolls the run back."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    head = git(co, "rev-parse", "HEAD")
    kill_inside_am(tmp_path, co, base, hook, nth)
    write(co, "python/sglang/hook.py", "my edit\n")
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--abort", "--checkout", str(co)))
    assert line.startswith(f"{co}: python/sglang/hook.py changed since the killed `sgl-overlay apply`"), line
    assert "`git checkout HEAD -- python/sglang/hook.py` there and abort again" in line, line
    assert snapshot(co) == before
    git(co, "checkout", "HEAD", "--", "python/sglang/hook.py")
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0, abort
    assert git(co, "rev-parse", "HEAD") == head and git(co, "status", "--porcelain") == ""


@pytest.mark.parametrize(("hook", "nth"), POINTS)
def test_abort_refuses_after_a_branch_switch(tmp_path: Path, hook: str, nth: int) -> None:
    """SIGKILL, then `git checkout -b feature HEAD~1` (after ending git's am) and an edit: `--abort` refuses,
    naming both branches; neither branch, nor the edit, moves."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    write(co, "later.txt", "a later commit\n")
    git(co, "add", "later.txt")
    git(co, "commit", "-qm", "later")
    kill_inside_am(tmp_path, co, base, hook, nth)
    if (co / ".git" / "rebase-apply").exists():
        git(co, "am", "--abort")
    git(co, "checkout", "-qb", "feature", "origin/main")
    write(co, "python/sglang/model.py", "my edit\n")
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--abort", "--checkout", str(co)))
    assert line.startswith(f"{co} is on branch feature now, the killed `sgl-overlay apply`"), line
    assert "changed branch main" in line and "`git checkout main`" in line, line
    assert snapshot(co) == before


def _park_holding_ref_locks(
    tmp_path: Path, sigterm: str = "default", frozen: bool = False
) -> tuple[list[str], Path, str, Path, list[Path], subprocess.Popen]:
    """An apply whose git am is parked in its reference-transaction hook (`prepared`), holding HEAD.lock and the
    branch's lock; the hook writes git's pid to `<marker>.git`. `sigterm="ignored"` starts the tool with SIGTERM
    ignored, as a script's `trap '' TERM` does; `frozen` stops the tool (SIGSTOP) before its git takes those locks,
    so it never sees them. Returns base, co, HEAD before, the marker, the held locks and the tool."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    head, gd = git(co, "rev-parse", "HEAD"), co / ".git"
    marker, before = tmp_path / "parked", tmp_path / "before"
    hook(
        co,
        "reference-transaction",
        f'if [ "$1" = prepared ] && [ -e .git/HEAD.lock ]; then\necho $PPID > {marker}.git\n'
        f"{PARK.format(marker=marker)}fi\n",
    )
    if frozen:
        hook(co, "pre-applypatch", HOLD.format(marker=before))
    if sigterm == "ignored":
        argv = ["sh", "-c", 'trap "" TERM; exec "$@"', "sh", *TOOL, *base, "apply", "--checkout", str(co)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    else:
        proc = spawn(*base, "apply", "--checkout", str(co))
    if frozen:
        wait_for(before, proc)
        os.kill(proc.pid, signal.SIGSTOP)
        Path(f"{before}.release").touch()
    wait_for(marker, proc)
    return base, co, head, marker, [gd / "HEAD.lock", gd / "refs/heads/main.lock"], proc


@pytest.mark.parametrize("sigterm", ["default", "ignored"])
def test_a_killed_tool_s_git_removes_its_lock_files(tmp_path: Path, sigterm: str) -> None:
    """The tool is killed while its git holds HEAD.lock and the branch's lock: git gets SIGTERM as the tool dies
    (with SIGTERM's default action, also where the tool was started with it ignored) and removes them, as on
    Ctrl-C; `--abort` finds no lock of git's and rolls back."""
    base, co, head, marker, held, proc = _park_holding_ref_locks(tmp_path, sigterm)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    wait_for(Path(f"{marker}.done"))  # git, ended with the tool, is gone
    (co / ".git/hooks/reference-transaction").unlink()
    assert not [p for p in held if p.exists()]
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0, abort.stderr
    assert "lock file" not in abort.stdout, abort.stdout
    assert git(co, "rev-parse", "HEAD") == head and git(co, "status", "--porcelain") == ""
    assert cli(*base, "apply", "--checkout", str(co)).stdout.startswith("applied 2 patch(es)")


def test_abort_removes_the_lock_files_of_a_git_killed_with_the_tool(tmp_path: Path) -> None:
    """The tool and its git are both SIGKILLed (a container's stop, a CI job's timeout, the OOM killer) while git
    holds HEAD.lock and the branch's lock, taken while the tool was not looking: no process holds them, so they are
    stale, as git calls a lock whose git is gone. `--abort` removes them, says which, and rolls back."""
    base, co, head, marker, held, proc = _park_holding_ref_locks(tmp_path, frozen=True)
    gd = co / ".git"
    os.kill(int(Path(f"{marker}.git").read_text()), signal.SIGKILL)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    wait_for(Path(f"{marker}.done"))
    for name in ("reference-transaction", "pre-applypatch"):
        (gd / "hooks" / name).unlink()
    assert all(p.exists() for p in held)
    abort = cli(*base, "apply", "--abort", "--checkout", str(co))
    assert abort.returncode == 0, abort.stderr
    assert "removed what it left: git's stale lock file(s) HEAD.lock, main.lock" in abort.stdout, abort.stdout
    assert not [p for p in gd.rglob("*.lock")], list(gd.rglob("*.lock"))
    assert git(co, "rev-parse", "HEAD") == head and git(co, "status", "--porcelain") == ""
    assert cli(*base, "apply", "--checkout", str(co)).stdout.startswith("applied 2 patch(es)")


def test_a_reused_pid_is_a_dead_run(tmp_path: Path) -> None:
    """A journal whose pid now names another live process (another start time; its command line says
    sgl-overlay): the run is dead, `--abort` rolls it back; the live process is left alone."""
    ov = make_overlay(tmp_path)
    base, co = ["--patches", str(ov.patches)], clone(ov.upstream, tmp_path / "checkout")
    head = git(co, "rev-parse", "HEAD")
    kill_inside_am(tmp_path, co, base, "post-applypatch", 2)
    stranger = subprocess.Popen(["sh", "-c", "sleep 60", "sgl-overlay apply"])
    journal = co / ".git" / JOURNAL
    text = journal.read_text()
    data = json.loads(text)
    data.update(pid=stranger.pid, start=1, run=f"{stranger.pid}-1")
    journal.write_text(json.dumps(data))
    (co / ".git" / LOCK).write_text(json.dumps({"pid": stranger.pid, "start": 1, "command": "apply", "started": 0}))
    try:
        status = cli(*base, "status", "--checkout", str(co))
        assert status.stdout.startswith(f"note: a killed `sgl-overlay apply` (pid {stranger.pid})"), status.stdout
        abort = cli(*base, "apply", "--abort", "--checkout", str(co))
        assert abort.returncode == 0 and abort.stdout.startswith("rolled back the killed"), abort
        assert git(co, "rev-parse", "HEAD") == head
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


# ----------------------------------------------------------------------------- Ctrl-C and SIGTERM

TRIALS = 20  # moments, SIGINT and SIGTERM in turn


def _signal_trial(co: Path, base: list[str], out: Path, head: str, delay: float, sig: int) -> str:
    """Start `apply -t sglang-kt -t sgl-kernel` (three patches, two `git am`s), freeze it with SIGSTOP after
    `delay`, send `sig` to the frozen run, let it go on, and name the outcome. Freezing first makes the check
    exact whatever moment it lands: a run that had exited got no signal; one that is frozen gets it, having
    printed its report (`out`) or not."""
    with out.open("w") as stdout:
        proc = spawn(*base, "apply", "-t", "sglang-kt", "-t", "sgl-kernel", "--checkout", str(co), stdout=stdout)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGSTOP)
    state = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WSTOPPED | os.WNOWAIT)
    sent = state.si_code == os.CLD_STOPPED
    reported = out.read_text()
    if sent:
        os.kill(proc.pid, sig)
        os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    made = git(co, "log", "--format=%s", f"{head}..HEAD").splitlines()
    applied = len(made) == 3 and made[0].startswith("sgl-kernel:")
    clean = git(co, "status", "--porcelain") == "" and not (co / ".git" / JOURNAL).exists()
    if not (applied or made == []) or not clean:
        return f"BAD: half-applied or left dirty ({len(made)} commits)"
    lines = err.strip().splitlines()
    code = proc.returncode
    if not sent:
        return "exited before the signal" if code == 0 and applied else f"BAD: exit {code} with no signal"
    if code == 130 or code == -signal.SIGINT:  # (-SIGINT: Python 3.11 ends so after a KeyboardInterrupt left an
        # import while starting, though the tool caught it and said so)
        if applied:
            return "BAD: 130 over an applied tree"
        if not lines:  # before Python set its own handler: the default action, nothing run
            return "ended by it while starting"
        if len(lines) > 1 and lines[-1] == "KeyboardInterrupt" and "sgl_overlay" not in err:
            return "ended while Python started (its own traceback)"  # before any of the tool's code ran
        return "rolled back, 130" if len(lines) == 1 else f"BAD: 130 with more than one line: {err}"
    if code == -sig:  # while starting, before the tool's handlers were set: the default action
        return "ended by it while starting" if not applied and not lines else f"BAD: killed by it, {lines}"
    if code != 0 or not applied:
        return f"BAD: exit {code}"
    if lines == [f"sgl-overlay: signal {sig} came after apply had completed; the change stands as reported above"]:
        return "complete, reported"
    if lines == [] and reported.startswith("applied 3 patch(es)"):
        return "complete, the signal came after its report"  # the run was ending: the one other true outcome
    return "BAD: SWALLOWED" if not lines or lines[-1].startswith("applied") else f"BAD: {lines[:1]}"


def test_ctrl_c_and_sigterm_at_any_moment_are_never_lost(tmp_path: Path) -> None:
    """SIGINT or SIGTERM at 20 moments spread over a fork's apply (and past its end): every one either rolls
    the tree back (exit 130, one line) or, landing once the change had completed, leaves it standing with
    exit 0 and a line saying so. None is swallowed (exit 0 with nothing said), none gives 130 over an applied
    tree. The outcomes go to the test's output."""
    ov = make_fork_overlay(tmp_path)
    co = make_fork_checkout(ov, tmp_path / "fork")
    base = ["--patches", str(ov.patches)]
    head = git(co, "rev-parse", "HEAD")
    spans = []  # how long one apply takes here (the faster of two): the moments cover it and a bit past
    for _ in range(2):
        git(co, "reset", "-q", "--hard", head)
        start = time.monotonic()
        assert cli(*base, "apply", "-t", "sglang-kt", "-t", "sgl-kernel", "--checkout", str(co)).returncode == 0
        spans.append(time.monotonic() - start)
    span = min(spans)
    outcomes: dict[str, int] = {}
    git(co, "reset", "-q", "--hard", head)
    for i in range(TRIALS):
        delay = span * 1.1 * i / (TRIALS - 1)
        sig = signal.SIGINT if i % 2 == 0 else signal.SIGTERM
        outcome = _signal_trial(co, base, tmp_path / "out.txt", head, delay, sig)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        print(f"{delay:.2f} s {signal.Signals(sig).name}: {outcome}")
        git(co, "reset", "-q", "--hard", head)
        for name in (LOCK, JOURNAL):
            (co / ".git" / name).unlink(missing_ok=True)
    print(outcomes)
    assert not [o for o in outcomes if o.startswith("BAD")], outcomes


# ----------------------------------------------------------------------------- one subject, two targets


def test_a_subject_another_target_shares_is_not_this_targets_commit(tmp_path: Path) -> None:
    """A KT-fork-shaped checkout with a port of the sgl-kernel patch to the fork's own copy applied (a target
    fork-kernel, same subject as upstream's): upstream's sgl-kernel patch is not `applied` there (no commit of its
    own), and `revert -t sgl-kernel` removes nothing; `revert -t fork-kernel` removes the port alone."""
    ov = make_fork_overlay(tmp_path)
    fork_kernel = "fork line\n" + KERNEL_CU
    add_kernel_target(ov, tmp_path, KT_URL, name="fork-kernel", kernel=fork_kernel)
    co = make_fork_checkout(ov, tmp_path / "fork", kernel=fork_kernel)
    base = ["--patches", str(ov.patches)]
    applied = cli(*base, "apply", "--checkout", str(co))
    assert applied.stdout.startswith("applied 3 patch(es)"), applied
    status = cli(*base, "status", "--checkout", str(co)).stdout
    kernel_rows = [ln for ln in status.splitlines() if "sgl-kernel/0001" in ln]
    assert kernel_rows and kernel_rows[0].strip().startswith("in (other commit)"), status
    assert "(by fork-kernel/0001-" in kernel_rows[0] and "already upstream" not in kernel_rows[0], status
    assert any(ln.strip().startswith("applied") and "fork-kernel/0001" in ln for ln in status.splitlines()), status
    before = snapshot(co)
    revert = cli(*base, "revert", "-t", "sgl-kernel", "--checkout", str(co))
    assert revert.returncode == 0 and revert.stdout.startswith("nothing to revert"), revert
    assert snapshot(co) == before
    revert = cli(*base, "revert", "-t", "fork-kernel", "--checkout", str(co))
    assert revert.returncode == 0 and revert.stdout.startswith("reverted 1"), revert
    subjects = git(co, "log", "--format=%s", "-3").splitlines()
    assert subjects[:2] == ["hook: fix line 5 and model line 30", "model: fix line 10"], subjects
    assert (co / KERNEL).read_text() == fork_kernel
