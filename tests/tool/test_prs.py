"""`sgl-overlay prs`: each patch as upstream would receive it (normal context, by its sender, no overlay
trailers or base-commit, PR.md from its checked description), re-applying to the pinned tree with the same
post-images; and scripts/check_upstream_main.py, which tries those mboxes on copies of upstream main's files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sgl_overlay.builds.tree import is_ready
from sgl_overlay.engine.manifest import load_manifest
from sgl_overlay.engine.series import Series
from sgl_overlay.maint import prs
from synth import HOOK_PY, MODEL_PY, REPO_ROOT, cli, edit_line, git, make_overlay, one_error, pin_wheel, snapshot

BUG = "https://github.com/example/sglang/issues/7"
PULL = "https://github.com/example/sglang/pull/8"
SECTIONS = ("Motivation", "Modifications", "Accuracy Tests", "Speed Tests and Profiling")
SENDER = prs.Sender("Pat Sender", "pat@example.org")


def _git_config(tmp: Path, name: str, text: str) -> dict[str, str]:
    """git's environment with `text` as the user's own config and no system config."""
    path = tmp / name
    path.write_text(text)
    return {"GIT_CONFIG_GLOBAL": str(path), "GIT_CONFIG_NOSYSTEM": "1"}


def _sender_env(tmp: Path) -> dict[str, str]:
    return _git_config(tmp, "sender.gitconfig", f"[user]\n\tname = {SENDER.name}\n\temail = {SENDER.email}\n")


def _ok(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    proc = cli(*args, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _description(title: str = "# [Model] Fix line 10", fixes: str = "Fixes #7.", sections=SECTIONS) -> str:
    body = "".join(f"## {name}\n\n{fixes if name == 'Motivation' else 'Text.'}\n\n" for name in sections)
    return f"{title}\n\n{body}"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The synthetic two-patch series with trailers and base-commit (as `export` writes them), laid out again
    from those files, with a valid description beside each patch. Built once; each test gets a copy."""
    tmp = tmp_path_factory.mktemp("prs")
    ov = make_overlay(tmp)
    manifest = ov.patches / "manifest.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'upstream = "https://example.com/sglang"', 'upstream = "https://github.com/example/sglang"'
        )
    )
    pin_wheel(ov, tmp / "cache")
    base = ["--patches", str(ov.patches), "--cache", str(tmp / "cache"), "--trees", str(tmp / "trees")]
    _ok(*base, "fetch", "--offline")
    _ok(*base, "apply")
    tree = tmp / "trees" / "sglang"
    amend = (
        f"git commit -q --amend --no-edit --trailer 'Bug: {BUG}' --trailer 'Forwarded: {PULL}' "
        "--trailer 'Drop-when: sglang 1.1 has it'"
    )
    git(tree, "-c", "core.editor=true", "rebase", "-q", "upstream", "--exec", amend)
    _ok(*base, "export")
    assert all("base-commit: " in p.read_text() and f"Forwarded: {PULL}" in p.read_text() for p in ov.series)
    base[-1] = str(tmp / "trees2")
    _ok(*base, "fetch", "--offline")
    _ok(*base, "apply")
    for p in ov.series:
        p.with_suffix(".pr.md").write_text(_description())
    return tmp


@pytest.fixture
def overlay(prepared, tmp_path):
    """A copy of the prepared overlay: (patches/ series, global options, the laid-out tree)."""
    work = tmp_path / "w"
    shutil.copytree(prepared, work, symlinks=True)
    patches = work / "patches"
    series = [patches / "sglang" / p.name for p in sorted((prepared / "patches" / "sglang").glob("*.patch"))]
    base = ["--patches", str(patches), "--cache", str(work / "cache"), "--trees", str(work / "trees2")]
    return SimpleNamespace(patches=patches, series=series), base, work / "trees2" / "sglang"


