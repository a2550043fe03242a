"""Thin wrappers over the git command line (the one diff/patch engine the tool uses)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
from pathlib import Path

from sgl_overlay.engine import scratch, subproc
from sgl_overlay.errors import OverlayError

PROJECTS = "sgl-project/sglang or kvcache-ai/sglang"  # the upstreams a checkout is of, as a message names them

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


_PRIVATE: dict[Path | None, dict[str, str]] = {}  # object_env of each checkout, once known


def git(
    repo: Path | None,
    *args: str,
    check: bool = True,
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
) -> subprocess.CompletedProcess:
    """Run git in `repo` (None: outside any repository), in the clean environment subproc gives."""
    where = f" in {repo}" if repo is not None else ""
    if repo in _PRIVATE:  # a read-only checkout: its new objects go to this run's private store
        env = {**_PRIVATE[repo], **(env or {})}
    return subproc.run(
        ["git", *(["-C", str(repo)] if repo is not None else []), *args],
        f"git {' '.join(args[:2])}{where}",
        check=check,
        env={"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", **(env or {})},
        input=input,
    )


def out(repo: Path, *args: str) -> str:
    return git(repo, *args).stdout.strip()


def out_bytes(repo: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None) -> str:
    """`out` for a command fed bytes on stdin (a commit message, kept byte for byte)."""
    return git(repo, *args, env=env, input=input).stdout.decode().strip()


def toplevel(path: Path) -> Path:
    if not path.exists():
        raise OverlayError(f"{path} does not exist; pass the root of a git checkout")
    # --show-toplevel fails outside a working tree; --show-cdup (`../..`) is the top without bytes to decode
    proc = git(path, "rev-parse", "--show-toplevel", "--show-cdup", check=False)
    if proc.returncode != 0:
        ensure_git_runs()
        if "dubious ownership" in proc.stderr:  # another user owns it: git refuses to read it
            raise OverlayError(
                f'git refuses {path}: another user owns it (git\'s "dubious ownership" check); run the tool as its '
                f"owner, or trust it with `git config --global --add safe.directory {path}`"
            )
        if git(path, "rev-parse", "--is-bare-repository", check=False).stdout.strip() == "true":
            raise OverlayError(
                f"{path} is a bare repository (no working tree to patch); pass a checkout of it: "
                f"`git clone {path} DIR`, then `--checkout DIR`"
            )
        dot_git = path / ".git"
        if dot_git.is_file():  # a worktree's or submodule's pointer to its git directory
            line = dot_git.read_text(errors="replace").strip().splitlines()[:1] or [""]
            raise OverlayError(
                f"{dot_git} says `{line[0]}`, which is no git directory git can use; fix that line (`git worktree "
                "repair` for a moved worktree), or clone the repository again"
            )
        raise OverlayError(
            f"not a git directory: {path}; pass the root of a git checkout of {PROJECTS} (or run `sgl-overlay fetch`)"
        )
    return (path / proc.stdout.split("\n")[1]).resolve()


def ensure_git_runs() -> None:
    """Refuse a `git` on PATH that does not run (a broken wrapper, a wrong binary)."""
    proc = git(None, "--version", check=False)
    if proc.returncode != 0 or not proc.stdout.startswith("git version"):
        found = shutil.which("git") or "git"
        raise OverlayError(
            f"{found} does not work as git (`git --version`: {subproc.failure_reason(proc)}); put a working git "
            "first on PATH"
        )


def head(repo: Path) -> str:
    return out(repo, "rev-parse", "HEAD")


def git_dir(repo: Path) -> Path:
    return Path(out(repo, "rev-parse", "--absolute-git-dir"))


def git_path(repo: Path, name: str) -> Path:
    """Where git keeps `name` for this checkout (`hooks/commit-msg` honours core.hooksPath)."""
    return (repo / out(repo, "rev-parse", "--git-path", name)).resolve()


# The files git keeps while an operation is half-finished (`git am` before the rebase that shares its folder):
# what each says is in progress, and the command that ends it.
GIT_OPERATIONS = {
    "rebase-apply/applying": ("a `git am` in progress (half-applied series?)", "`git am --abort`"),
    "rebase-apply": ("a rebase in progress", "`git rebase --abort`"),
    "rebase-merge": ("a rebase in progress", "`git rebase --abort`"),
    "MERGE_HEAD": ("a merge in progress", "`git merge --abort`"),
    "CHERRY_PICK_HEAD": ("a cherry-pick in progress", "`git cherry-pick --abort`"),
    "REVERT_HEAD": ("a revert in progress", "`git revert --abort`"),
    "BISECT_LOG": (
        "a bisect in progress (its next `git bisect good/bad` would judge the overlay's commits)",
        "`git bisect reset`",
    ),
}


def operation_in_progress(repo: Path) -> str | None:
    """The file of the half-finished git operation (GIT_OPERATIONS), or None."""
    gd = git_dir(repo)
    return next((name for name in GIT_OPERATIONS if (gd / name).exists()), None)


def worktrees_on(repo: Path, branch: str) -> list[Path]:
    """The worktrees of `repo`'s repository that have `branch` checked out (those whose folder is gone aside)."""
    found, path = [], None
    for line in out(repo, "worktree", "list", "--porcelain").splitlines():
        key, _, value = line.partition(" ")
        if key == "worktree":
            path = Path(value)
        elif key == "branch" and value == branch and path is not None and path.exists():
            found.append(path)
    return found


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


def worktree_blobs(repo: Path, paths: list[str]) -> dict[str, str]:
    """The blob id each of `paths` (files in the working tree) would get from `git add`: hashed through git's
    filters for that path (core.autocrlf, .gitattributes `eol`, clean filters), as `git diff` compares."""
    if not paths:
        return {}
    listed = "".join(f"{p}\n" for p in paths)
    ids = git(repo, "hash-object", "--stdin-paths", input=listed).stdout.split()
    return dict(zip(paths, ids))


def read_only(repo: Path) -> bool:
    """git cannot write objects in `repo` (a read-only mount or folder)."""
    return not os.access(common_dir(repo) / "objects", os.W_OK)


def object_env(repo: Path) -> dict[str, str]:
    """For a read-only checkout, git's environment that writes new objects (a 3-way merge's, a tree of the
    working files) into a private store of this run, reading the checkout's through it; {} otherwise."""
    if repo not in _PRIVATE:
        env: dict[str, str] = {}
        if read_only(repo):
            store = scratch.mkdtemp("objects")
            atexit.register(shutil.rmtree, store, True)
            env = {"GIT_OBJECT_DIRECTORY": store, "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common_dir(repo) / "objects")}
        _PRIVATE[repo] = env
    return _PRIVATE[repo]


def common_dir(repo: Path) -> Path:
    """The git directory the worktrees of `repo` share (objects, refs, packed-refs)."""
    return Path(out(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def cat_blob(repo: Path, rev: str, path: str) -> bytes | None:
    """The bytes of `path` at `rev`, or None when it is not there."""
    proc = git(repo, "cat-file", "blob", f"{rev}:{path}", check=False, input=b"")
    return proc.stdout if proc.returncode == 0 else None


def config_get(repo: Path, key: str) -> str | None:
    proc = git(repo, "config", "--get", key, check=False)
    return proc.stdout.strip() or None


def has_identity(repo: Path) -> bool:
    return bool(config_get(repo, "user.name") and config_get(repo, "user.email"))
