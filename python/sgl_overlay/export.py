"""(Maintainers) write a laid-out tree's overlay commits back to patches/<target>/."""

from __future__ import annotations

from pathlib import Path

from sgl_overlay import gitutil, scratch
from sgl_overlay.errors import OverlayError
from sgl_overlay.manifest import Target
from sgl_overlay.series import BUG, FORWARDED, FULL_CONTEXT, NOT_YET, mail_parts
from sgl_overlay.tree import BASE_TAG, base_commit, is_ready


def _as_laid_out(tree: Path, identity: str) -> str:
    """The commits on `upstream` rebuilt as `apply` makes them in a laid-out tree (author `identity`, or each
    commit's own when it is "", author date and message kept, the tool's committer, dated as authored), so
    that the exported series lays out again to the same commits: the new tip (HEAD when nothing differs).
    Only objects are written; the caller moves HEAD."""
    name, _, email = identity.partition(" <")
    committer = {k: v for k, v in gitutil.TOOL_IDENTITY.items() if k in ("GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")}
    parent = gitutil.out(tree, "rev-parse", f"{BASE_TAG}^{{commit}}")
    for commit in gitutil.out(tree, "rev-list", "--reverse", f"{BASE_TAG}..HEAD").split():
        fields = gitutil.out(tree, "log", "-1", "--format=%an%x00%ae%x00%ad", "--date=raw", commit).split("\0")
        raw = gitutil.git(tree, "cat-file", "commit", commit, input=b"").stdout
        env = {
            **committer,
            "GIT_AUTHOR_NAME": name if identity else fields[0],
            "GIT_AUTHOR_EMAIL": email.removesuffix(">") if identity else fields[1],
            "GIT_AUTHOR_DATE": fields[2],
            "GIT_COMMITTER_DATE": fields[2],
        }
        message = raw.split(b"\n\n", 1)[1]
        parent = gitutil.out_bytes(tree, "commit-tree", f"{commit}^{{tree}}", "-p", parent, env=env, input=message)
    return parent


def export_series(target: Target, tree: Path, identity: str = "") -> list[tuple[Path, bool]]:
    """Write the tree's commits on `upstream` as the target's patch files: each one written, and whether it changed.

    Every file is the mbox `git format-patch` writes (full blob ids; full context for sgl-kernel) by `identity`,
    ending with the `base-commit:` of the series (tree.base_commit), as `--base` writes it."""
    if not is_ready(tree, target):
        raise OverlayError(f"no tree for {target.name} at {tree}; run `sgl-overlay fetch` and `apply` first")
    with scratch.folder("export") as tmp:
        head, tip = gitutil.head(tree), _as_laid_out(tree, identity)
        args = ["format-patch", "-q", "--full-index", "--no-signature", "-o", tmp]
        if target.full_context:
            args.append(FULL_CONTEXT)
        gitutil.git(tree, *args, f"{BASE_TAG}..{tip}")
        made = sorted(Path(tmp).glob("*.patch"))
        names = [p.name for p in made]
        if names != list(target.patches):
            raise OverlayError(
                f"the {target.name} tree's commits export as {names}, the manifest lists "
                f"{list(target.patches)}; update `patches` in patches/manifest.toml"
            )
        base = f"\nbase-commit: {base_commit(target, tree)}\n".encode()
        datas = [p.read_bytes() + base for p in made]
        for p, data in zip(made, datas):
            _, trailers, _ = mail_parts(data.decode("utf-8"))
            missing = [k for k in (BUG, FORWARDED) if k not in dict(trailers)]
            if missing:
                raise OverlayError(
                    f"{target.name}: the message of {p.name} has no `{missing[0]}:` trailer; end it with "
                    f"`{BUG}: <issue URL>` and `{FORWARDED}: <pull request URL>` (`{NOT_YET}` where there is none: "
                    f"`git rebase -i {BASE_TAG}`, reword), then export again"
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