def test_prs_writes_normal_context_mboxes_and_pr_md_that_reapply_to_the_same_post_images(overlay, tmp_path):
    ov, base, tree = overlay
    out = tmp_path / "out"
    env = _sender_env(tmp_path)
    lines = _ok(*base, "prs", "--out", str(out), env=env).splitlines()
    folders = [out / "sglang" / p.stem for p in ov.series]
    assert lines == [
        f"wrote {folders[0]}/: [Model] Fix line 10 (2 file(s), +3 -1); open upstream as {PULL}",
        f"wrote {folders[1]}/: [Model] Fix line 10 (2 file(s), +2 -2); open upstream as {PULL}",
    ]
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(tree), str(clone))
    git(clone, "checkout", "-q", "upstream")
    for folder, commit in zip(folders, git(tree, "rev-list", "--reverse", "upstream..HEAD").split()):
        mboxes = sorted(folder.glob("*.patch"))
        assert [m.name for m in mboxes] == [git(tree, "log", "-1", "--format=0001-%f.patch", commit)]
        text = mboxes[0].read_text()
        assert "Subject: [PATCH] " in text and "@@ -" in text
        assert f"\nFrom: {SENDER.name} <{SENDER.email}>\n" in text
        for leak in ("Origin:", "Bug:", "Forwarded:", "Drop-when:", "base-commit:"):
            assert leak not in text, (folder.name, leak)
        pr = (folder / "PR.md").read_text()
        assert pr == _description().replace("\n\n", f"\n\nForwarded upstream as {PULL}.\n\n", 1)
        git(clone, "am", "-q", "--keep-non-patch", str(mboxes[0]))
        # the same post-image blobs: every file at this commit is the series' own
        assert git(clone, "rev-parse", "HEAD^{tree}") == git(tree, "rev-parse", f"{commit}^{{tree}}")
        assert git(clone, "log", "-1", "--format=%s%n%an <%ae>%n%ad", "HEAD") == git(
            tree, "log", "-1", f"--format=%s%n{SENDER.name} <{SENDER.email}>%n%ad", commit
        )
    assert not list(out.glob("sglang/*/main"))  # no folder of this upstream moved
    # a second run replaces the target's folder with the same bytes
    before = snapshot(out)
    _ok(*base, "prs", "--out", str(out), env=env)
    assert snapshot(out) == before


