"""(Maintainers) write a laid-out tree's overlay commits back to patches/<target>/."""

from __future__ import annotations

from pathlib import Path

from sgl_overlay.builds.tree import BASE_TAG, base_commit, require_ready
from sgl_overlay.engine import gitutil, scratch
from sgl_overlay.engine.manifest import Target
from sgl_overlay.engine.series import (
    BUG,
    DROP_WHEN,
    FORWARDED,
    FULL_CONTEXT,
    NO_AUTHOR_EMAIL,
    NO_AUTHOR_NAME,
    NOT_YET,
    ORIGIN,
    TRAILERS,
    mail_parts,
)
from sgl_overlay.errors import OverlayError


def _as_laid_out(tree: Path) -> str:
    """The commits on `upstream` rebuilt as `apply` makes them in a laid-out tree (no author: NO_AUTHOR, the
    author date and message kept, the tool's committer, dated as authored), so that the exported series lays out
    again to the same commits: the new tip (HEAD when nothing differs). Only objects are written; the caller
    moves HEAD."""
    committer = {k: v for k, v in gitutil.TOOL_IDENTITY.items() if k in ("GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")}
    parent = gitutil.out(tree, "rev-parse", f"{BASE_TAG}^{{commit}}")
    for commit in gitutil.out(tree, "rev-list", "--reverse", f"{BASE_TAG}..HEAD").split():
        date = gitutil.out(tree, "log", "-1", "--format=%ad", "--date=raw", commit)
        raw = gitutil.git(tree, "cat-file", "commit", commit, input=b"").stdout
        env = {
            **committer,
            "GIT_AUTHOR_NAME": NO_AUTHOR_NAME,
            "GIT_AUTHOR_EMAIL": NO_AUTHOR_EMAIL,
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_DATE": date,
        }
        message = raw.split(b"\n\n", 1)[1]
        parent = gitutil.out_bytes(tree, "commit-tree", f"{commit}^{{tree}}", "-p", parent, env=env, input=message)
    return parent


def export_series(target: Target, tree: Path) -> list[tuple[Path, bool]]:
    """Write the tree's commits on `upstream` as the target's patch files: each one written, and whether it changed.

    Every file is the mbox `git format-patch` writes (full blob ids; full context for sgl-kernel), by no author,
    ending with the `base-commit:` of the series (tree.base_commit), as `--base` writes it."""
    require_ready(tree, target, "`sgl-overlay fetch` and `apply`")
    with scratch.folder("export") as tmp:
        head, tip = gitutil.head(tree), _as_laid_out(tree)
        args = ["format-patch", "-q", "--full-index", "--no-signature", "-o", tmp]
        if target.full_context:
            args.append(FULL_CONTEXT)
        gitutil.git(tree, *args, f"{BASE_TAG}..{tip}")
        made = sorted(Path(tmp).glob("*.patch"))
        names = [p.name for p in made]
        if names != list(target.patches):
            raise OverlayError(
                f"the {target.name} tree's commits export as {names}, the manifest lists {list(target.patches)}; "
                "update `patches` in patches/manifest.toml"
            )
        base = f"\nbase-commit: {base_commit(target, tree)}\n".encode()
        datas = [p.read_bytes() + base for p in made]
        for p, data in zip(made, datas):
            _, trailers, _ = mail_parts(data.decode("utf-8"))
            missing = [k for k in TRAILERS if k not in dict(trailers)]
            if missing:
                raise OverlayError(
                    f"{target.name}: the message of {p.name} has no `{missing[0]}:` trailer; end it with "
                    f"`{ORIGIN}: vendor` (or `other, <pull request URL>`, `backport, <what it ports>`), "
                    f"`{BUG}: <issue URL>`, `{FORWARDED}: <pull request URL>` (`{NOT_YET}` where there is none) and "
                    f"`{DROP_WHEN}: <the upstream change or release that makes it unneeded>` (`git rebase -i "
                    f"{BASE_TAG}`, reword), then export again"
                )
        if tip != head:  # same trees: the index and the working files still match HEAD
            gitutil.git(tree, "update-ref", "-m", "sgl-overlay export", "HEAD", tip, head)
        target.patch_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for p, data in zip(made, datas):
            dest = target.patch_dir / p.name
            changed = not dest.exists() or dest.read_bytes() != data
            dest.write_bytes(data)
            written.append((dest, changed))
    return written


def lines(written: list[tuple[Path, bool]]) -> list[str]:
    return [f"{'wrote' if changed else 'unchanged'} {dest}" for dest, changed in written]
