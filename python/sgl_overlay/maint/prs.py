"""The pull requests upstream would receive: each patch of a series as a normal-context `git format-patch`
mbox by its sender (the git identity of the checkout `prs` runs in), without the overlay's trailers and
`base-commit:`, beside its description `PR.md` (the patch's `<stem>.pr.md`, checked against the sections of
upstream's pull-request template), or `REVIEW.md` where the patch is a review of another author's open pull
request (`Origin: other, <its URL>`: what to change there, the mbox being the change proposed); where upstream
main moved the patch's folder (checkout.MOVES), the same mbox at the new place under `main/`. A port
(`Origin: backport, ...`) is no pull request: it is listed, nothing written."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from sgl_overlay.builds.tree import BASE_TAG, require_ready
from sgl_overlay.builds.verify import require_verified
from sgl_overlay.engine import gitutil, scratch
from sgl_overlay.engine.checkout import MOVES, Placement, repo_name
from sgl_overlay.engine.manifest import Target
from sgl_overlay.engine.series import BUG, TRAILERS, Kind, Patch, Series
from sgl_overlay.errors import OverlayError

UPSTREAM_CONTEXT = "-U3"  # what upstream reviews: the stored sgl-kernel series carries whole files
DESCRIPTION = ".pr.md"  # patches/<target>/<patch stem>.pr.md
MAIN = "main"  # beside a PR's mbox: the same commit at the folder upstream main moved its files to
# The `## ` sections of each upstream's .github/pull_request_template.md (newest stored: sgl-project/sglang's
# since mid-2026, as its PRs of that time show; kvcache-ai/sglang's at 04653fa8), its checklist left to the form.
SECTIONS = {
    "https://github.com/sgl-project/sglang": (
        "Motivation",
        "Modifications",
        "Accuracy Tests",
        "Speed Tests and Profiling",
    ),
    "https://github.com/kvcache-ai/sglang": (
        "Motivation",
        "Modifications",
        "Accuracy Tests",
        "Benchmarking and Profiling",
    ),
}
TITLE = re.compile(r"# \[[^\]\n]+\] \S.*")
# The description of a review of an open upstream pull request (its patch's `Origin: other, <URL>`): `# Review
# of <what it proposes>`, then these sections (a review comment has no template upstream).
REVIEW_TITLE = re.compile(r"# Review of \S.*")
REVIEW_SECTIONS = ("What to change", "Why", "Tests", "Numbers")
REVIEW = "REVIEW.md"  # what `prs` writes for a review, in place of PR.md
_HEADING = re.compile(r"^## (.+?)\s*$", re.M)
_ISSUE = re.compile(r"https://github\.com/([\w.-]+/[\w.-]+)/(?:issues|pull)/(\d+)")


@dataclass(frozen=True)
class Sender:
    """Who sends the pull requests: the author and committer of every mbox `prs` writes."""

    name: str
    email: str


def sender(where: Path) -> Sender:
    """git's user.name and user.email as a commit made in `where` would take them (its own config, the user's,
    the system's); refused, naming the first one missing, where either is unset."""
    found = {key: gitutil.config_get(where, key) for key in ("user.name", "user.email")}
    missing = [key for key, value in found.items() if not value]
    if missing:
        raise OverlayError(
            f"`sgl-overlay prs` writes each pull request as you, and git has no {missing[0]} in {where}; set it "
            f"(`git config --global {missing[0]} ...`, or in that checkout), then run it again"
        )
    return Sender(found["user.name"] or "", found["user.email"] or "")


@dataclass(frozen=True)
class PullRequest:
    """One exported pull request: the series patch it comes from and what its normal-context mbox changes."""

    target: str
    patch: str
    title: str
    files: tuple[str, ...]
    added: int
    removed: int
    forwarded: str  # the open upstream pull request ("" while there is none)
    folder: Path
    reviews: tuple[str, int] | None = None  # (owner/repo, number) of the pull request a review is of


@dataclass(frozen=True)
class Port:
    """A patch of the series that carries an upstream change (`Origin: backport, <source>`): no pull request."""

    target: str
    patch: str
    source: str
    drop_when: str


@dataclass(frozen=True)
class Description:
    """A patch's checked `.pr.md`: its text, and the pull request it reviews (None: it opens its own)."""

    text: str
    reviews: tuple[str, int] | None = None


def description_of(target: Target, patch_name: str) -> Path:
    return target.patch_dir / (Path(patch_name).stem + DESCRIPTION)


def sections_of(target: Target) -> tuple[str, ...]:
    return SECTIONS.get(target.upstream.rstrip("/"), SECTIONS["https://github.com/sgl-project/sglang"])


