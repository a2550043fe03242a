"""User checkouts shaped like the real ones: a KT fork that also carries sgl-kernel/, the
moved kernel folder, a series reverted with `git revert`, a dirty tree, a squash-merge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from synth import (
    AOT,
    HOOK_PY,
    KERNEL,
    KERNEL_CU,
    KERNEL_TEST,
    KERNEL_TEST_FIXED,
    KERNEL_TEST_PY,
    KERNEL_TEST_UPSTREAM,
    MODEL_PY,
    add_kernel_target,
    cli,
    clone,
    edit_line,
    git,
    make_fork_checkout,
    make_fork_overlay,
    make_overlay,
    one_error,
    snapshot,
    write,
)

STATE = re.compile(r"^  (.+?)\s{2,}(\S+\.patch)", re.M)


def _run(*args: str) -> str:
    proc = cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _states(text: str) -> list[str]:
    return [state for state, _ in STATE.findall(text)]


def _kernel_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("sgl-kernel: ")]


# The fork's copy.cu, and what a plain `apply` must say about the sgl-kernel patch there.
FORK_KERNELS = {
    "applies": (KERNEL_CU, r"its patch applies here: add it with `sgl-overlay apply -t sgl-kernel --checkout "),
    # A change far from the patch's hunk: the full-context patch fails exactly, merges 3-way.
    "applies with 3-way": (
        edit_line(KERNEL_CU, "kernel 2\n", "kernel 2 fork\n"),
        r"its patch applies with a 3-way merge here: add it with `sgl-overlay apply -t sgl-kernel",
    ),
    # The line the patch changes is gone (the real fork's copy.cu lacks the N == 32 branch).
    # The hunk is named by the patch narrowed to one line of context: line 14 is where it starts.
    "conflicts": (
        edit_line(KERNEL_CU, "kernel 15\n", ""),
        r"; its patch conflicts here: sgl-kernel/csrc/elementwise/copy\.cu is blob [0-9a-f]{12}, the patch is "
        r"written for [0-9a-f]{12}; it needs a variant for this file \(`sgl-overlay status` names the hunk\)$",
    ),
}


@pytest.mark.parametrize("case", list(FORK_KERNELS))
def test_kt_fork_plain_apply_applies_kt_and_says_one_line_about_sgl_kernel(tmp_path: Path, case: str) -> None:
    kernel, said = FORK_KERNELS[case]
    ov = make_fork_overlay(tmp_path)
    co = make_fork_checkout(ov, tmp_path / "fork", kernel)
    base = ["--patches", str(ov.patches)]
    status = _run(*base, "status", "--checkout", str(co))  # exit 0: the optional target does not fail it
    assert "sgl-kernel in " in status and "(optional here: sgl-kernel/ here is kvcache-ai/sglang's own copy" in status
    if case == "conflicts":  # status names the hunk the plain apply's one line leaves out
        assert "(patch failed: sgl-kernel/csrc/elementwise/copy.cu:14)" in status, status

    out = _run(*base, "apply", "--checkout", str(co))
    assert re.search(r"^applied 2 patch\(es\) to ", out, re.M), out
    lines = _kernel_lines(out)
    assert len(lines) == 1 and re.search(said, lines[0]), out
    assert git(co, "log", "--format=%s", "-2").splitlines() == [
        "hook: fix line 5 and model line 30",
        "model: fix line 10",
    ]
    assert (co / KERNEL).read_text() == kernel  # the optional target is left alone

    # `-t sgl-kernel` keeps all-or-nothing: it applies where the line said so, else nothing changes.
    before = snapshot(co)
    proc = cli(*base, "apply", "-t", "sgl-kernel", "--checkout", str(co))
    if case == "conflicts":
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(err) == 1, proc.stderr
        assert re.search(
            r"sgl-kernel/0001-.*\.patch conflicts in .*: patch failed: sgl-kernel/csrc/elementwise/"
            r"copy\.cu:14; tree left unchanged",
            err[0],
        ), err[0]
        assert snapshot(co) == before
    else:
        assert proc.returncode == 0, proc.stderr
        assert "kernel 15 fixed" in (co / KERNEL).read_text() and (co / KERNEL_TEST).read_text() == KERNEL_TEST_FIXED
        assert _kernel_lines(_run(*base, "apply", "--checkout", str(co))) == [
            "sgl-kernel: applied here too (sgl-kernel/ here is kvcache-ai/sglang's own copy, not sgl-project/sglang's)"
        ]


def test_full_context_patch_merged_3way_counts_as_applied(tmp_path: Path) -> None:
    """The patch merged 3-way into upstream's later test file: merging it once more conflicts,
    so only the patch narrowed to one line of context can tell that it is in."""
    ov = make_fork_overlay(tmp_path)
    co = make_fork_checkout(ov, tmp_path / "fork", kernel_test=KERNEL_TEST_UPSTREAM)
    pat, on = ["--patches", str(ov.patches)], ["-t", "sgl-kernel", "--checkout", str(co)]
    first = _run(*pat, "status", *on)
    assert _states(first) == ["applicable (3-way)"]
    assert "(sgl-kernel/tests/test_copy.py: not the patch's pre-image, but only away from its changes)" in first
    assert "applied 1 patch(es)" in _run(*pat, "apply", *on)
    merged = (co / KERNEL_TEST).read_text()
    assert merged.startswith("import sys\n") and "MAX_N = 512" in merged and "sys.exit(" in merged
    assert _states(_run(*pat, "status", *on)) == ["applied"]
    assert "(reset)" in _run(*pat, "revert", *on)
    assert (co / KERNEL_TEST).read_text() == KERNEL_TEST_UPSTREAM


def test_a_patch_merged_3way_beside_an_upstream_line_counts_as_applied(tmp_path: Path) -> None:
    """Upstream changed a line within the first patch's context, which then goes in 3-way (and adds a test file):
    right after apply both patches read `applied`, not `applied (older)`; revert removes both."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    write(co, "python/sglang/model.py", edit_line(MODEL_PY, "line 7\n", "line 7 upstream\n"))
    git(co, "commit", "-qam", "upstream: line 7")
    base = ["--patches", str(ov.patches)]
    assert _states(_run(*base, "status", "--checkout", str(co))) == ["applicable (3-way)", "applicable"]
    assert "applied 2 patch(es)" in _run(*base, "apply", "--checkout", str(co))
    assert _states(_run(*base, "status", "--checkout", str(co))) == ["applied", "applied"]
    assert "(reset)" in _run(*base, "revert", "--checkout", str(co))
    assert (co / "python/sglang/model.py").read_text() == edit_line(MODEL_PY, "line 7\n", "line 7 upstream\n")