def test_prs_takes_the_git_identity_of_the_checkout_it_runs_in(overlay, tmp_path):
    """The checkout's own user.name / user.email win over the user's; with either unset nowhere, one line
    names it and nothing is written."""
    ov, base, _ = overlay
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "config", "user.name", "Local Name"], check=True)
    subprocess.run(["git", "-C", str(work), "config", "user.email", "local@example.org"], check=True)
    out = tmp_path / "out"
    _ok(*base, "prs", "--out", str(out), env=_sender_env(tmp_path), cwd=work)
    mboxes = sorted(out.glob("sglang/*/*.patch"))
    assert mboxes and all("\nFrom: Local Name <local@example.org>\n" in m.read_text() for m in mboxes)

    bare = tmp_path / "bare"
    bare.mkdir()
    for config, missing in (("", "user.name"), ("[user]\n\tname = Only Name\n", "user.email")):
        env = _git_config(tmp_path, f"{missing}.gitconfig", config)
        gone = tmp_path / f"out-{missing}"
        line = one_error(cli(*base, "prs", "--out", str(gone), env=env, cwd=bare))
        assert line == (
            f"`sgl-overlay prs` writes each pull request as you, and git has no {missing} in {bare}; set it "
            f"(`git config --global {missing} ...`, or in that checkout), then run it again"
        )
        assert not gone.exists()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, r"no pull-request description {path} for sglang/{patch}; write it"),
        (_description(title="Fix line 10"), "{path}: first line 'Fix line 10' is not a pull-request title"),
        (_description(title="# Fix line 10"), "{path}: first line '# Fix line 10' is not a pull-request title"),
        (
            _description(sections=SECTIONS[:3] + ("Benchmark & Profiling",)),
            "{path} has the sections ['Motivation', 'Modifications', 'Accuracy Tests', 'Benchmark & Profiling'], "
            "upstream's template has ['Motivation', 'Modifications', 'Accuracy Tests', 'Speed Tests and Profiling']",
        ),
        (_description(sections=SECTIONS[1:]), "{path} has the sections ['Modifications',"),
        (
            _description().replace("Text.\n\n## Accuracy", "\n## Accuracy"),
            "{path}: section `## Modifications` is empty",
        ),
        (
            _description(fixes="Fixes a bug."),
            f"{{path}} does not name the issue its patch fixes ({BUG}); add `Fixes #7` to `## Motivation`",
        ),
    ],
)
def test_a_missing_or_malformed_description_is_refused_with_one_line_and_nothing_written(overlay, tmp_path, text, says):
    ov, base, _ = overlay
    path = ov.series[1].with_suffix(".pr.md")
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    out = tmp_path / "out"
    proc = cli(*base, "prs", "--out", str(out), env=_sender_env(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sgl-overlay: error: "), proc.stderr
    assert says.format(path=path, patch=ov.series[1].name) in lines[0]
    assert proc.stdout == "" and not out.exists()


@pytest.mark.parametrize("link", [BUG, "Fixes #7", "Closes #7"])
def test_the_issue_may_be_named_by_its_url_or_fixes(overlay, link, tmp_path):
    ov, base, _ = overlay
    ov.series[1].with_suffix(".pr.md").write_text(_description(fixes=link))
    _ok(*base, "prs", "--out", str(tmp_path / "out"), env=_sender_env(tmp_path))


REVIEWED = "https://github.com/example/sglang/pull/9"


def _review(fixes: str = f"See {BUG}.", sections=prs.REVIEW_SECTIONS) -> str:
    body = "".join(f"## {name}\n\n{fixes if name == 'Why' else 'Text.'}\n\n" for name in sections)
    return f"# Review of example/sglang#9: what to change there\n\n{body}"


def _retrail(patch: Path, **trailers: str) -> None:
    """Rewrite the patch file's `Key: value` trailers (`Drop_when` for `Drop-when`); the tree keeps its commits."""
    text = patch.read_text()
    for key, value in trailers.items():
        key = key.replace("_", "-")
        old = next(line for line in text.splitlines() if line.startswith(f"{key}: "))
        text = text.replace(f"\n{old}\n", f"\n{key}: {value}\n" if value else "\n", 1)
    patch.write_text(text)


def test_a_review_of_an_open_pull_request_is_written_as_review_md_with_the_command_that_posts_it(overlay, tmp_path):
    """What makes a patch a review is its `Origin: other, <URL>`: REVIEW.md, posted on that pull request."""
    ov, base, _ = overlay
    _retrail(ov.series[1], Origin=f"other, {REVIEWED}")
    ov.series[1].with_suffix(".pr.md").write_text(_review())
    out = tmp_path / "out"
    lines = _ok(*base, "prs", "--out", str(out), env=_sender_env(tmp_path)).splitlines()
    folder = out / "sglang" / ov.series[1].stem
    assert lines[1] == (
        f"wrote {folder}/: Review of example/sglang#9: what to change there (2 file(s), +2 -2); sent upstream as {PULL}"
    )
    names = sorted(p.name for p in folder.iterdir())
    assert names[1:] == ["REVIEW.md"] and names[0].endswith(".patch"), names
    assert (folder / "REVIEW.md").read_text() == _review().replace("\n\n", f"\n\nForwarded upstream as {PULL}.\n\n", 1)
    assert (out / "sglang" / ov.series[0].stem / "PR.md").is_file()  # the other patch opens its own


def test_a_review_not_yet_sent_names_the_command_that_posts_it(overlay, tmp_path):
    ov, base, tree = overlay
    patch = ov.series[1]
    _retrail(patch, Origin=f"other, {REVIEWED}", Forwarded="not-yet")
    patch.with_suffix(".pr.md").write_text(_review())
    out = tmp_path / "out"
    base = [*base[:-1], str(tmp_path / "trees3")]
    _ok(*base, "fetch", "--offline")
    _ok(*base, "apply")
    line = _ok(*base, "prs", "--out", str(out), env=_sender_env(tmp_path)).splitlines()[1]
    folder = out / "sglang" / patch.stem
    assert line.endswith(
        f"; post it on example/sglang#9 with `gh pr review 9 --repo example/sglang --comment --body-file "
        f"{folder}/REVIEW.md` (the mbox beside it: the change it proposes)"
    )
    assert (folder / "REVIEW.md").read_text() == _review()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (_review(sections=SECTIONS), f"has the sections {list(SECTIONS)}, a review has {list(prs.REVIEW_SECTIONS)}"),
        (_review(fixes="An issue."), f"does not name the issue its patch fixes ({BUG}); add `#7` to `## Why`"),
    ],
)
def test_a_malformed_review_is_refused_with_one_line(overlay, tmp_path, text, says):
    ov, base, _ = overlay
    _retrail(ov.series[1], Origin=f"other, {REVIEWED}")
    ov.series[1].with_suffix(".pr.md").write_text(text)
    line = one_error(cli(*base, "prs", "--out", str(tmp_path / "out"), env=_sender_env(tmp_path)))
    assert says in line, line


