"""Every line apply / check / status / revert (and fetch, export, pins, --abort) print, made from their reports
alone (no git, no checkout)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sgl_overlay.builds.verify import Unproven
from sgl_overlay.engine.checkout import MOVES, Aside
from sgl_overlay.engine.operations import (
    AlreadyIn,
    ApplyReport,
    BlobDiffers,
    CheckReport,
    OptionalNote,
    PreimageDiffers,
    RevertReport,
    StatusReport,
    TargetStatus,
    Uncommitted,
    upstream_of,
)
from sgl_overlay.engine.series import Kind, PreimageMismatch
from sgl_overlay.engine.states import PatchStatus, Standing, State
from sgl_overlay.engine.transaction import AmStop, Left, Leftover, who
from sgl_overlay.errors import OverlayError
from sgl_overlay.maint import export, pins

CO = Path("/co")


def _patch(label: str, forwarded: str, drop_when: str, origin=(Kind.PR, ""), applied_upstream: str = ""):
    """What a row reads of a patch."""
    fields = dict(label=label, applied_upstream=applied_upstream, forwarded=forwarded, drop_when=drop_when)
    return SimpleNamespace(**fields, origin=lambda: origin)


P1 = _patch("sglang/0001-a.patch", "https://example.com/pull/1", "a")
P2 = _patch("sglang/0002-b.patch", "", "")
DIFFERS = PreimageDiffers("sglang", PreimageMismatch("python/sglang/a.py", "aaaa", "bbbb"))
SHA = "0123456789abcdef0123"
FORK = Aside(folder="sgl-kernel", project="kvcache-ai/sglang", upstream="sgl-project/sglang")
WHY = "sgl-kernel/ here is kvcache-ai/sglang's own copy, not sgl-project/sglang's"  # FORK.line()
LOCK = Path("/co/.git/sgl-overlay.lock")
TEN = time.mktime((2026, 1, 1, 10, 0, 0, 0, 0, -1))  # 10:00:00 local time


def test_status_lines():
    report = StatusReport(
        CO,
        busy=Leftover(Left.RUNNING, CO, LOCK, {"pid": 7, "command": "apply", "started": TEN}),
        uncommitted=Uncommitted(3, 1, "python/sglang/a.py"),
        targets=[
            TargetStatus(
                "sglang", None, [PatchStatus(P1, State.APPLIED, commit=SHA), PatchStatus(P2, State.CONFLICTING, "x:1")]
            ),
            TargetStatus("sgl-kernel", FORK, [PatchStatus(P1, State.APPLICABLE)]),
        ],
        warnings=[DIFFERS],
    )
    assert report.lines() == [
        "note: /co is being changed by `sgl-overlay apply` (pid 7) since 10:00:00 (lock /co/.git/sgl-overlay.lock); "
        "wait for it to finish",
        "note: 3 file(s) have uncommitted changes (1 touched by the patches; first: python/sglang/a.py): the states "
        "below read the working files, not HEAD; apply and revert refuse until they are committed or stashed",
        "sglang in /co:",
        "  applied              sglang/0001-a.patch  (0123456789ab)  pr; upstream: not applied, forwarded as "
        "https://example.com/pull/1; left: its review and merge there; drop when: a",
        "  conflicting          sglang/0002-b.patch  (x:1)  pr; upstream: not applied, not forwarded; left: open its "
        "pull request (`sgl-overlay prs` writes it)",
        f"sgl-kernel in /co (optional here: {WHY}; only `-t sgl-kernel` applies it):",
        "  applicable           sglang/0001-a.patch  pr; upstream: not applied, forwarded as "
        "https://example.com/pull/1; left: its review and merge there; drop when: a",
        "warning: sglang: pre-image differs: python/sglang/a.py: expected blob aaaa, found bbbb",
    ]
    assert not report.ok  # a required patch conflicts; the optional target's state does not count
    merged = _patch("sglang/0001-a.patch", "https://e.com/pull/1", "a", applied_upstream="0.5.24")
    assert upstream_of(merged) == "pr; drop: upstream since 0.5.24"
    review = (Kind.REVIEW, "https://github.com/o/r/pull/9")
    assert upstream_of(_patch("k/0001-a.patch", "", "", review)) == (
        "review of https://github.com/o/r/pull/9; upstream: not applied, not forwarded; left: post the review "
        "(`sgl-overlay prs` writes it)"
    )
    assert upstream_of(_patch("k/0001-a.patch", "", "r 1.1", (Kind.PORT, "sglang/0004-e.patch"))) == (
        "port of sglang/0004-e.patch; upstream: carried until the target has it; left: nothing to send; drop when: "
        "r 1.1"
    )
    assert StatusReport(CO, None, None, [TargetStatus("k", FORK, [PatchStatus(P1, State.ABSENT)])], []).ok


@pytest.mark.parametrize(
    ("applied", "upstream", "line"),
    [
        (2, 0, "already applied: 2 patch(es) in /co; nothing to do"),
        (
            0,
            2,
            "already upstream: 2 patch(es) in /co (the files hold their change, not from overlay commits); "
            "nothing to do",
        ),
        (1, 1, "already applied: 1 patch(es), already upstream: 1, in /co; nothing to do"),
    ],
)
def test_already_in(applied, upstream, line):
    assert AlreadyIn(CO, applied, upstream).line() == line


def _note(standing: Standing, **kw) -> OptionalNote:
    row = PatchStatus(P1, State.OLDER, P1.label, SHA) if standing == Standing.OLDER else PatchStatus(P1, State.UPSTREAM)
    return OptionalNote(CO, "sgl-kernel", FORK, standing, [row], **kw)


def test_every_standing_has_its_own_line():
    bad = PatchStatus(P1, State.ABSENT, "sgl-kernel/csrc/x.cu")
    lines = {s: _note(s, bad=bad, differs=BlobDiffers("k/x.cu", SHA, "f" * 40)).line() for s in Standing}
    assert lines == {
        Standing.APPLIED: f"sgl-kernel: applied here too ({WHY})",
        Standing.IN: f"sgl-kernel: already in here ({WHY}; already upstream)",
        Standing.ABSENT: f"sgl-kernel: not applied ({WHY}); sglang/0001-a.patch needs sgl-kernel/csrc/x.cu, "
        "which is not here",
        Standing.CONFLICTS: f"sgl-kernel: not applied ({WHY}); its patch conflicts here: k/x.cu is blob "
        "0123456789ab, the patch is written for ffffffffffff; it needs a variant for this file (`sgl-overlay "
        "status` names the hunk)",
        Standing.HALF_APPLIED: f"sgl-kernel: half-applied here ({WHY}); run `sgl-overlay revert -t "
        "sgl-kernel --checkout /co`",
        Standing.APPLIES: f"sgl-kernel: not applied ({WHY}); its patch applies here: add it with "
        "`sgl-overlay apply -t sgl-kernel --checkout /co`",
        Standing.OLDER: f"sgl-kernel: not applied as the series has it ({WHY}); sglang/0001-a.patch is applied as an "
        "earlier version of the series (other content than the patches have now): run `sgl-overlay revert "
        "--checkout /co`, then `sgl-overlay apply -t sgl-kernel --checkout /co`",
    }
    assert (
        _note(Standing.CONFLICTS)
        .line()
        .endswith("its patch conflicts here: it needs a variant for this tree (`sgl-overlay status` names the hunk)")
    )
    assert "its patch applies with a 3-way merge here" in _note(Standing.APPLIES, three_way=True).line()


def test_check_lines():
    note = _note(Standing.APPLIED)
    conflicts = OverlayError("sglang/0001-a.patch conflicts in /co: x:1; tree left unchanged")
    assert CheckReport(CO, refused=conflicts).lines() == [
        "would fail: sglang/0001-a.patch conflicts in /co: x:1; tree left unchanged"
    ]
    assert not CheckReport(CO, refused=conflicts).ok
    assert CheckReport(CO, warnings=[DIFFERS], pending=2, notes=[note]).lines() == [
        "warning: sglang: pre-image differs: python/sglang/a.py: expected blob aaaa, found bbbb",
        "ok: 2 patch(es) would apply to /co",
        f"sgl-kernel: applied here too ({WHY})",
    ]
    assert CheckReport(CO, already=AlreadyIn(CO, 1, 0)).lines() == [
        "ok: already applied: 1 patch(es) in /co; nothing to do"
    ]


def test_apply_lines():
    done = ApplyReport(CO, [DIFFERS], [], count=2, before=SHA, after="f" * 40, upstream=1)
    assert done.lines() == [
        "warning: sglang: pre-image differs: python/sglang/a.py: expected blob aaaa, found bbbb (continuing; "
        "--strict refuses)",
        "applied 2 patch(es) to /co: 0123456789ab -> ffffffffffff (1 already upstream, skipped)",
    ]
    nothing = ApplyReport(CO, [], [_note(Standing.IN)], already=AlreadyIn(CO, 0, 1))
    assert nothing.lines() == [
        "already upstream: 1 patch(es) in /co (the files hold their change, not from overlay commits); nothing to do",
        f"sgl-kernel: already in here ({WHY}; already upstream)",
    ]


def test_revert_lines():
    assert RevertReport(CO, 2, "reset", SHA, "f" * 40).lines() == [
        "reverted 2 overlay commit(s) in /co (reset): 0123456789ab -> ffffffffffff"
    ]
    states = {"sglang": [State.APPLICABLE, State.UPSTREAM], "sglang-kt": [State.ABSENT]}
    assert RevertReport(CO, states=states).lines() == [
        "nothing to revert: no overlay patch is applied in /co (sglang: applicable, already upstream; "
        "sglang-kt: target file absent)"
    ]


def test_tree_export_and_pins_lines():
    from sgl_overlay.builds.tree import LaidOut

    assert LaidOut("sglang", Path("/t/sglang"), "0.5.23").line() == ("tree sglang: /t/sglang ready (upstream 0.5.23)")
    assert LaidOut("sglang", Path("/t/sglang"), "0.5.23", 12, SHA).line() == (
        "tree sglang: /t/sglang laid out (12 files, commit 0123456789ab)"
    )
    assert export.lines([(Path("/p/0001-a.patch"), True), (Path("/p/0002-b.patch"), False)]) == [
        "wrote /p/0001-a.patch",
        "unchanged /p/0002-b.patch",
    ]
    manifest = Path("/p/manifest.toml")
    assert pins.lines(manifest, [("sglang", 3)]) == ["pins sglang: 3 pre-image(s) written to /p/manifest.toml"]
    assert pins.lines(manifest, []) == ["pins: /p/manifest.toml already matches the series"]


def test_abort_lines():
    from sgl_overlay.engine.transaction import Aborted

    run = {"command": "apply", "pid": 41}
    assert Aborted(CO).line() == "nothing to abort in /co: no sgl-overlay run left a lock or journal there"
    assert Aborted(CO, run, Path("/co/.git/sgl-overlay.lock")).line() == (
        "removed the stale lock /co/.git/sgl-overlay.lock of `sgl-overlay apply` (pid 41); nothing to roll back in /co"
    )
    rolled = Aborted(CO, run, None, SHA, ("fedcba9876543210" * 2 + "f" * 8,))
    assert rolled.line() == (
        "rolled back the killed `sgl-overlay apply` (pid 41) in /co: HEAD 0123456789ab again, as before it ran; "
        "it had made commit(s) fedcba987654"
    )
    assert who({}) == "`sgl-overlay ?` (pid ?)"


def test_aside():
    assert FORK.line() == WHY
    assert Aside(moved=MOVES[0]).line() == (
        "sgl-project/sglang moved sgl-kernel/ to python/sglang/kernels/aot/ (2026-07-29); its patches map there"
    )


def test_failure_data_lines():
    run = {"pid": 7, "command": "apply", "started": TEN, "head": SHA}
    journal = Path("/co/.git/sgl-overlay-journal.json")
    assert Leftover(Left.STALE_LOCK, CO, LOCK, run).line() == (
        "stale lock /co/.git/sgl-overlay.lock of `sgl-overlay apply` (pid 7), which no longer runs; remove it "
        "with `sgl-overlay apply --abort --checkout /co`"
    )
    assert Leftover(Left.JOURNAL, CO, journal, run).line() == (
        "a killed `sgl-overlay apply` (pid 7) left /co mid-change (journal /co/.git/sgl-overlay-journal.json, "
        "HEAD before 0123456789ab); roll it back with `sgl-overlay apply --abort --checkout /co`"
    )
    assert (
        Leftover(Left.JOURNAL, CO, journal, {})
        .line()
        .endswith(
            "(journal /co/.git/sgl-overlay-journal.json, HEAD before unknown); roll it back with "
            "`sgl-overlay apply --abort --checkout /co`"
        )
    )
    hook = Path("/co/.git/hooks/pre-applypatch")
    assert AmStop("").reason() == "git am failed"
    assert AmStop("", hook).reason() == f"the pre-applypatch hook ({hook}) refused it (it printed nothing)"
    assert AmStop("no", hook).reason() == f"the pre-applypatch hook ({hook}) refused it: no"
    assert Unproven("sglang", base=PreimageMismatch("a.py", "aaaa", None)).line() == (
        "sglang base: missing file a.py (expected blob aaaa)"
    )
    assert Unproven("sglang", path="a.py", found="bbbb", want="cccc").line() == (
        "sglang: a.py is blob bbbb, the series ends at cccc"
    )
    assert Unproven("sglang", dirty=CO).line() == "sglang: /co has uncommitted changes"
