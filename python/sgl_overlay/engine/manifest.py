"""The manifest (patches/manifest.toml), read and validated in one place: targets, pinned
wheels, patch series, `[matrix]` ranges and per-version variants, as typed values."""

from __future__ import annotations

import os
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sgl_overlay.errors import OverlayError, UsageError

MANIFEST_NAME = "manifest.toml"
SCHEMA = 1
SEE_DESIGN = "see docs/DESIGN.md"


class Kind(StrEnum):
    WHEEL = "wheel"  # laid out from a registry wheel
    PATCH_CONTEXT = "patch-context"  # rebuilt from full-context patches (no registry source)


@dataclass(frozen=True)
class PinnedWheel:
    """One registry wheel file of a target and its sha256."""

    file: str
    sha256: str


@dataclass(frozen=True)
class Variant:
    """A port of one series patch for the versions where the original conflicts."""

    patch: str  # the series patch it stands in for (name in `patches`)
    file: str  # the variant's patch file, relative to patches/<target>/
    versions: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True)
class MatrixSpec:
    """`[targets.<t>.matrix]`: the versions `sgl-overlay matrix` tries and how it runs the tests."""

    versions: tuple[str, ...]
    variants: tuple[Variant, ...] = ()
    venv: str = ""  # interpreter folder for the patches' tests, relative to the repo root
    run_tests: bool = True
    no_tests_reason: str = ""
    # CPU stand-ins for native pieces the patches' tests need (as the project's own tests use them):
    pythonpath: tuple[str, ...] = ()  # extra PYTHONPATH entries after <tree>/python, relative to the repo root
    pytest_args: tuple[str, ...] = ()  # e.g. ("-p", "kt_cpu_stubs")

    def variant_for(self, patch: str, version: str) -> Variant | None:
        found = [v for v in self.variants if v.patch == patch and version in v.versions]
        if len(found) > 1:
            raise OverlayError(f"{patch}: several variants claim version {version}: {[v.file for v in found]}")
        return found[0] if found else None


@dataclass(frozen=True)
class Target:
    """One pinned upstream tree and its patch series."""

    name: str
    kind: Kind
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
    matrix: MatrixSpec = MatrixSpec(versions=())
    # `[targets.<t>.applied_upstream]`: patch -> the upstream version, commit or URL that has it.
    applied_upstream: dict[str, str] = field(default_factory=dict)

    @property
    def wheel(self) -> str:
        """The wheel `fetch` lays the tree out from (the others carry the same pure-Python files)."""
        return self.wheels[0].file if self.wheels else ""

    def lays_out(self, path: str) -> bool:
        """Whether the pinned tree can hold `path`: a wheel only its packages (no tests), a patch-context
        target every file its patches name."""
        return self.kind != Kind.WHEEL or any(path.startswith(dest.rstrip("/") + "/") for dest in self.layout.values())

    def patch_paths(self) -> list[Path]:
        return [self.patch_dir / p for p in self.patches]

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def pinned(self) -> str:
        """What the pin is called: the release version, or the commit for a target without releases."""
        return self.version if self.kind == Kind.WHEEL else self.commit[:12]

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
        if name not in self.targets:
            raise UsageError(f"unknown target {name!r}; known targets: {', '.join(sorted(self.targets))}")
        return self.targets[name]

    def select(self, names: list[str] | None) -> list[Target]:
        return [self.get(n) for n in names] if names else list(self.targets.values())


def default_patches_dir() -> Path:
    """`--patches`, then $SGL_OVERLAY_PATCHES, then the `patches/` folder in this package.

    In a source checkout that folder is a symlink to the checkout's `patches/` (so an editable install
    reads the series being edited); a built wheel carries a copy of it as package data."""
    return Path(os.environ.get("SGL_OVERLAY_PATCHES") or Path(__file__).resolve().parents[1] / "patches")


