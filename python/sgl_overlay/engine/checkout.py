"""Which overlay targets a git checkout holds, where their files sit, and whether it is safe to write to."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sgl_overlay.engine import gitutil, records
from sgl_overlay.engine.manifest import Manifest, Target
from sgl_overlay.engine.series import Series
from sgl_overlay.errors import OverlayError


@dataclass(frozen=True)
class Placement:
    """Where a target's files sit in a checkout: where the patches say, or under a moved folder."""

    old: str = ""  # the patches' folder prefix, e.g. "sgl-kernel/"
    new: str = ""  # where this checkout has it, e.g. "python/sglang/kernels/aot/"
    why: str = ""
    upstream: str = ""  # the repository that moved it (a target's `upstream`)

    def path(self, patch_path: str) -> str:
        """A path as the patch names it -> the path in this checkout."""
        if self.old and patch_path.startswith(self.old):
            return self.new + patch_path[len(self.old) :]
        return patch_path

    def apply_flags(self) -> list[str]:
        """`git apply` / `git am` options that write the patch's files to their moved place."""
        if not self.old:
            return []
        return [f"-p{1 + self.old.count('/')}", f"--directory={self.new.rstrip('/')}"]


SAME_PLACE = Placement()
# Folders upstream moved after the pins. A target whose marker sits under the new prefix is found
# there, with its paths mapped.
MOVES = (
    Placement(
        "sgl-kernel/",
        "python/sglang/kernels/aot/",
        "sgl-project/sglang moved sgl-kernel/ to python/sglang/kernels/aot/ (2026-07-29)",
        "https://github.com/sgl-project/sglang",
    ),
)


@dataclass(frozen=True)
class Aside:
    """Why a plain command leaves a found target alone: its folder moved (`moved`), or `folder` here is the
    project's own copy (`project`: the checkout's upstream, `upstream`: the target's)."""

    moved: Placement | None = None
    folder: str = ""
    project: str = ""
    upstream: str = ""

    def line(self) -> str:
        if self.moved is not None:
            return f"{self.moved.why}; its patches map there"
        return f"{self.folder}/ here is {self.project}'s own copy, not {self.upstream}'s"


@dataclass(frozen=True)
class Checkout:
    path: Path
    targets: tuple[Target, ...]
    laid_out: bool  # a tree `sgl-overlay fetch` laid out: its commits get the tool's fixed identity (run_am)
    # Targets a plain command reports on but does not apply: name -> why (e.g. a fork's own
    # copy of sgl-kernel/). `-t NAME` makes one required again.
    optional: dict[str, Aside] = field(default_factory=dict)
    placements: dict[str, Placement] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)  # each target's patches, read once
    # The commits `apply` made here (commit -> patch label), read once; None in a tree the tool laid out, whose
    # every commit on top of its base is the tool's.
    made: dict[str, str] | None = None

    def placement(self, name: str) -> Placement:
        return self.placements.get(name, SAME_PLACE)

    @property
    def required(self) -> tuple[Target, ...]:
        return tuple(t for t in self.targets if t.name not in self.optional)


def repo_name(url: str) -> str:
    """`owner/name` of a GitHub repository URL."""
    return url.rstrip("/").removeprefix("https://github.com/")


def _find_marker(repo: Path, marker: str) -> Placement | None:
    """SAME_PLACE when `marker` is there, a moved Placement when it is under a moved folder."""
    if (repo / marker).exists():
        return SAME_PLACE
    return next(
        (moved for moved in MOVES if marker.startswith(moved.old) and (repo / moved.path(marker)).exists()), None
    )


def _project(repo: Path, manifest: Manifest) -> Target | None:
    """The project target the checkout is: its marker file first (a fork keeps upstream's
    package name in older commits), then python/pyproject.toml's name."""
    projects = [t for t in manifest.targets.values() if t.project_name]
    by_marker = [t for t in projects if t.marker and (repo / t.marker).exists()]
    if by_marker:
        return by_marker[0]
    try:
        name = tomllib.loads((repo / "python" / "pyproject.toml").read_text()).get("project", {}).get("name")
    except (FileNotFoundError, tomllib.TOMLDecodeError):
        name = None
    return next((t for t in projects if t.project_name == name), None)


def _found(repo: Path, manifest: Manifest) -> tuple[list[Target], dict[str, Aside], dict[str, Placement]]:
    """One project target plus the component targets (marker only) whose files are there.
    A component is optional when it comes from another upstream than the project (a fork's
    own copy) or sits in a moved folder (the patch was written for the old place)."""
    project = _project(repo, manifest)
    found = [project] if project else []
    optional: dict[str, Aside] = {}
    placements: dict[str, Placement] = {}
    for t in manifest.targets.values():
        if t.project_name or not t.marker:
            continue
        placed = _find_marker(repo, t.marker)
        if placed is None:
            continue
        found.append(t)
        if placed is not SAME_PLACE:
            placements[t.name] = placed
            optional[t.name] = Aside(moved=placed)
        elif project and project.upstream != t.upstream:
            folder = t.marker.split("/")[0]
            optional[t.name] = Aside(folder=folder, project=repo_name(project.upstream), upstream=repo_name(t.upstream))
    return found, optional, placements