def test_a_review_title_on_a_pull_request_of_ours_and_a_pr_title_on_a_review_are_refused(overlay, tmp_path):
    ov, base, _ = overlay
    description = ov.series[1].with_suffix(".pr.md")
    description.write_text(_review())
    env = _sender_env(tmp_path)
    line = one_error(cli(*base, "prs", "--out", str(tmp_path / "out"), env=env))
    assert line.endswith(
        f"{description}: first line '# Review of example/sglang#9: what to change there' is not a pull-request "
        "title; write it as `# [Area] Title`"
    )
    _retrail(ov.series[1], Origin=f"other, {REVIEWED}")
    description.write_text(_description())
    line = one_error(cli(*base, "prs", "--out", str(tmp_path / "out"), env=env))
    assert line.endswith(
        f"{description}: first line '# [Model] Fix line 10' is not a review's title; write it as `# Review of <what "
        "it proposes>`"
    )
    assert not (tmp_path / "out").exists()


def test_a_port_is_listed_not_written_as_a_pull_request(overlay, tmp_path):
    """`Origin: backport, <source>` with `Forwarded: not-needed`: one line naming what it carries; no folder, and
    no description is needed."""
    ov, base, _ = overlay
    _retrail(ov.series[1], Origin="backport, sglang/0004-eplb.patch", Forwarded="not-needed")
    ov.series[1].with_suffix(".pr.md").unlink()
    out = tmp_path / "out"
    lines = _ok(*base, "prs", "--out", str(out), env=_sender_env(tmp_path)).splitlines()
    assert lines[1] == (
        f"port sglang/{ov.series[1].name}: carries sglang/0004-eplb.patch, no pull request; drop when: sglang 1.1 "
        "has it"
    )
    assert sorted(p.name for p in (out / "sglang").iterdir()) == [ov.series[0].stem]


ORIGIN_NEXT = (
    "; its message's trailers start with `Origin: vendor` (a pull request we send), `Origin: other, <pull request "
    "URL>` (a review of it) or `Origin: backport, <what it ports>` (with `Forwarded: not-needed`, only there): "
    "reword its commit and `sgl-overlay export`"
)


@pytest.mark.parametrize(
    ("trailers", "has"),
    [
        ({"Origin": ""}, "no `Origin:` trailer"),
        ({"Origin": "upstream"}, "`Origin: upstream`, which is no kind of patch"),
        ({"Origin": "vendor, https://e.com/1"}, "`Origin: vendor, https://e.com/1`"),
        ({"Origin": "other"}, "`Origin: other`"),
        ({"Origin": "other, example/sglang#9"}, "`Origin: other, example/sglang#9`"),
        ({"Origin": "backport"}, "`Origin: backport`"),
        ({"Origin": "backport, sglang/0004-eplb.patch"}, f"`Origin: backport` with `Forwarded: {PULL}`"),
        ({"Forwarded": "not-needed"}, "`Origin: vendor` with `Forwarded: not-needed`"),
    ],
)
def test_a_missing_or_malformed_origin_is_refused_with_one_line_and_nothing_written(overlay, tmp_path, trailers, has):
    ov, base, _ = overlay
    _retrail(ov.series[1], **trailers)
    out = tmp_path / "out"
    assert one_error(cli(*base, "prs", "--out", str(out), env=_sender_env(tmp_path))) == (
        f"{ov.series[1]} has {has}{ORIGIN_NEXT}"
    )
    assert not out.exists()


