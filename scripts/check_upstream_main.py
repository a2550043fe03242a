#!/usr/bin/env python3
"""Try each exported pull request (`sgl-overlay prs`: the series at normal context, upstream's messages) on
upstream main, from copies of the files it touches, and write the table of docs/upstream.md.

    .venv/bin/python scripts/check_upstream_main.py --list                      # the files to fetch, per repository
    .venv/bin/python scripts/check_upstream_main.py --main DIR [--patch GLOB]... [--write docs/upstream.md]
        [--carry build/prs]

DIR holds, per upstream repository, `<owner>/<repo>/COMMIT` (the main commit the files were read at, first
line; a later `PATH COMMIT` line names another commit a file was read at) and `<owner>/<repo>/files/<path>` (each file as it is there; a file main lacks is simply not there).
For each target the files are committed as a sparse git tree, the pinned pre-image and post-image blobs
are added to its objects (so `git am -3` has the bases a 3-way merge needs), and the selected patches are
tried in series order, each on top of the ones before it that applied: `git apply --check` first (applies,
or applies with offsets), else `git am -3` (applies with a 3-way merge), else conflicts (the files named).
A patch that applies is also read by ruff for names it uses that the file never defines (an import main
lacks). It is text only: no test runs against main.
A folder main moved (sgl_overlay.engine.checkout.MOVES) is followed when the old path is absent and the new one is
there. --carry writes, for each patch that needed a moved path or a 3-way merge, its main-shaped mbox (the
commit `git am` made) to <carry>/<target>/<patch stem>/main/. No network: the lead fetches the files
(docs/upstream.md says how); the laid-out trees (`make trees`) give the series."""

from __future__ import annotations

import argparse
import fnmatch
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sgl_overlay.builds.places import places
from sgl_overlay.builds.tree import BASE_TAG
from sgl_overlay.engine import gitutil
from sgl_overlay.engine.checkout import MOVES, SAME_PLACE, Placement, repo_name
from sgl_overlay.engine.manifest import Target, load_manifest
from sgl_overlay.maint import prs

_OFFSET = re.compile(r"Hunk #\d+ succeeded at \d+ \((?:offset [-\d]+ lines?|with fuzz \d+)\)")


@dataclass(frozen=True)
class Result:
    target: str
    patch: str
    repo: str
    commit: str
    state: str
    detail: str
    moved: str


def touched(tree: Path, commit: str) -> list[str]:
    return gitutil.out(tree, "diff", "--name-only", "--no-renames", f"{commit}~1", commit).splitlines()


def placement_for(paths: list[str], files: Path) -> Placement:
    """The moved folder to follow: one whose old prefix the patch uses, absent at main, present moved."""
    for moved in MOVES:
        old = [p for p in paths if p.startswith(moved.old)]
        if old and not any((files / p).exists() for p in old) and any((files / moved.path(p)).exists() for p in old):
            return moved
    return SAME_PLACE


def sparse_main(work: Path, files: Path, commit: str) -> Path:
    repo = work / "main"
    shutil.copytree(files, repo)
    gitutil.git(repo, "init", "-q")
    gitutil.git(repo, "add", "-A")
    gitutil.git(repo, "commit", "-q", "-m", f"main {commit}", env=gitutil.TOOL_IDENTITY)
    return repo


def add_blobs(tree: Path, commit: str, repo: Path) -> None:
    """The pre- and post-image of every file the commit touches, as objects of `repo` (bases for `am -3`)."""
    for rev in (f"{commit}~1", commit):
        for path in touched(tree, commit):
            data = gitutil.cat_blob(tree, rev, path)
            if data is not None:
                gitutil.hash_bytes(data, write_to=repo)


def try_patch(repo: Path, mbox: Path, flags: list[str]) -> tuple[str, str]:
    """(state, detail) of one mbox on `repo`'s HEAD; HEAD advances when it applies."""
    check = gitutil.git(repo, "apply", "--check", "-v", *flags, str(mbox), check=False)
    if check.returncode == 0:
        out = check.stdout + check.stderr
        gitutil.git(repo, "am", "-q", "--keep-non-patch", *flags, str(mbox), env=gitutil.TOOL_IDENTITY)
        moved = _OFFSET.findall(out)
        return ("applies with offsets", "; ".join(moved)) if moved else ("applies", "")
    am = gitutil.git(
        repo, "am", "-q", "--keep-non-patch", "-3", *flags, str(mbox), check=False, env=gitutil.TOOL_IDENTITY
    )
    if am.returncode == 0:
        return "applies with a 3-way merge", ""
    unmerged = gitutil.out(repo, "diff", "--name-only", "--diff-filter=U")
    why = am.stdout + am.stderr
    first = next((line for line in why.splitlines() if line.startswith("error:")), why.strip()[:200])
    gitutil.git(repo, "am", "--abort", check=False)
    return "conflicts", (f"in {', '.join(unmerged.splitlines())}" if unmerged else first)