def _pinned_wheels(where: str, raw: dict, kind: Kind) -> tuple[PinnedWheel, ...]:
    """`wheel` + `sha256` (one file), or `wheels = [{ file, sha256 }, ...]` (one per Python tag). `where`: the
    manifest and the target, as a refusal names them."""
    if "wheel" in raw and "wheels" in raw:
        raise OverlayError(f"{where} has both `wheel` and `wheels`; keep one ({SEE_DESIGN})")
    entries = [{"file": raw["wheel"], "sha256": raw.get("sha256", "")}] if "wheel" in raw else raw.get("wheels", [])
    if not (isinstance(entries, list) and all(isinstance(e, dict) for e in entries)):
        raise _wrong(where, "wheels", entries, "a list of { file, sha256 } tables")
    pins = []
    for entry in entries:
        try:
            pin = PinnedWheel(file=_text(where, entry, "file"), sha256=_text(where, entry, "sha256"))
            _, version, _, _ = parse_wheel_filename(pin.file)
        except OverlayError as exc:
            if "lacks key" not in str(exc):
                raise
            key = "file" if "file" not in entry else "sha256"
            raise OverlayError(f"{where}: a pinned wheel lacks key {key!r}; {SEE_DESIGN}") from None
        except InvalidWheelFilename as exc:
            raise OverlayError(f"{where}: {exc}") from None
        if version != Version(str(raw["version"])):
            raise OverlayError(
                f"{where} is version {raw['version']}, its wheel {pin.file} is {version}; "
                f"pin the wheel of version {raw['version']}"
            )
        pins.append(pin)
    if kind == Kind.WHEEL and not pins:
        raise OverlayError(f"{where} is of kind wheel but pins none; add `wheels` ({SEE_DESIGN})")
    if len({p.file for p in pins}) != len(pins):
        raise OverlayError(f"{where} pins one wheel file twice")
    return tuple(pins)


def _matrix_spec(where: str, name: str, raw: dict, kind: Kind, patches: tuple[str, ...]) -> MatrixSpec:
    """`[targets.<t>.matrix]` and `[[targets.<t>.variants]]` (both optional)."""
    table = _table(where, raw, "matrix", object)
    listed = raw.get("variants", [])
    if not (isinstance(listed, list) and all(isinstance(v, dict) for v in listed)):
        raise _wrong(where, "variants", listed, "a list of tables")
    variants = []
    for i, v in enumerate(listed):
        missing = [k for k in ("patch", "file", "versions") if k not in v]
        if missing:
            raise OverlayError(f"{where}: variant #{i + 1} lacks key {missing[0]!r} (needs patch, file, versions)")
        at = f"{where} variant #{i + 1}"
        versions = [str(x) for x in v["versions"]] if isinstance(v["versions"], list) else v["versions"]
        variant = Variant(
            _text(at, v, "patch"),
            _file_name(at, "file", _text(at, v, "file"), name, nested=True),
            _texts(at, {"versions": versions}, "versions"),
            _text(at, v, "reason", ""),
        )
        if variant.patch not in patches:
            raise OverlayError(
                f"{where}: variant {variant.file} stands in for {variant.patch}, which is not in its patches list"
            )
        variants.append(variant)
    pinned = str(raw["version"]) if kind == Kind.WHEEL else raw.get("commit", "")
    at = f"{where} matrix"
    versions = table.get("versions", [pinned])
    versions = [str(v) for v in versions] if isinstance(versions, list) else versions
    tests = table.get("tests", True)
    if not isinstance(tests, bool):
        raise _wrong(at, "tests", tests, "true or false")
    return MatrixSpec(
        versions=_texts(at, {"versions": versions}, "versions"),
        variants=tuple(variants),
        venv=_text(at, table, "venv", ""),
        run_tests=tests,
        no_tests_reason=_text(at, table, "no_tests_reason", ""),
        pythonpath=_texts(at, table, "pythonpath"),
        pytest_args=_texts(at, table, "pytest_args"),
    )


def _wrong(where: str, key: str, value: object, want: str) -> OverlayError:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return OverlayError(f"{where}: `{key}` is {shown}, not {want}; fix that key ({SEE_DESIGN})")


def _text(where: str, raw: dict, key: str, default: str | None = None) -> str:
    """raw[key], a string (a version may be a TOML number); `default` when absent, required when that is None."""
    value = raw.get(key, default)
    if value is None:
        raise OverlayError(f"{where} lacks key {key!r}; {SEE_DESIGN}")
    numeric = key == "version" and isinstance(value, int | float) and not isinstance(value, bool)
    if not (isinstance(value, str) or numeric):
        raise _wrong(where, key, value, "a string")
    return str(value)


def _texts(where: str, raw: dict, key: str, default: tuple = ()) -> tuple[str, ...]:
    """raw[key], a list of strings (`default` when absent)."""
    value = raw.get(key, default)
    if not (isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)):
        raise _wrong(where, key, value, "a list of strings")
    return tuple(value)


