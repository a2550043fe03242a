"""Where each patch stands upstream: no author, `Origin:` / `Bug:` / `Forwarded:` / `Drop-when:` trailers, `base-commit:`, the
manifest's `applied_upstream`, and a patch that no longer changes its pinned tree."""

from __future__ import annotations

import re
from pathlib import Path

from sgl_overlay.engine.manifest import load_manifest
from sgl_overlay.engine.series import BUG, FORWARDED, NO_AUTHOR, NOT_NEEDED, NOT_YET, Kind, Series, read_patch
from synth import MODEL_PY, Overlay, blob, cli, clone, edit_line, git, make_overlay, one_error, pin_wheel, snapshot

REPO_PATCHES = Path(__file__).resolve().parents[2] / "patches"
URL = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+")


def _ok(*args: str) -> str:
    proc = cli(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _laid_out(tmp: Path, ov: Overlay | None = None, trees: str = "trees") -> tuple[Overlay, list[str], Path]:
    ov = ov or make_overlay(tmp)
    cache = tmp / "cache"
    if not cache.exists():
        pin_wheel(ov, cache)
    base = ["--patches", str(ov.patches), "--cache", str(cache), "--trees", str(tmp / trees)]
    _ok(*base, "fetch", "--offline")
    _ok(*base, "apply")
    return ov, base, tmp / trees / "sglang"


# ----------------------------------------------------------------------------- the real series


def test_no_patch_names_an_author_and_each_says_where_it_stands_upstream():
    manifest = load_manifest(REPO_PATCHES)
    assert "identity" not in manifest.path.read_text()
    for target in manifest.targets.values():
        series = Series.read(target)
        bases = {p.base_commit for p in series.patches}
        assert len(bases) == 1 and re.fullmatch(r"[0-9a-f]{40}", bases.pop()), (target.name, bases)
        if target.commit:
            assert {p.base_commit for p in series.patches} == {target.commit}
        trailers = {}
        for patch in series.patches:
            assert patch.author == NO_AUTHOR, (patch.label, patch.author)
            kind, source = patch.origin()  # one of the three kinds, well-formed
            assert kind is not Kind.PORT or (target.patch_dir.parent / source).is_file() or URL.fullmatch(source)
            for key in (BUG, FORWARDED):
                value = patch.trailer(key)
                assert value in (NOT_YET, NOT_NEEDED) or URL.fullmatch(value), (patch.label, key, value)
            assert len(patch.drop_when) > 20, (patch.label, patch.drop_when)  # says which upstream change
            trailers[patch.path.name] = (patch.trailer(BUG), patch.trailer(FORWARDED), patch.drop_when)
        for variant in target.matrix.variants:
            port = read_patch(target.patch_dir / variant.file)
            assert port.author == NO_AUTHOR, (port.label, port.author)
            assert (port.trailer(BUG), port.trailer(FORWARDED), port.drop_when) == trailers[variant.patch], port.label
            assert re.fullmatch(r"[0-9a-f]{40}", port.base_commit) and port.base_commit not in bases, port.label


# ----------------------------------------------------------------------------- export


def test_export_writes_no_author_trailers_and_base_commit_and_reexports_byte_for_byte(tmp_path):
    ov, base, tree = _laid_out(tmp_path)
    before = snapshot(ov.patches)
    missing = (
        "sglang: the message of 0001-model-fix-line-10.patch has no `{key}:` trailer; end it with `Origin: vendor` "
        "(or `other, <pull request URL>`, `backport, <what it ports>`), `Bug: <issue URL>`, `Forwarded: <pull request URL>` (`not-yet` where there is none) and `Drop-when: <the upstream "
        "change or release that makes it unneeded>` (`git rebase -i upstream`, reword), then export again"
    )
    assert one_error(cli(*base, "export")) == missing.format(key="Bug")
    assert snapshot(ov.patches) == before

    # The maintainer adds the trailers (their own identity commits them), then exports: Drop-when too.
    amend = "git commit -q --amend --no-edit --trailer 'Bug: not-yet' --trailer 'Forwarded: https://e.com/pull/2'"
    git(tree, "-c", "core.editor=true", "rebase", "-q", "upstream", "--exec", amend)
    assert one_error(cli(*base, "export")) == missing.format(key="Drop-when")
    assert snapshot(ov.patches) == before
    amend = "git commit -q --amend --no-edit --trailer 'Drop-when: sglang 1.1 has it'"
    git(tree, "-c", "core.editor=true", "rebase", "-q", "upstream", "--exec", amend)
    _ok(*base, "export")
    upstream = git(tree, "rev-parse", "upstream")
    for path in ov.series:
        patch = read_patch(path)
        assert patch.author == NO_AUTHOR and f"\nFrom: {NO_AUTHOR}\n" in path.read_text()
        assert (patch.trailer("Bug"), patch.forwarded, patch.drop_when, patch.base_commit) == (
            "not-yet",
            "https://e.com/pull/2",
            "sglang 1.1 has it",
            upstream,
        )
    # What `git format-patch --base` itself writes for the first patch of the series.
    by_git = git(tree, "format-patch", "--full-index", "--no-signature", "--base=upstream", "--stdout", "-1", "HEAD~1")
    first = ov.series[0].read_text()
    assert first.replace("[PATCH 1/2]", "[PATCH]") == by_git + "\n"
    assert git(tree, "log", "--format=%an <%ae>|%cn|%cd", "--date=raw", "upstream..HEAD").splitlines() == [
        f"{NO_AUTHOR}|sgl-overlay|{git(tree, 'log', '-1', '--format=%ad', '--date=raw', c)}"
        for c in git(tree, "rev-list", "upstream..HEAD").split()
    ]
    _ok(*base, "verify")

    # The written series lays out again to the same commits, and exports to the same bytes.
    written = snapshot(ov.patches)
    _, again, tree2 = _laid_out(tmp_path, ov, trees="trees2")
    assert git(tree2, "rev-parse", "HEAD") == git(tree, "rev-parse", "HEAD")
    out = _ok(*again, "export")
    assert out.count("unchanged ") == 2 and "wrote " not in out
    assert snapshot(ov.patches) == written
    _ok(*again, "verify")


def test_verify_refuses_a_base_commit_that_is_not_the_series_base(tmp_path):
    ov, base, tree = _laid_out(tmp_path)
    patch = ov.series[1]
    patch.write_text(patch.read_text() + "\nbase-commit: " + "1" * 40 + "\n")
    proc = cli(*base, "verify")
    assert proc.returncode == 1
    assert (
        f"sglang/{patch.name} says base-commit {'1' * 40}, the sglang series applies to "
        f"{git(tree, 'rev-parse', 'upstream')}; re-export it with `sgl-overlay export -t sglang`" in proc.stderr
    )


# ----------------------------------------------------------------------------- applied upstream


def test_status_says_when_each_patch_can_go_and_once_upstream_holds_it_that_it_can(tmp_path):
    """On a user's checkout: each patch's `Drop-when:`; once the manifest's applied_upstream names the release
    that holds a patch, `drop: upstream since` it."""
    ov, base, tree = _laid_out(tmp_path)
    drop_when = ("sglang 1.1 releases example/sglang#8", "a sglang release with the hook fix")
    amend = (  # each commit its own Drop-when, by its subject
        f"case $(git log -1 --format=%s) in model*) w='{drop_when[0]}';; *) w='{drop_when[1]}';; esac; "
        "git commit -q --amend --no-edit --trailer 'Bug: not-yet' --trailer 'Forwarded: not-yet' "
        '--trailer "Drop-when: $w"'
    )
    git(tree, "-c", "core.editor=true", "rebase", "-q", "upstream", "--exec", amend)
    _ok(*base, "export")
    assert [read_patch(p).drop_when for p in ov.series] == list(drop_when)
    checkout = clone(ov.upstream, tmp_path / "checkout")
    status = [*base, "status", "--checkout", str(checkout)]
    rows = [line for line in _ok(*status).splitlines() if ".patch" in line]
    assert [row.split()[0] for row in rows] == ["applicable", "applicable"]
    assert rows[0].endswith(
        "pr; upstream: not applied, not forwarded; left: open its pull request (`sgl-overlay prs` writes it); "
        f"drop when: {drop_when[0]}"
    )
    assert rows[1].endswith(f"; drop when: {drop_when[1]}")
    manifest = ov.patches / "manifest.toml"
    manifest.write_text(
        manifest.read_text()
        + f'\n[targets.sglang.applied_upstream]\n"{ov.series[0].name}" = "sglang 1.1 (https://e.com/pull/8)"\n'
    )
    _ok(*base, "apply", "--checkout", str(checkout))
    rows = [line for line in _ok(*status).splitlines() if ".patch" in line]
    assert rows[0].startswith("  applied ") and rows[0].endswith(
        f"{ov.series[0].name}  ({git(checkout, 'rev-parse', 'HEAD~1')[:12]})  pr; drop: upstream since sglang 1.1 "
        "(https://e.com/pull/8)"
    )
    assert rows[1].endswith(f"; drop when: {drop_when[1]}")


def test_applied_upstream_naming_no_patch_of_the_series_is_refused(tmp_path):
    ov = make_overlay(tmp_path)
    manifest = ov.patches / "manifest.toml"
    manifest.write_text(manifest.read_text() + '\n[targets.sglang.applied_upstream]\n"0009-gone.patch" = "1.1"\n')
    line = one_error(cli("--patches", str(ov.patches), "status"))
    assert line.endswith(
        "target 'sglang': applied_upstream names 0009-gone.patch, which is not in its patches list; "
        "name a patch of the series (a dropped patch needs no entry)"
    )


# ----------------------------------------------------------------------------- a patch upstream already has


def _no_op_line(ov: Overlay, n: int) -> str:
    return (
        f"sglang/{ov.series[n].name} changes nothing on sglang 1.0: every file of it there already holds its "
        "post-image; record where upstream has it under [targets.sglang.applied_upstream] in "
        "patches/manifest.toml and drop it from the series"
    )


def test_fetch_refuses_a_pin_that_already_holds_a_patch(tmp_path):
    """The pinned wheel has patch 1's model.py (its test is not in a wheel): the patch changes nothing there."""
    ov = make_overlay(tmp_path)
    fixed = edit_line(MODEL_PY, "line 10\n", "line 10 fixed\n")
    pin_wheel(ov, tmp_path / "cache", {"sglang/model.py": fixed, "sglang/hook.py": "unchanged\n"})
    before = snapshot(tmp_path / "trees")
    base = ["--patches", str(ov.patches), "--cache", str(tmp_path / "cache"), "--trees", str(tmp_path / "trees")]
    assert one_error(cli(*base, "fetch", "--offline")) == _no_op_line(ov, 0)
    assert snapshot(tmp_path / "trees") == before


def test_verify_fails_on_a_patch_that_changes_nothing(tmp_path):
    """A third patch whose diff gives back the file it got: `make` (verify) stops on it."""
    ov, base, tree = _laid_out(tmp_path)
    _ok(*base, "verify")
    final = (tree / "python/sglang/model.py").read_text()
    same = blob(final)
    noop = ov.patches / "sglang" / "0003-model-no-change.patch"
    noop.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {NO_AUTHOR}\nDate: Tue, 1 Dec 2026 00:00:00 +0000\nSubject: [PATCH 3/3] model: no change\n\n"
        "Bug: not-yet\nForwarded: not-yet\n---\n"
        "diff --git a/python/sglang/model.py b/python/sglang/model.py\n"
        f"index {same}..{same} 100644\n--- a/python/sglang/model.py\n+++ b/python/sglang/model.py\n"
        "@@ -1 +1 @@\n-line 1\n+line 1\n"
    )
    manifest = ov.patches / "manifest.toml"
    manifest.write_text(
        manifest.read_text().replace(f'"{ov.series[1].name}"]', f'"{ov.series[1].name}", "{noop.name}"]')
    )
    ov.series.append(noop)
    proc = cli(*base, "verify")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["error: " + _no_op_line(ov, 2)], proc.stderr