def test_strip_trailers_keeps_other_trailers_and_drops_an_emptied_paragraph():
    msg = b"subject\n\nbody\n\nLink: x\nOrigin: vendor\nBug: y\nForwarded: z\nDrop-when: w\n"
    assert prs.strip_trailers(msg) == b"subject\n\nbody\n\nLink: x\n"
    assert prs.strip_trailers(b"subject\n\nbody\n\nBug: y\nForwarded: z\nDrop-when: w\n") == b"subject\n\nbody\n"
    assert prs.strip_trailers(b"Bug: not a trailer, the subject\n") == b"Bug: not a trailer, the subject\n"


# ----------------------------------------------------------------------------- the real series


def test_every_description_in_patches_is_in_its_upstreams_template_shape():
    manifest = load_manifest(REPO_ROOT / "patches")
    checked = 0
    for target in manifest.targets.values():
        for patch in Series.read(target).patches:
            if prs.description_of(target, patch.path.name).exists():
                prs.check_description(target, patch)
                checked += 1
    assert checked >= 3


def test_real_series_at_normal_context_reapplies_to_the_pinned_trees(tmp_path):
    """Every laid-out tree under build/trees: the -U3 mboxes, applied with `git am` to the pinned tree, give
    the series' own trees commit by commit; sgl-kernel's full-context series shrinks to normal context."""
    manifest = load_manifest(REPO_ROOT / "patches")
    trees = REPO_ROOT / "build" / "trees"
    ready = [t for t in manifest.targets.values() if is_ready(trees / t.name, t)]
    if not ready:
        pytest.skip("no laid-out trees under build/trees (`make trees`)")
    for target in ready:
        tree = trees / target.name
        clone = tmp_path / target.name
        git(tmp_path, "clone", "-q", "--shared", "--no-checkout", str(tree), str(clone))
        git(clone, "checkout", "-q", "upstream")
        series = git(tree, "rev-list", "--reverse", "upstream..HEAD").split()
        for name, made, commit in zip(target.patches, prs.upstream_commits(target, tree, SENDER), series):
            mbox = subprocess.run(
                [
                    "git",
                    "-C",
                    str(tree),
                    "format-patch",
                    prs.UPSTREAM_CONTEXT,
                    "--no-signature",
                    "--stdout",
                    "-1",
                    made,
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert "\nBug: " not in mbox and "\nForwarded: " not in mbox and "base-commit:" not in mbox
            assert "\nDrop-when: " not in mbox
            if target.full_context:
                assert len(mbox) < len((target.patch_dir / name).read_text()), name
            subprocess.run(["git", "-C", str(clone), "am", "-q", "--keep-non-patch"], input=mbox, text=True, check=True)
            assert git(clone, "rev-parse", "HEAD^{tree}") == git(tree, "rev-parse", f"{commit}^{{tree}}"), name
            paths = tuple(git(tree, "diff", "--name-only", f"{commit}~1", commit).splitlines())
            moved = prs.moved_on_main(target, paths)
            if moved is not None:  # the main-shaped mbox gives the same blobs at the moved folder
                _same_at_moved_folder(tree, made, commit, moved, tmp_path / "main" / target.name / name)


def _same_at_moved_folder(tree: Path, made: str, commit: str, moved, work: Path) -> None:
    prs.format_patch(tree, made, work / "mbox", moved)
    (work / "repo").mkdir(parents=True)
    git(work / "repo", "init", "-q")
    repo = work / "repo"
    before = git(tree, "ls-tree", "-r", f"{commit}~1").splitlines()
    for line in before:
        meta, path = line.split("\t")
        if path.startswith(moved.old):
            dest = repo / moved.path(path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(
                subprocess.run(
                    ["git", "-C", str(tree), "cat-file", "blob", meta.split()[2]], capture_output=True, check=True
                ).stdout
            )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "main")
    git(repo, "am", "-q", "--keep-non-patch", str(next((work / "mbox").glob("*.patch"))))
    for line in git(tree, "ls-tree", "-r", commit).splitlines():
        meta, path = line.split("\t")
        if path.startswith(moved.old):
            assert git(repo, "rev-parse", f"HEAD:{moved.path(path)}") == meta.split()[2], path


# ----------------------------------------------------------------------------- checked against main


def _main_files(tmp_path, model_py: str, hook_py: str) -> None:
    """tmp_path/main: upstream main's model.py and hook.py, read at commit aaaa…"""
    main = tmp_path / "main" / "example" / "sglang"
    files = main / "files" / "python" / "sglang"
    files.mkdir(parents=True)
    (main / "COMMIT").write_text("a" * 40 + "\n")
    (files / "model.py").write_text(model_py)
    (files / "hook.py").write_text(hook_py)


def test_check_upstream_main_sorts_applies_offsets_and_conflicts(overlay, tmp_path):
    ov, base, tree = overlay
    # both model.py hunks move by two lines; hook.py's changed line changed upstream
    _main_files(tmp_path, "new 1\nnew 2\n" + MODEL_PY, edit_line(HOOK_PY, "hook 5\n", "hook 5 changed upstream\n"))
    doc = tmp_path / "upstream.md"
    doc.write_text("# Upstream\n\nBefore.\n")
    script = REPO_ROOT / "scripts" / "check_upstream_main.py"
    args = [
        sys.executable,
        str(script),
        "--patches",
        str(ov.patches),
        "--trees",
        base[-1],
        "--main",
        str(tmp_path / "main"),
    ]
    env = {**os.environ, **_sender_env(tmp_path)}
    proc = subprocess.run([*args, "--write", str(doc)], capture_output=True, text=True, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a conflict
    rows = [line for line in doc.read_text().splitlines() if line.startswith("| sglang ")]
    assert len(rows) == 2
    assert "**applies with offsets**: Hunk #1 succeeded at 9 (offset 2 lines)" in rows[0]
    assert f"example/sglang `{'a' * 12}`" in rows[0]
    assert "**conflicts**" in rows[1] and "hook.py" in rows[1]
    assert doc.read_text().startswith("# Upstream\n\nBefore.\n")
    # run again: the table is replaced, not appended
    subprocess.run([*args, "--write", str(doc)], capture_output=True, text=True, env=env)
    assert doc.read_text().count("| target |") == 1
    listed = subprocess.run([*args[:-2], "--list"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "example/sglang python/sglang/model.py" in listed and "example/sglang test/test_model.py" in listed


def test_check_upstream_main_carries_a_3_way_merge_to_a_relative_folder(overlay, tmp_path):
    ov, base, tree = overlay
    # in the context of the hook.py hunk, not on its changed line: `git apply` refuses, `am -3` merges
    _main_files(tmp_path, MODEL_PY, edit_line(HOOK_PY, "hook 7\n", "hook 7 changed upstream\n"))
    script = REPO_ROOT / "scripts" / "check_upstream_main.py"
    args = [sys.executable, str(script), "--patches", str(ov.patches), "--trees", base[-1]]
    env = {**os.environ, **_sender_env(tmp_path)}
    proc = subprocess.run(
        [*args, "--main", "main", "--carry", "prs"], cwd=tmp_path, capture_output=True, text=True, check=True, env=env
    )
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| sglang ")]
    assert "**applies**" in rows[0] and "**applies with a 3-way merge**" in rows[1], proc.stdout
    carried = sorted((tmp_path / "prs" / "sglang").glob("*/main/*.patch"))
    assert [p.parent.parent.name for p in carried] == [ov.series[1].stem]
    assert "+hook 5 fixed\n" in carried[0].read_text() and " hook 7 changed upstream\n" in carried[0].read_text()
    assert f"\nFrom: {SENDER.name} <{SENDER.email}>\n" in carried[0].read_text()