def test_kt_fork_before_the_package_rename_is_still_the_kt_fork(tmp_path: Path) -> None:
    """Older fork commits name the package `sglang`: the fork's own file decides."""
    ov = make_fork_overlay(tmp_path)
    co = make_fork_checkout(ov, tmp_path / "fork", name="sglang")
    out = _run("--patches", str(ov.patches), "status", "--checkout", str(co))
    assert re.findall(r"^(\S+) in ", out, re.M) == ["sglang-kt", "sgl-kernel"], out


def test_sgl_project_checkout_keeps_sgl_kernel_required(tmp_path: Path) -> None:
    """In sgl-project/sglang, sgl-kernel/ is the pinned upstream's: apply is all-or-nothing over both."""
    ov = make_overlay(tmp_path)
    add_kernel_target(ov, tmp_path, "https://example.com/sglang")
    co = clone(ov.upstream, tmp_path / "co")
    write(co, KERNEL, edit_line(KERNEL_CU, "kernel 15\n", ""))
    write(co, KERNEL_TEST, KERNEL_TEST_PY)
    git(co, "add", "-A")
    git(co, "commit", "-qm", "kernel without line 15")
    status = cli("--patches", str(ov.patches), "status", "--checkout", str(co))
    assert status.returncode == 1 and "sgl-kernel in " in status.stdout and "(optional" not in status.stdout
    before = snapshot(co)
    proc = cli("--patches", str(ov.patches), "apply", "--checkout", str(co))
    assert proc.returncode == 1 and re.fullmatch(
        r"sgl-overlay: error: sgl-kernel/0001-.*\.patch conflicts in .*; tree left unchanged \(see `sgl-overlay status`\)\n",
        proc.stderr,
    ), proc.stderr
    assert snapshot(co) == before


