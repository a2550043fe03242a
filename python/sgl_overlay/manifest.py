"""The manifest: which upstream trees the overlay pins, and which patches it carries."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sgl_overlay.errors import OverlayError

MANIFEST_NAME = "manifest.toml"


@dataclass(frozen=True)
class PinnedWheel:
    """One registry wheel file of a target and its sha256."""

    file: str
    sha256: str


@dataclass(frozen=True)
class Target:
    """One pinned upstream tree and its patch series."""

    name: str
    kind: str  # "wheel": from a registry wheel; "patch-context": rebuilt from full-context patches
    version: str
    upstream: str
    patch_dir: Path
    patches: tuple[str, ...]
    preimages: dict[str, str]
    requirement: str = ""
    wheels: tuple[PinnedWheel, ...] = ()  # the first one is laid out as the target's tree
    commit: str = ""
    layout: dict[str, str] = field(default_factory=dict)  # wheel top-level dir -> tree path
    project_name: str = ""  # [project].name in python/pyproject.toml of a checkout
    marker: str = ""  # a file whose presence says a checkout holds this target
    full_context: bool = False

    @property
    def wheel(self) -> str:
        """The wheel `fetch` lays the tree out from (the others carry the same pure-Python files)."""
        return self.wheels[0].file if self.wheels else ""

    @property
    def sha256(self) -> str:
        return self.wheels[0].sha256 if self.wheels else ""

    def patch_paths(self) -> list[Path]:
        return [self.patch_dir / p for p in self.patches]

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def dist_name(self) -> str:
        """The distribution's canonical name on the registry (and in an environment)."""
        return canonicalize_name(self.requirement.split("==")[0].strip() or self.project_name or self.name)


@dataclass(frozen=True)
class Manifest:
    path: Path
    targets: dict[str, Target]
    local_version: str = "overlay.1"  # PEP 440 local label of patched wheels

    def get(self, name: str) -> Target:
        try:
            return self.targets[name]
        except KeyError:
            known = ", ".join(sorted(self.targets))
            raise OverlayError(f"unknown target {name!r}; known targets: {known}") from None

    def select(self, names: list[str] | None) -> list[Target]:
        return [self.get(n) for n in names] if names else list(self.targets.values())


def default_patches_dir() -> Path:
    """`--patches`, then $SGL_OVERLAY_PATCHES, then the source checkout this package sits in."""
    env = os.environ.get("SGL_OVERLAY_PATCHES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "patches"


def _pinned_wheels(path: Path, name: str, raw: dict) -> tuple[PinnedWheel, ...]:
    """`wheel` + `sha256` (one file), or `wheels = [{ file, sha256 }, ...]` (one per Python tag)."""
    if "wheel" in raw and "wheels" in raw:
        raise OverlayError(f"{path}: target {name!r} has both `wheel` and `wheels`; keep one (see docs/DESIGN.md)")
    if "wheels" in raw:
        entries = raw["wheels"]
    elif "wheel" in raw:
        entries = [{"file": raw["wheel"], "sha256": raw.get("sha256", "")}]
    else:
        entries = []
    pins = []
    for entry in entries:
        try:
            pin = PinnedWheel(file=entry["file"], sha256=entry["sha256"])
            _, version, _, _ = parse_wheel_filename(pin.file)
        except KeyError as exc:
            raise OverlayError(f"{path}: a wheel of target {name!r} lacks key {exc}; see docs/DESIGN.md") from None
        except InvalidWheelFilename as exc:
            raise OverlayError(f"{path}: target {name!r}: {exc}") from None
        if version != Version(str(raw["version"])):
            raise OverlayError(f"{path}: target {name!r} is version {raw['version']}, its wheel {pin.file} is "
                               f"{version}; pin the wheel of version {raw['version']}")
        pins.append(pin)
    if raw.get("kind") == "wheel" and not pins:
        raise OverlayError(f"{path}: target {name!r} is of kind wheel but pins none; add `wheels` (see docs/DESIGN.md)")
    if len({p.file for p in pins}) != len(pins):
        raise OverlayError(f"{path}: target {name!r} pins one wheel file twice")
    return tuple(pins)


def load_manifest(patches_dir: Path | None = None) -> Manifest:
    patches_dir = (patches_dir or default_patches_dir()).resolve()
    path = patches_dir / MANIFEST_NAME
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise OverlayError(
            f"no manifest at {path}; pass --patches DIR pointing at the overlay's patches/ folder"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise OverlayError(f"{path} is not valid TOML ({exc}); restore it with `git checkout -- {path}`") from None
    targets = {}
    for name, raw in data.get("targets", {}).items():
        try:
            targets[name] = Target(
                name=name,
                kind=raw["kind"],
                version=str(raw["version"]),
                upstream=raw["upstream"],
                patch_dir=patches_dir / name,
                patches=tuple(raw.get("patches", [])),
                preimages=dict(raw.get("preimages", {})),
                requirement=raw.get("requirement", ""),
                wheels=_pinned_wheels(path, name, raw),
                commit=raw.get("commit", ""),
                layout=dict(raw.get("layout", {})),
                project_name=raw.get("project_name", ""),
                marker=raw.get("marker", ""),
                full_context=raw.get("context", "") == "full",
            )
        except KeyError as exc:
            raise OverlayError(f"{path}: target {name!r} lacks key {exc}; see docs/DESIGN.md") from None
    return Manifest(path=path, targets=targets, local_version=data.get("local_version", "overlay.1"))
