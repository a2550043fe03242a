"""Thin wrappers over the git command line (the one diff/patch engine the tool uses)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sgl_overlay import subproc
from sgl_overlay.errors import OverlayError

# Commits the tool itself makes (the `upstream` base of a laid-out tree, patches applied
# to it) use a fixed identity and date so the same pins always give the same commit ids.
TOOL_IDENTITY = {
    "GIT_AUTHOR_NAME": "sgl-overlay",
    "GIT_AUTHOR_EMAIL": "sgl-overlay@localhost",
    "GIT_COMMITTER_NAME": "sgl-overlay",
    "GIT_COMMITTER_EMAIL": "sgl-overlay@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git(
    repo: Path | None,
    *args: str,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
    new_session: bool = False,
) -> subprocess.CompletedProcess:
    """Run git in `repo` (None: outside any repository). `new_session` shields it from the
    terminal's Ctrl-C."""
    where = f" in {repo}" if repo is not None else ""
    return subproc.run(
        ["git", *(["-C", str(repo)] if repo is not None else []), *args],
        f"git {' '.join(args[:2])}{where}",
        check=check,
        env={"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", **(env or {})},
        input=input,
        new_session=new_session,
    )


def out(repo: Path, *args: str) -> str:
    return git(repo, *args).stdout.strip()


def toplevel(path: Path) -> Path:
    if not path.exists():
        raise OverlayError(f"{path} does not exist; pass the root of a git checkout")
    proc = git(path, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise OverlayError(
            f"not a git directory: {path}; pass the root of a git checkout of "
            "sgl-project/sglang or kvcache-ai/sglang (or run `sgl-overlay fetch`)"
        )
    return Path(proc.stdout.strip())


def head(repo: Path) -> str:
    return out(repo, "rev-parse", "HEAD")


def git_dir(repo: Path) -> Path:
    return Path(out(repo, "rev-parse", "--absolute-git-dir"))


def operation_in_progress(repo: Path) -> str | None:
    """Name the half-finished git operation (am, rebase, merge, ...) if there is one."""
    gd = git_dir(repo)
    for name, what in (
        ("rebase-apply", "a `git am` or rebase"),
        ("rebase-merge", "a rebase"),
        ("MERGE_HEAD", "a merge"),
        ("CHERRY_PICK_HEAD", "a cherry-pick"),
        ("REVERT_HEAD", "a revert"),
    ):
        if (gd / name).exists():
            return what
    return None


def changed_files(repo: Path) -> list[str]:
    """Tracked paths whose working file (or staged entry) differs from HEAD, deletions included."""
    names = git(repo, "diff", "--name-only", "--no-renames", "-z", "HEAD").stdout
    return [n for n in names.split("\0") if n]


def blob_at(repo: Path, rev: str, path: str) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}:{path}", check=False)
    return proc.stdout.strip() or None


def hash_bytes(data: bytes, write_to: Path | None = None) -> str:
    """The git blob id of `data` (what `git hash-object` prints); with `write_to`, also
    stored in that repository's object store."""
    args = ["hash-object", *(["-w"] if write_to is not None else []), "--stdin"]
    return git(write_to, *args, input=data).stdout.decode().strip()


def file_blob(path: Path) -> str | None:
    """The git blob id of the file at `path`, or None when there is no file there."""
    return hash_bytes(path.read_bytes()) if path.is_file() else None


def cat_blob(repo: Path, rev: str, path: str) -> bytes | None:
    """The bytes of `path` at `rev`, or None when it is not there."""
    proc = git(repo, "cat-file", "blob", f"{rev}:{path}", check=False, input=b"")
    return proc.stdout if proc.returncode == 0 else None


def config_get(repo: Path, key: str) -> str | None:
    proc = git(repo, "config", "--get", key, check=False)
    return proc.stdout.strip() or None


def has_identity(repo: Path) -> bool:
    return bool(config_get(repo, "user.name") and config_get(repo, "user.email"))