def _table(where: str, raw: dict, key: str, of: type = str) -> dict:
    """raw[key], a table whose values are of type `of` ({} when absent)."""
    value = raw.get(key, {})
    if not (isinstance(value, dict) and all(isinstance(v, of) for v in value.values())):
        raise _wrong(where, key, value, f"a table of {'strings' if of is str else 'tables'}")
    return value


def _file_name(where: str, key: str, name: str, folder: str, nested: bool = False) -> str:
    """A patch file's name in patches/<folder>/ (`nested`: a relative path under it), never one that leaves it."""
    parts = name.split("/")
    if "\0" in name or "\\" in name or (len(parts) > 1 and not nested) or any(p in ("", ".", "..") for p in parts):
        raise OverlayError(
            f"{where}: `{key}` names {name!r}, which is not a file in patches/{folder}/; name a patch file of that "
            f"folder ({SEE_DESIGN})"
        )
    return name


def _target(path: Path, patches_dir: Path, name: str, raw: object) -> Target:
    where = f"{path}: target {name!r}"
    if not isinstance(raw, dict):
        raise _wrong(str(path), f"targets.{name}", raw, "a table")
    kinds = [k.value for k in Kind]
    if _text(where, raw, "kind") not in kinds:
        raise OverlayError(f"{where} has unknown kind {raw['kind']!r}; use one of {', '.join(kinds)}")
    kind = Kind(raw["kind"])
    patches = tuple(_file_name(where, "patches", p, name) for p in _texts(where, raw, "patches"))
    twice = [p for p, n in Counter(patches).items() if n > 1]
    if twice:
        raise OverlayError(f"{where} lists patch {twice[0]} twice; a series applies each patch once")
    applied = _table(where, raw, "applied_upstream")
    stray = [p for p in applied if p not in patches]
    if stray:
        raise OverlayError(
            f"{where}: applied_upstream names {stray[0]}, which is not in its patches list; "
            "name a patch of the series (a dropped patch needs no entry)"
        )
    return Target(
        name=name,
        kind=kind,
        version=_text(where, raw, "version"),
        upstream=_text(where, raw, "upstream"),
        patch_dir=patches_dir / name,
        patches=patches,
        preimages=_table(where, raw, "preimages"),
        requirement=_text(where, raw, "requirement", ""),
        wheels=_pinned_wheels(where, raw, kind),
        commit=_text(where, raw, "commit", ""),
        layout=_table(where, raw, "layout"),
        project_name=_text(where, raw, "project_name", ""),
        marker=_text(where, raw, "marker", ""),
        full_context=_text(where, raw, "context", "") == "full",
        matrix=_matrix_spec(where, name, raw, kind, patches),
        applied_upstream=applied,
    )


def _local_version(path: Path, data: dict) -> str:
    """The PEP 440 local label of patched wheels (`local_version`)."""
    local = _text(str(path), data, "local_version", "overlay.1")
    try:
        Version(f"1+{local}")
    except InvalidVersion:
        raise _wrong(
            str(path), "local_version", local, "a PEP 440 local version label (letters, digits, dots)"
        ) from None
    return local


def load_manifest(patches_dir: Path | None = None) -> Manifest:
    patches_dir = (patches_dir or default_patches_dir()).resolve()
    path = patches_dir / MANIFEST_NAME
    if not path.is_file():
        raise OverlayError(f"no manifest at {path}; pass --patches DIR pointing at the overlay's patches/ folder")
    try:
        data = tomllib.loads(path.read_text())
    except UnicodeDecodeError as exc:
        raise OverlayError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); restore it with `git checkout -- {path}`"
        ) from None
    except OSError as exc:
        raise OverlayError(f"cannot read {path} ({exc.strerror}); check its permissions") from None
    except tomllib.TOMLDecodeError as exc:
        raise OverlayError(f"{path} is not valid TOML ({exc}); restore it with `git checkout -- {path}`") from None
    if "schema" not in data:
        raise OverlayError(f"{path} lacks `schema = {SCHEMA}`; add that line at its top")
    if data["schema"] != SCHEMA:
        raise OverlayError(
            f"{path} is schema {data['schema']!r}, this sgl-overlay reads schema {SCHEMA}; "
            "use the sgl-overlay of the checkout the patches come from"
        )
    targets = {}
    for name, raw in _table(str(path), data, "targets", dict).items():
        try:
            targets[name] = _target(path, patches_dir, name, raw)
        except KeyError as exc:
            raise OverlayError(f"{path}: target {name!r} lacks key {exc.args[0]!r}; {SEE_DESIGN}") from None
    return Manifest(path, targets, _local_version(path, data))
