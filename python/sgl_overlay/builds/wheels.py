"""Patched wheels: each pinned registry wheel with the series' post-images, under a local version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from packaging import tags
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from sgl_overlay.builds.fetch import pip_tag_args
from sgl_overlay.builds.verify import MAKE_TREES, require_verified
from sgl_overlay.engine import gitutil, scratch, subproc
from sgl_overlay.engine.checkout import Checkout, uncommitted
from sgl_overlay.engine.manifest import Kind, PinnedWheel, Target
from sgl_overlay.engine.series import Series
from sgl_overlay.engine.states import IN, series_status
from sgl_overlay.errors import OverlayError


def wheel_path_of(target: Target, tree_path: str) -> str | None:
    """Map a checkout path (python/sglang/x.py) to its wheel path (sglang/x.py); None if not shipped."""
    for wheel_top, tree_top in target.layout.items():
        if tree_path == tree_top or tree_path.startswith(tree_top + "/"):
            return wheel_top + tree_path[len(tree_top) :]
    return None


def patched_wheel_name(wheel_file: str, local_version: str) -> str:
    """The file name `wheel pack --local-version` gives the patched twin of `wheel_file`: the
    version gains the local label, the tags stay (joined per part, sorted, as `wheel pack` does)."""
    name, version, build, wheel_tags = parse_wheel_filename(wheel_file)
    labelled = Version(f"{version.public}+{local_version}")
    build_tag = f"-{build[0]}{build[1]}" if build else ""
    parts = ("interpreter", "abi", "platform")
    tagline = "-".join(".".join(sorted({getattr(t, part) for t in wheel_tags})) for part in parts)
    return f"{name.replace('-', '_')}-{labelled}{build_tag}-{tagline}.whl"


def wheel_for_python(target: Target, python: tuple[int, int]) -> PinnedWheel | None:
    """The pinned wheel pip would pick for CPython `python` on this platform (None: no wheel fits)."""
    ranked = [*tags.cpython_tags(python), *tags.compatible_tags(python, interpreter=f"cp{python[0]}{python[1]}")]
    rank = {tag: i for i, tag in enumerate(dict.fromkeys(ranked))}  # pip's preference order, without repeats
    fitting = [
        (min(rank[t] for t in wheel_tags if t in rank), pin)
        for pin in target.wheels
        if (wheel_tags := parse_wheel_filename(pin.file)[3]) & rank.keys()
    ]
    return min(fitting, key=lambda pair: pair[0])[1] if fitting else None


def python_tags(target: Target) -> list[str]:
    """The interpreter tags of the pinned wheels, e.g. ['cp311', 'cp312', 'cp313']."""
    return sorted({t.interpreter for pin in target.wheels for t in parse_wheel_filename(pin.file)[3]})


def no_wheel_fits(target: Target, python: tuple[int, int]) -> str:
    """Why no wheel of `target` can serve CPython `python` (for `wheels --print-names` and `doctor`)."""
    covered = ", ".join(python_tags(target))
    return f"no pinned {target.name} wheel fits Python {python[0]}.{python[1]}; the pins cover {covered}"


def print_names(
    targets: list[Target], cache: Path, out_dir: Path, local_version: str, python: tuple[int, int] | None = None
) -> list[list[str]]:
    """For scripts, the fields of each pinned wheel (with `python`, only the one pip picks for it): target,
    Python tag, stock wheel, patched wheel, and the pip options that install it with its own tags."""
    rows = []
    for target in targets:
        if target.kind != Kind.WHEEL:
            continue
        pins = target.wheels
        if python is not None:
            pin = wheel_for_python(target, python)
            if pin is None:
                raise OverlayError(no_wheel_fits(target, python))
            pins = (pin,)
        for pin in pins:
            tag = "-".join(sorted({t.interpreter for t in parse_wheel_filename(pin.file)[3]}))
            patched = out_dir / patched_wheel_name(pin.file, local_version)
            rows.append([target.name, tag, str(cache / pin.file), str(patched), *pip_tag_args(pin.file)])
    return rows


def _shipped(series: Series) -> list[tuple[str, str, str | None]]:
    """(checkout path, wheel path, final blob id) of each file the series changes inside the package."""
    changed = series.final_blobs().items()
    return [(path, rel, blob) for path, blob in changed if (rel := wheel_path_of(series.target, path)) is not None]


def shipped_changes(series: Series) -> dict[str, str | None]:
    """Wheel path -> final blob id (None: deleted), for each file the series changes inside the wheel."""
    return {rel: blob for _, rel, blob in _shipped(series)}


def _check_stock(series: Series, unpacked: Path, wheel_name: str) -> None:
    """Every file the series touches holds its pinned pre-image in this wheel (or is absent where
    a patch adds it), so the tree's post-images are valid for it too."""
    pinned = series.preimages()
    for path, rel, _ in _shipped(series):
        want = pinned.get(path)
        found = gitutil.file_blob(unpacked / rel)
        if found != want:
            raise OverlayError(
                f"{wheel_name}: {rel} is {f'blob {found}' if found else 'absent'}, the manifest pins "
                f"{f'blob {want}' if want else 'absent (the series adds it)'} for {path}; the series is proven on "
                "the pinned pre-images only: unpin this wheel in patches/manifest.toml or port the series to it"
            )