def undefined_names(repo: Path, paths: list[str]) -> list[str]:
    """`name (path:line)` of each name the applied Python files use but never define (ruff's F821): a patch
    that applies as text can still lean on an import main lacks. Empty where ruff is not installed."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    files = [p for p in paths if p.endswith(".py") and (repo / p).is_file()]
    if ruff is None or not files:
        return []
    cmd = [ruff, "check", "--isolated", "--no-cache", "--select", "F821", "--output-format", "concise", *files]
    out = subprocess.run(cmd, cwd=repo, capture_output=True, text=True).stdout
    found = re.findall(r"^(\S+?):(\d+):\d+: F821 Undefined name `([^`]+)`", out, re.M)
    return [f"{name} ({path}:{line})" for path, line, name in found]


def check_target(
    target: Target, tree: Path, main: Path, patterns: list[str], carry: Path | None, by: prs.Sender
) -> list[Result]:
    upstream = repo_name(target.upstream)
    base = main / upstream
    lines = (base / "COMMIT").read_text().splitlines()
    at = dict(line.split()[:2] for line in lines[1:] if len(line.split()) >= 2)
    commits = prs.upstream_commits(target, tree, by)
    chosen = [
        (n, c) for n, c in zip(target.patches, commits) if not patterns or any(fnmatch.fnmatch(n, p) for p in patterns)
    ]
    results = []
    with tempfile.TemporaryDirectory(prefix="check-main-") as tmp:
        work = Path(tmp)
        repo = sparse_main(work, base / "files", lines[0].split()[0])
        for name, c in chosen:
            add_blobs(tree, c, repo)
            mbox_dir = work / "mbox" / Path(name).stem
            prs.format_patch(tree, c, mbox_dir)
            mbox = next(mbox_dir.glob("*.patch"))
            placement = placement_for(touched(tree, c), base / "files")
            state, detail = try_patch(repo, mbox, placement.apply_flags())
            if state != "conflicts":
                names = undefined_names(repo, [placement.path(p) for p in touched(tree, c)])
                detail = "; ".join([detail] * bool(detail) + [f"undefined after applying: {n}" for n in names])
            moved = f"{placement.old} -> {placement.new}" if placement.old else ""
            paths = [placement.path(p) for p in touched(tree, c)]
            commit = next((at[p] for p in paths if p in at), lines[0].split()[0])
            results.append(Result(target.name, name, upstream, commit, state, detail, moved))
            if carry is not None and state != "conflicts" and (moved or "3-way" in state):
                # Absolute: format-patch runs in the sparse tree, where a relative -o lands in the temporary folder.
                dest = (carry / target.name / Path(name).stem / prs.MAIN).resolve()
                shutil.rmtree(dest, ignore_errors=True)
                prs.format_patch(repo, "HEAD", dest)
    return results


def table(results: list[Result]) -> str:
    rows = ["| target | patch | main commit | result | where main moved |", "|---|---|---|---|---|"]
    for r in results:
        result = f"**{r.state}**" + (f": {r.detail}" if r.detail else "")
        rows.append(f"| {r.target} | `{r.patch}` | {r.repo} `{r.commit[:12]}` | {result} | {r.moved or '-'} |")
    return "\n".join(rows) + "\n"


BEGIN, END = "<!-- check_upstream_main: begin -->", "<!-- check_upstream_main: end -->"


def write_doc(doc: Path, results: list[Result]) -> None:
    """Replace the table between the markers of `doc` (or append it)."""
    text = doc.read_text() if doc.exists() else ""
    block = f"{BEGIN}\n{table(results)}{END}"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
    else:
        text += ("\n" if text else "") + block + "\n"
    doc.write_text(text)


def needed(targets: list[Target], trees: Path, patterns: list[str]) -> dict[str, list[str]]:
    """Per upstream repository, every path the selected patches touch, and its moved place (the tree's own
    commits: the pull requests touch the same paths)."""
    want: dict[str, set[str]] = {}
    for t in targets:
        series = gitutil.out(trees / t.name, "rev-list", "--reverse", f"{BASE_TAG}..HEAD").split()
        for name, c in zip(t.patches, series):
            if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
                continue
            for path in touched(trees / t.name, c):
                want.setdefault(repo_name(t.upstream), set()).update({path, *(m.path(path) for m in MOVES)})
    return {repo: sorted(paths) for repo, paths in want.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--patches", type=Path, help="the overlay's patches/ folder (default: this checkout's)")
    parser.add_argument("--trees", type=Path, help="the laid-out trees (default: build/trees)")
    parser.add_argument("-t", "--target", action="append", help="limit to this target; repeatable")
    parser.add_argument("--patch", action="append", default=[], metavar="GLOB", help="limit to these patches")
    parser.add_argument("--list", action="store_true", help="print the files to fetch: REPO PATH per line")
    parser.add_argument("--main", type=Path, help="the fetched files: <owner>/<repo>/{COMMIT,files/}")
    parser.add_argument("--write", type=Path, help="replace the table in this Markdown file (docs/upstream.md)")
    parser.add_argument("--carry", type=Path, help="write main-shaped mboxes under this export folder")
    args = parser.parse_args(argv)
    manifest = load_manifest(args.patches)
    trees = args.trees or places(manifest.path, None, None).trees
    targets = manifest.select(args.target)
    if args.list:
        for repo, paths in needed(targets, trees, args.patch).items():
            print("\n".join(f"{repo} {p}" for p in paths))
        return 0
    if args.main is None:
        parser.error("--main DIR is needed (or --list)")
    by = prs.sender(Path.cwd())  # the carried mboxes are what upstream receives: by their sender
    results = []
    for t in targets:
        if (args.main / repo_name(t.upstream) / "COMMIT").exists():
            results += check_target(t, trees / t.name, args.main, args.patch, args.carry, by)
    if not results:
        parser.error(f"no patch checked: {args.main} holds no <owner>/<repo>/COMMIT of a selected target")
    print(table(results), end="")
    if args.write:
        write_doc(args.write, results)
    return 1 if any(r.state == "conflicts" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