def check_description(target: Target, patch: Patch) -> Description:
    """The patch's description, refused when it is missing or not in the shape of upstream's template (or, for
    a review, `Origin: other, <pull request URL>`, of a review)."""
    path = description_of(target, patch.path.name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OverlayError(
            f"no pull-request description {path} for {patch.label}; write it (`# [Area] Title`, then the sections "
            "of upstream's template), then run `sgl-overlay prs` again"
        ) from None
    first = text.partition("\n")[0]
    own = repo_name(target.upstream)
    kind, source = patch.origin()
    review = kind is Kind.REVIEW
    if not (REVIEW_TITLE if review else TITLE).fullmatch(first):
        shape = (
            "a review's title; write it as `# Review of <what it proposes>`"
            if review
            else ("a pull-request title; write it as `# [Area] Title`")
        )
        raise OverlayError(f"{path}: first line {first!r} is not {shape}")
    want, found = REVIEW_SECTIONS if review else sections_of(target), tuple(_HEADING.findall(text))
    if found != want:
        shape = "a review" if review else "upstream's template"
        raise OverlayError(
            f"{path} has the sections {list(found)}, {shape} has {list(want)}; use exactly those `## ` headings, in "
            "that order"
        )
    bodies = _HEADING.split(text)[2::2]
    empty = [name for name, body in zip(want, bodies) if not body.strip()]
    if empty:
        raise OverlayError(f"{path}: section `## {empty[0]}` is empty; say what it asks for")
    bug = patch.trailer(BUG)
    m = _ISSUE.fullmatch(bug)
    if m and not _links(text, m.group(1), m.group(2), own, bug, review):
        name = "#" + bug.rsplit("/", 1)[1] if m.group(1) == own else bug
        add = f"`{name}` to `## Why`" if review else f"`Fixes {name}` to `## Motivation`"
        raise OverlayError(f"{path} does not name the issue its patch fixes ({bug}); add {add}")
    pull = _ISSUE.fullmatch(source)
    return Description(text, (pull.group(1), int(pull.group(2))) if pull else None)


def _links(text: str, repo: str, number: str, own: str, url: str, review: bool) -> bool:
    """The description names the issue: its URL, `Fixes #N` in its own repository, or `Fixes owner/repo#N`; a
    review (which fixes nothing itself) `#N` or `owner/repo#N` alone."""
    short = rf"#{number}" if repo == own else rf"{re.escape(repo)}#{number}"
    verb = r"(?:\b(?:Fixes|Closes|Resolves) |(?<![\w/#]))" if review else r"\b(?:Fixes|Closes|Resolves) "
    return url in text or re.search(rf"{verb}{short}\b", text) is not None


def strip_trailers(message: bytes) -> bytes:
    """A commit message without the overlay's `Origin:` / `Bug:` / `Forwarded:` / `Drop-when:` lines (nor a
    closing paragraph they leave empty)."""
    paragraphs = message.decode("utf-8").rstrip("\n").split("\n\n")
    if len(paragraphs) > 1:
        last = [
            line for line in paragraphs.pop().splitlines() if not line.startswith(tuple(f"{k}: " for k in TRAILERS))
        ]
        paragraphs += ["\n".join(last)] if last else []
    return ("\n\n".join(paragraphs) + "\n").encode()


def upstream_commits(target: Target, tree: Path, by: Sender) -> list[str]:
    """The series of a verified laid-out tree as new commits (objects only) with upstream's messages, authored
    and committed `by` the sender: each tree and its dates kept, the overlay's trailers dropped. In series
    order."""
    require_ready(tree, target, "`sgl-overlay fetch` and `apply`")
    require_verified(tree, Series.read(target))
    parent = gitutil.out(tree, "rev-parse", f"{BASE_TAG}^{{commit}}")
    made = []
    for commit in gitutil.out(tree, "rev-list", "--reverse", f"{BASE_TAG}..HEAD").split():
        ad, cd = gitutil.out(tree, "log", "-1", "--format=%ad%x00%cd", "--date=raw", commit).split("\0")
        env = {
            "GIT_AUTHOR_NAME": by.name,
            "GIT_AUTHOR_EMAIL": by.email,
            "GIT_AUTHOR_DATE": ad,
            "GIT_COMMITTER_NAME": by.name,
            "GIT_COMMITTER_EMAIL": by.email,
            "GIT_COMMITTER_DATE": cd,
        }
        raw = gitutil.git(tree, "cat-file", "commit", commit, input=b"").stdout
        message = strip_trailers(raw.split(b"\n\n", 1)[1])
        parent = gitutil.out_bytes(tree, "commit-tree", f"{commit}^{{tree}}", "-p", parent, env=env, input=message)
        made.append(parent)
    return made


def _numstat(tree: Path, commit: str) -> tuple[tuple[str, ...], int, int]:
    rows = [line.split("\t") for line in gitutil.out(tree, "diff", "--numstat", f"{commit}~1", commit).splitlines()]
    return tuple(r[2] for r in rows), sum(int(r[0]) for r in rows), sum(int(r[1]) for r in rows)


def moved_on_main(target: Target, paths: tuple[str, ...]) -> Placement | None:
    """The folder move of the target's upstream that holds every path of a patch, if any."""
    for moved in MOVES:
        if moved.upstream == target.upstream.rstrip("/") and all(p.startswith(moved.old) for p in paths):
            return moved
    return None


def format_patch(tree: Path, commit: str, folder: Path, moved: Placement | None = None) -> None:
    """`git format-patch -U3` of one commit into `folder`; with `moved`, its paths at the moved folder."""
    args = ["format-patch", "-q", UPSTREAM_CONTEXT, "--no-signature", "-o", str(folder)]
    if moved is not None:
        args += [f"--relative={moved.old}", f"--src-prefix=a/{moved.new}", f"--dst-prefix=b/{moved.new}"]
    gitutil.git(tree, *args, "-1", commit)


def _forwarded(url: str) -> str:
    """The line PR.md carries under its title where the pull request is open upstream (PR.md's text, not a
    line the tool prints)."""
    return f"Forwarded upstream as {url}."


def pr_text(description: str, forwarded: str) -> str:
    """PR.md (REVIEW.md): the description, with where it was sent upstream named under its title."""
    if not forwarded:
        return description
    title, _, rest = description.partition("\n")
    return f"{title}\n\n{_forwarded(forwarded)}\n{rest}"


def export_prs(targets: list[Target], trees: Path, out: Path, by: Sender) -> list[PullRequest | Port]:
    """Write `out/<target>/<patch stem>/` per patch but a port: its `-U3` mbox by the sender, PR.md (REVIEW.md for
    a review) and, where main moved its folder, the mbox at the new place in `main/`. Every description is checked
    and every tree verified before anything is written; each target's folder is replaced whole."""
    descriptions: dict[tuple[str, str], tuple[Description, str] | Port] = {}
    for target in targets:
        for patch in Series.read(target).patches:
            kind, source = patch.origin()
            descriptions[target.name, patch.path.name] = (
                Port(target.name, patch.path.name, source, patch.drop_when)
                if kind is Kind.PORT
                else (check_description(target, patch), patch.forwarded)
            )
    commits = {t.name: upstream_commits(t, trees / t.name, by) for t in targets}
    made: list[PullRequest | Port] = []
    with scratch.folder("prs") as tmp:
        for target in targets:
            tree = trees / target.name
            (Path(tmp) / target.name).mkdir(parents=True)
            for name, commit in zip(target.patches, commits[target.name]):
                entry = descriptions[target.name, name]
                if isinstance(entry, Port):
                    made.append(entry)
                    continue
                folder = Path(tmp) / target.name / Path(name).stem
                gitutil.git(
                    tree, "format-patch", "-q", UPSTREAM_CONTEXT, "--no-signature", "-o", str(folder), "-1", commit
                )
                described, forwarded = entry
                body = pr_text(described.text, forwarded)
                (folder / (REVIEW if described.reviews else "PR.md")).write_text(body, encoding="utf-8")
                files, added, removed = _numstat(tree, commit)
                title = described.text.partition("\n")[0].removeprefix("# ")
                dest = out / target.name / folder.name
                made.append(
                    PullRequest(target.name, name, title, files, added, removed, forwarded, dest, described.reviews)
                )
        out.mkdir(parents=True, exist_ok=True)
        for target in targets:
            shutil.rmtree(out / target.name, ignore_errors=True)
            shutil.move(Path(tmp) / target.name, out / target.name)
    return made


def lines(made: list[PullRequest | Port]) -> list[str]:
    """One line per exported pull request (or review): its folder, title, files and lines at normal context, and
    for a review the command that posts it; one per port: what it carries and when it goes."""
    result = []
    for pr in made:
        if isinstance(pr, Port):
            result.append(
                f"port {pr.target}/{pr.patch}: carries {pr.source}, no pull request; drop when: {pr.drop_when}"
            )
            continue
        line = f"wrote {pr.folder}/: {pr.title} ({len(pr.files)} file(s), +{pr.added} -{pr.removed})"
        if pr.forwarded:
            line += f"; {'sent' if pr.reviews else 'open'} upstream as {pr.forwarded}"
        elif pr.reviews:
            repo, number = pr.reviews
            line += (
                f"; post it on {repo}#{number} with `gh pr review {number} --repo {repo} --comment --body-file "
                f"{pr.folder}/REVIEW.md` (the mbox beside it: the change it proposes)"
            )
        result.append(line)
    return result