def detect(
    path: Path, manifest: Manifest, only: list[str] | None = None, read: dict[str, Series] | None = None
) -> Checkout:
    """Find the targets in `path`: the tree marker, the project (marker file, pyproject name),
    and component targets by marker file. `only` limits to those names, all required; `read`: series
    already read this run, by target name."""
    repo = gitutil.toplevel(path)
    if gitutil.git(repo, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode != 0:
        branch = gitutil.git(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.strip()
        raise OverlayError(
            f"{repo} has no commit yet (branch {(branch or 'HEAD').removeprefix('refs/heads/')} is unborn); pass a "
            f"checkout of {gitutil.PROJECTS}, or commit its files first"
        )
    marked = gitutil.config_get(repo, "sgl-overlay.target")
    if marked:  # a tree `sgl-overlay fetch` laid out: exactly its own target
        found, optional, placements = [manifest.get(marked)], {}, {}
    else:
        found, optional, placements = _found(repo, manifest)
    if only:
        wanted = [manifest.get(n) for n in only]
        missing = [t.name for t in wanted if t not in found]
        if missing and found:
            raise OverlayError(
                f"{repo} does not hold target {missing[0]} (it holds {', '.join(t.name for t in found)})"
            )
        found = wanted if not found else [t for t in found if t in wanted]
        optional = {}
    if not found:
        if gitutil.config_get(repo, "core.sparseCheckout") == "true":
            raise OverlayError(
                f"{repo} is a sparse checkout that leaves out the files naming its project (python/pyproject.toml, "
                "sgl-kernel/); widen it with `git sparse-checkout add python sgl-kernel` (or `git sparse-checkout "
                "disable`), then try again"
            )
        raise OverlayError(
            f"unknown project in {repo}: neither python/pyproject.toml names sglang or sglang-kt nor "
            f"sgl-kernel/ is there; pass a checkout of {gitutil.PROJECTS}"
        )
    return Checkout(
        path=repo,
        targets=tuple(found),
        laid_out=bool(marked),
        optional=optional,
        placements={n: p for n, p in placements.items() if any(t.name == n for t in found)},
        series={t.name: (read or {}).get(t.name) or Series.read(t) for t in found},
        made=None if marked else records.read_commits(gitutil.common_dir(repo), repo),
    )


def uncommitted(checkout: Path, files: list[str]) -> str:
    """What a refusal of uncommitted changes says they are."""
    return f"{checkout} has uncommitted changes in {len(files)} file(s) (first: {files[0]})"


def ensure_writable(co: Checkout) -> None:
    """Refuse a read-only tree, one with a half-finished git operation or uncommitted changes."""
    if gitutil.read_only(co.path):
        raise OverlayError(
            f"{co.path} is read-only (git cannot write its objects): apply and revert cannot change it; make it "
            "writable, or work in a writable clone (`git clone` it), then try again"
        )
    branch = gitutil.git(co.path, "symbolic-ref", "-q", "HEAD", check=False).stdout.strip()
    other = next((w for w in gitutil.worktrees_on(co.path, branch) if w != co.path), None) if branch else None
    if other is not None:
        raise OverlayError(
            f"branch {branch.removeprefix('refs/heads/')} of {co.path} is also checked out in {other}: a change here "
            f"would move it under that worktree's files; switch one of them to a branch of its own (`git -C {other} "
            "switch -c NAME`), then try again"
        )
    busy = gitutil.operation_in_progress(co.path)
    if busy:
        what, ends = gitutil.GIT_OPERATIONS[busy]
        raise OverlayError(f"{co.path} has {what}; finish it or run {ends} there, then try again")
    dirty = gitutil.changed_files(co.path)
    if dirty:
        raise OverlayError(f"{uncommitted(co.path, dirty)}; commit or stash them, then try again")
    listed = gitutil.git(co.path, "ls-files", "-v", "-z").stdout.split("\0")  # tag `S`: marked --skip-worktree
    skipped = [entry[2:] for entry in listed if entry.startswith("S ") and (co.path / entry[2:]).is_file()]
    for path, blob in gitutil.worktree_blobs(co.path, skipped).items():  # through git's filters
        if blob != gitutil.blob_at(co.path, "", path):
            raise OverlayError(
                f"{path} in {co.path} is edited but marked --skip-worktree, so git shows no change there and "
                f"`git am` would stop on it; `git update-index --no-skip-worktree {path}`, commit or stash the edit, "
                "then try again"
            )


def ensure_hooks_run(co: Checkout) -> None:
    """Refuse a user's checkout whose commit-msg hook the overlay's `git am` commits would bypass."""
    if not co.laid_out:
        hook = gitutil.git_path(co.path, "hooks/commit-msg")
        if hook.is_file() and os.access(hook, os.X_OK):
            raise OverlayError(
                f"{co.path} has a commit-msg hook ({hook}) that `git am` does not run: the overlay's commits "
                f"would bypass it; to accept that, `chmod -x {hook}` for this apply and `chmod +x` it after"
            )