def _moved_checkout(tmp: Path, ov, kernel: str) -> Path:
    """sgl-project/sglang after sgl-kernel/ moved under python/sglang/kernels/aot/."""
    co = clone(ov.upstream, tmp / "moved")
    write(co, KERNEL, KERNEL_CU)
    write(co, KERNEL_TEST, KERNEL_TEST_PY)
    git(co, "add", "-A")
    git(co, "commit", "-qm", "kernel")
    (co / AOT).parent.mkdir(parents=True, exist_ok=True)
    git(co, "mv", "sgl-kernel", AOT.rstrip("/"))
    git(co, "commit", "-qm", "[Kernel] Move sgl-kernel under sglang.kernels.aot")
    if kernel != KERNEL_CU:
        write(co, AOT + "csrc/elementwise/copy.cu", kernel)
        git(co, "commit", "-qam", "upstream rewrites copy.cu")
    return co


def test_moved_kernel_folder_same_blob_applies_with_paths_mapped(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    add_kernel_target(ov, tmp_path, "https://example.com/sglang")
    co = _moved_checkout(tmp_path, ov, KERNEL_CU)
    base = ["--patches", str(ov.patches)]
    out = _run(*base, "apply", "--checkout", str(co))
    assert _kernel_lines(out) == [
        "sgl-kernel: not applied (sgl-project/sglang moved sgl-kernel/ to python/sglang/kernels/aot/ (2026-07-29); "
        f"its patches map there); its patch applies here: add it with `sgl-overlay apply -t sgl-kernel --checkout {co}`"
    ]
    out = _run(*base, "apply", "-t", "sgl-kernel", "--checkout", str(co))
    assert "applied 1 patch(es)" in out
    assert "kernel 15 fixed" in (co / AOT / "csrc/elementwise/copy.cu").read_text()
    assert (co / AOT / "tests/test_copy.py").read_text() == KERNEL_TEST_FIXED
    assert not (co / "sgl-kernel").exists()
    assert _states(_run(*base, "status", "-t", "sgl-kernel", "--checkout", str(co))) == ["applied"]
    assert "(reset)" in _run(*base, "revert", "-t", "sgl-kernel", "--checkout", str(co))
    assert (co / AOT / "csrc/elementwise/copy.cu").read_text() == KERNEL_CU


def test_moved_kernel_folder_other_blob_names_the_variant_needed(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    add_kernel_target(ov, tmp_path, "https://example.com/sglang")
    co = _moved_checkout(tmp_path, ov, edit_line(KERNEL_CU, "kernel 15\n", "kernel 15 upstream's own fix\n"))
    out = _run("--patches", str(ov.patches), "apply", "--checkout", str(co))
    (line,) = _kernel_lines(out)
    assert re.search(
        r"conflicts here: python/sglang/kernels/aot/csrc/elementwise/copy\.cu is blob "
        r"[0-9a-f]{12}, the patch is written for [0-9a-f]{12}; it needs a variant for this file "
        r"\(`sgl-overlay status` names the hunk\)$",
        line,
    )


def test_revert_with_commits_on_top_then_apply_again(tmp_path: Path) -> None:
    """local commit, apply, local commit, revert (by `git revert`): the series is applicable
    again, apply works, a revert of a series not applied says so."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    base = ["--patches", str(ov.patches)]
    write(co, "NOTES", "one\n")
    git(co, "add", "NOTES")
    git(co, "commit", "-qm", "local one")
    _run(*base, "apply", "--checkout", str(co))
    write(co, "NOTES", "two\n")
    git(co, "commit", "-qam", "local two")
    assert "(git revert)" in _run(*base, "revert", "--checkout", str(co))
    assert (co / "python/sglang/model.py").read_text() == MODEL_PY and (
        co / "python/sglang/hook.py"
    ).read_text() == HOOK_PY

    assert _states(_run(*base, "status", "--checkout", str(co))) == ["applicable", "applicable"]
    before = snapshot(co)
    assert _run(*base, "revert", "--checkout", str(co)) == (
        f"nothing to revert: no overlay patch is applied in {co} (sglang: applicable, applicable)\n"
    )
    assert snapshot(co) == before
    assert "applied 2 patch(es)" in _run(*base, "apply", "--checkout", str(co))
    assert _states(_run(*base, "status", "--checkout", str(co))) == ["applied", "applied"]
    assert "(reset)" in _run(*base, "revert", "--checkout", str(co))
    assert git(co, "log", "-1", "--format=%s").startswith('Revert "')


def test_patches_editing_the_same_lines_read_as_applied_and_revert_as_a_series(tmp_path: Path) -> None:
    """The second patch changes the first one's context: once both are in, the first one's
    post-image is no longer in the files as such, and the series still reads as applied."""
    ov = make_overlay(tmp_path, second="line 11")
    co = clone(ov.upstream, tmp_path / "co")
    base = ["--patches", str(ov.patches)]
    assert "applied 2 patch(es)" in _run(*base, "apply", "--checkout", str(co))
    assert _states(_run(*base, "status", "--checkout", str(co))) == ["applied", "applied"]
    before = snapshot(co)
    assert "already applied" in _run(*base, "apply", "--checkout", str(co))
    assert snapshot(co) == before
    write(co, "NOTES", "local\n")
    git(co, "add", "NOTES")
    git(co, "commit", "-qm", "local")
    assert "(git revert)" in _run(*base, "revert", "--checkout", str(co))
    assert (co / "python/sglang/model.py").read_text() == MODEL_PY
    assert _states(_run(*base, "status", "--checkout", str(co))) == ["applicable", "applicable"]


def test_status_reads_uncommitted_working_files(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    base = ["--patches", str(ov.patches)]
    _run(*base, "apply", "--checkout", str(co))
    # Undo the second patch in the working files only: status must see it, not HEAD.
    write(co, "python/sglang/hook.py", HOOK_PY)
    write(co, "python/sglang/model.py", (co / "python/sglang/model.py").read_text().replace("line 30 fixed", "line 30"))
    before = snapshot(co)
    out = _run(*base, "status", "--checkout", str(co))
    assert out.splitlines()[0] == (
        "note: 2 file(s) have uncommitted changes (2 touched by the patches; first: python/sglang/hook.py): the "
        "states below read the working files, not HEAD; apply and revert refuse until they are committed or stashed"
    )
    assert _states(out) == ["applied", "applicable"]
    assert snapshot(co) == before  # the user's index and files as they were


def test_status_warning_names_the_working_blob(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    edited = edit_line(MODEL_PY, "line 1\n", "line 1 local\n")
    write(co, "python/sglang/model.py", edited)
    out = _run("--patches", str(ov.patches), "status", "--checkout", str(co))
    blob = git(co, "hash-object", "python/sglang/model.py")
    assert (
        f"python/sglang/model.py: expected blob {git(co, 'rev-parse', 'HEAD:python/sglang/model.py')}, found {blob}"
        in out
    )
    assert _states(out) == ["applicable", "applicable"]


def test_squash_merge_upstream_is_already_upstream_for_apply_too(tmp_path: Path) -> None:
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    for patch in ov.series:  # upstream merged the same diff as one commit under its own subject
        git(co, "apply", "--index", str(patch))
    git(co, "commit", "-qm", "Fix model and hook, squashed")
    base = ["--patches", str(ov.patches)]
    assert _states(_run(*base, "status", "--checkout", str(co))) == ["already upstream", "already upstream"]
    before = snapshot(co)
    assert _run(*base, "apply", "--checkout", str(co)) == (
        f"already upstream: 2 patch(es) in {co} (the files hold their change, not from overlay commits); "
        "nothing to do\n"
    )
    assert _run(*base, "revert", "--checkout", str(co)) == (
        f"nothing to revert: no overlay patch is applied in {co} (sglang: already upstream, already upstream)\n"
    )
    assert snapshot(co) == before


def _new_series(ov, tmp: Path, how: str) -> list[str]:
    """The maintainer's next version of the series, written over the old one: `content`, the first patch fixes
    line 10 otherwise (same file name); `renumbered`, a new first patch, the two old ones after it unchanged
    (0001, 0002 become 0002, 0003). Returns the new series' file names."""
    work = tmp / "work"
    first, second = git(work, "rev-list", "--reverse", "HEAD~2..HEAD").split()
    git(work, "reset", "-q", "--hard", "HEAD~2")
    if how == "content":
        write(work, "python/sglang/model.py", edit_line(MODEL_PY, "line 10\n", "line 10 fixed otherwise\n"))
        write(work, "test/test_model.py", "def test_fixed():\n    assert True\n")
        git(work, "add", "-A")
        git(work, "commit", "-qm", git(work, "log", "-1", "--format=%B", first))
        git(work, "cherry-pick", second)
    else:
        write(work, "python/sglang/hook.py", edit_line(HOOK_PY, "hook 15\n", "hook 15 fixed\n"))
        git(work, "commit", "-qam", "hook: fix line 15", "-m", "Origin: vendor")
        git(work, "cherry-pick", first, second)
    for old in ov.series:
        old.unlink()
    count = 2 if how == "content" else 3
    git(work, "format-patch", "-q", "--full-index", "-o", str(ov.patches / "sglang"), f"HEAD~{count}..HEAD")
    names = sorted(p.name for p in (ov.patches / "sglang").glob("*.patch"))
    manifest = ov.patches / "manifest.toml"
    listed = ", ".join(f'"{p.name}"' for p in ov.series)
    manifest.write_text(manifest.read_text().replace(listed, ", ".join(f'"{n}"' for n in names)))
    return names


@pytest.mark.parametrize("how", ["content", "renumbered"])
def test_an_earlier_version_of_the_series_is_named_with_revert_then_apply(tmp_path: Path, how: str) -> None:
    """The checkout has the series applied as it was; the series has changed since. status names each patch
    applied as an earlier version (not "conflicting" or "in (other commit)") and says to revert, then apply;
    apply refuses in that one line, changing nothing; those two steps then give the series as it is now."""
    ov = make_overlay(tmp_path)
    co = clone(ov.upstream, tmp_path / "co")
    base = ["--patches", str(ov.patches)]
    _run(*base, "apply", "--checkout", str(co))
    old = git(co, "rev-list", "--reverse", "HEAD~2..HEAD").split()
    names = _new_series(ov, tmp_path, how)
    status = cli(*base, "status", "--checkout", str(co))
    assert status.returncode == 1, status
    rows = STATE.findall(status.stdout)
    steps = f"run `sgl-overlay revert --checkout {co}`, then `sgl-overlay apply --checkout {co}`"
    if how == "content":
        assert rows == [("applied (older)", f"sglang/{names[0]}"), ("applied", f"sglang/{names[1]}")], status.stdout
        assert f"(commit {old[0][:12]}, made from an earlier version of this patch, whose content" in status.stdout
        older = f"sglang/{names[0]} is applied"
    else:
        assert rows == [
            ("applicable", f"sglang/{names[0]}"),
            ("applied (older)", f"sglang/{names[1]}"),
            ("applied (older)", f"sglang/{names[2]}"),
        ], status.stdout
        was = sorted(p.name for p in ov.series)
        assert f"(commit {old[0][:12]}, made from sglang/{was[0]} of an earlier version of the series)" in status.stdout
        older = f"sglang/{names[1]}, sglang/{names[2]} are applied"
    note = f"  note: {older} as an earlier version of the series (other content than the patches have now): {steps}"
    assert note in status.stdout.splitlines(), status.stdout
    before = snapshot(co)
    line = one_error(cli(*base, "apply", "--checkout", str(co)))
    assert line == f"{note.removeprefix('  note: ')} (tree left unchanged)", line
    assert snapshot(co) == before
    assert "reverted 2 overlay commit(s)" in _run(*base, "revert", "--checkout", str(co))
    assert f"applied {len(names)} patch(es)" in _run(*base, "apply", "--checkout", str(co))
    assert _states(_run(*base, "status", "--checkout", str(co))) == ["applied"] * len(names)