def build_patched_wheel(series: Series, wheel: Path, tree: Path, out_dir: Path, local_version: str) -> Path:
    """Unpack a pinned wheel, write the patched files from the verified tree, repack.

    `wheel pack` regenerates RECORD and renames the dist-info for the local version; every
    other file keeps its bytes and the wheel keeps its original tags. The tree was laid out
    from the target's first wheel; any pinned wheel whose touched files hold the same pinned
    pre-images gets the same post-image blobs.
    """
    require_verified(tree, series)
    out_dir.mkdir(parents=True, exist_ok=True)
    with scratch.folder("wheel") as tmp:
        subproc.run([sys.executable, "-m", "wheel", "unpack", "-d", tmp, wheel], f"unpacking {wheel.name}")
        (unpacked,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        _check_stock(series, unpacked, wheel.name)
        for path, rel, blob in _shipped(series):
            dest = unpacked / rel
            if blob is None:
                dest.unlink(missing_ok=True)
                continue
            data = gitutil.cat_blob(tree, "HEAD", path)
            if data is None:
                raise OverlayError(f"{tree} lacks {path} at HEAD; {MAKE_TREES}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        # Zip timestamps from the tree's last commit (patch dates): the same pins give the same bytes.
        epoch = os.environ.get("SOURCE_DATE_EPOCH") or gitutil.out(tree, "log", "-1", "--format=%at", "HEAD")
        pack = [sys.executable, "-m", "wheel", "pack", "-d", out_dir, "--local-version", local_version, unpacked]
        subproc.run(pack, f"packing the patched {wheel.name}", env={"SOURCE_DATE_EPOCH": epoch})
    return _packed(out_dir / patched_wheel_name(wheel.name, local_version))


def _packed(made: Path) -> Path:
    if not made.is_file():
        raise OverlayError(f"`wheel pack` did not write {made}; is the wheel package >= 0.46 installed?")
    return made


def build_from_checkout(co: Checkout, out_dir: Path, local_version: str) -> Path:
    """Upstream's own build of python/ as HEAD holds it (a git worktree of HEAD: only committed files), in a
    checkout whose overlay series is fully in, its version carrying the overlay's local label."""
    checkout, source = co.path, co.path / "python"
    projects = [t for t in co.required if t.layout]
    if not projects:
        names = [t.name for t in co.required]
        raise OverlayError(
            f"`wheels --checkout` builds the python/ package (sglang or sglang-kt), not {', '.join(names)}; the "
            f"kernel wheel needs CUDA: build it with `pip wheel --no-deps {checkout / 'sgl-kernel'}` on a GPU machine"
        )
    dirty = gitutil.changed_files(checkout)
    if dirty:  # pip builds the working files; the states below are HEAD's
        raise OverlayError(
            f"{uncommitted(checkout, dirty)}: `wheels --checkout` would build them, and the wheel would not be the "
            "checked series; commit or stash them, then build again (nothing was built)"
        )
    statuses = (r for t in projects for r in series_status(checkout, co.series[t.name], placement=co.placement(t.name)))
    pending = next((r for r in statuses if r.state not in IN), None)
    if pending is not None:
        raise OverlayError(
            f"{pending.patch.label} is {pending.state.value} in {checkout}; run `sgl-overlay apply --checkout "
            f"{checkout}` first"
        )
    if gitutil.read_only(checkout):
        raise OverlayError(
            f"{checkout} is read-only: `wheels --checkout` builds its HEAD in a git worktree it adds there for the "
            f"build; build from a writable clone (`git clone {checkout} DIR`)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    series = {rel: blob for t in projects for rel, blob in shipped_changes(co.series[t.name]).items()}
    mark = {"checkout": str(checkout), "commit": gitutil.head(checkout), "series": series}
    with scratch.folder("pip-wheel") as tmp:
        head = Path(tmp) / "head"  # HEAD's files as git has them: no untracked, ignored or build file of the checkout
        gitutil.git(checkout, "-c", "core.hooksPath=/dev/null", "worktree", "add", "-q", "--detach", str(head), "HEAD")
        try:
            build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp, head / "python"]
            proc = subproc.run(build, f"building {source} with upstream's build", check=False)
            if proc.returncode != 0:
                raise OverlayError(f"upstream's build of {source} failed: {_build_failure(proc)}")
            made = sorted(Path(tmp).glob("*.whl"))
            if not made:
                raise OverlayError(f"pip wheel produced no wheel from {source}")
            return _labelled(made[0], out_dir, local_version, source, mark)
        finally:
            gitutil.git(checkout, "worktree", "remove", "--force", str(head), check=False)


def _build_failure(proc: subprocess.CompletedProcess) -> str:
    """The line of a failed pip build that names its cause: the build backend's last line (pip quotes its
    output between `[N lines of output]` and `[end of output]`), not pip's summary of it."""
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    ends = [i for i, ln in enumerate(lines) if ln == "[end of output]"]
    if ends and ends[-1] > 0 and not lines[ends[-1] - 1].endswith("lines of output]"):
        return lines[ends[-1] - 1]
    generic = ("subprocess-exited-with-error", "metadata-generation-failed", "failed to build", "encountered error")
    causes = [ln for ln in lines if "error" in ln.lower() and not any(g in ln.lower() for g in generic)]
    return (causes or [subproc.failure_reason(proc)])[-1].removeprefix("ERROR: ").removeprefix("error: ")


KT_VERSION_ENV = "SGLANG_KT_VERSION"  # what the KT fork's python/setup.py reads its version from (no tags)


# What `wheels --checkout` writes into the wheel's dist-info: the checkout, its commit, the series' post-image of
# each file the series changes, and that file's blob as the wheel holds it (the checkout's), which `doctor` compares.
BUILD_MARK = "sgl_overlay_build.json"


def _labelled(wheel: Path, out_dir: Path, local_version: str, source: Path, mark: dict) -> Path:
    """`wheel` repacked into `out_dir` with the overlay's local label (unless it has one) and BUILD_MARK; refuses
    a version the build made up."""
    name, version, _, _ = parse_wheel_filename(wheel.name)
    if version.public.startswith("0.0.0"):
        setup = source / "setup.py"
        if setup.is_file() and KT_VERSION_ENV in setup.read_text(errors="replace"):
            raise OverlayError(
                f"upstream's build gave {name} version {version}: {source}/setup.py takes the version from "
                f"${KT_VERSION_ENV}, not from tags; build again with it set, e.g. `{KT_VERSION_ENV}=<the fork's "
                "version> sgl-overlay wheels --checkout ...`"
            )
        raise OverlayError(
            f"upstream's build gave {name} version {version} (its fallback when it finds no version, e.g. a clone "
            "without tags); fetch the release tags (`git fetch --tags`) and build again"
        )
    label = version.local or local_version
    with scratch.folder("relabel") as tmp:
        subproc.run([sys.executable, "-m", "wheel", "unpack", "-d", tmp, wheel], f"unpacking {wheel.name}")
        (unpacked,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        blobs = {rel: gitutil.file_blob(unpacked / rel) for rel in mark["series"]}
        (info,) = unpacked.glob("*.dist-info")
        (info / BUILD_MARK).write_text(json.dumps({**mark, "blobs": blobs}))
        relabel = [] if version.local else ["--local-version", local_version]
        pack = [sys.executable, "-m", "wheel", "pack", "-d", out_dir, *relabel, unpacked]
        subproc.run(pack, f"labelling {wheel.name} +{label}")
    return _packed(out_dir / patched_wheel_name(wheel.name, label))
