"""How the kernel fix reaches an environment (its route) and what that route needs there.

sglang with `sglang.srt.plugins` loads sgl_kernel_ext's entry point; the KT fork (sglang-kt) has no
plugin system, so its DeepGEMM runner calls sgl_kernel_ext once sglang-kt's runner patch is in."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from packaging.metadata import Metadata
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version
from wheel.wheelfile import WheelFile

PLUGINS = "sglang/srt/plugins/__init__.py"  # wheel path of sglang's plugin loader
RUNNER = "sglang/srt/layers/moe/moe_runner/deep_gemm.py"  # wheel path of the DeepGEMM MoE runner
KT_PROJECT = "sglang-kt"

# The exact kernels copy_to_gpu_no_ce has in each released kernel (any other N raises `unexpected N`):
# the copy_to_gpu_no_ce_impl<N> symbols of sglang-kernel's sm90/ and sm100/ common_ops.abi3.so; for
# sgl-kernel 0.3.21 (and kt-kernel's bundle of it, 0.3.21.post2) the fork's copy.cu, blob 09719f51.
KERNEL_N: dict[str, tuple[int, ...]] = {
    "0.3.21": (64, 72),
    "0.3.21.post2": (64, 72),
    "0.4.6.post1": (32, 64, 72),
    "0.4.7": (32, 64, 72),
    "0.4.9": (32, 64, 72),
    "0.4.10": (32, 64, 72),
}


class Way(Enum):
    PLUGIN = "plugin"  # sglang.srt.plugins loads sgl_kernel_ext's entry point
    RUNNER = "runner"  # sglang-kt's DeepGEMM runner calls sgl_kernel_ext (its runner patch)
    NONE = "none"  # neither: only sgl-kernel rebuilt with the kernel patch helps


@dataclass(frozen=True)
class Route:
    """The route of one installed sglang distribution, with the torch it pins and the one installed."""

    dist: str
    version: str
    way: Way
    torch: str | None  # installed torch version
    torch_pin: str | None  # the distribution's requirement on torch, e.g. "==2.9.1"


def torch_pin(requires: list[str] | None) -> str | None:
    for line in requires or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name == "torch" and not req.marker:
            return str(req.specifier) or None
    return None


def pin_allows(pin: str | None, version: str | None) -> bool:
    """Does a torch requirement allow the installed torch (its local label, +cu128, aside)?"""
    if pin is None or version is None:
        return pin is None
    try:
        return Requirement(f"torch{pin}").specifier.contains(Version(version).public, prereleases=True)
    except (InvalidRequirement, InvalidVersion):
        return False


def route_of(dist: str, info: dict, torch: str | None) -> Route:
    if (Path(info["root"]) / PLUGINS).is_file():
        way = Way.PLUGIN
    else:
        way = Way.RUNNER if dist == KT_PROJECT else Way.NONE
    return Route(dist, info["version"], way, torch, torch_pin(info.get("requires")))


def kernel_lengths(version: str | None) -> tuple[int, ...] | None:
    return KERNEL_N.get(version or "")


@dataclass(frozen=True)
class ExtWheel:
    """An sgl_kernel_ext wheel in a dist folder and the torch it was built for."""

    path: Path
    version: str
    torch_pin: str | None


def ext_wheels(dist_dir: Path) -> list[ExtWheel]:
    """sgl_kernel_ext wheels in dist_dir (the shipped one) and its torch<version>/ folders
    (scripts/build_ext_torch.sh's), each with the torch pin its METADATA requires."""
    found = []
    for path in sorted([*dist_dir.glob("sgl_kernel_ext-*.whl"), *dist_dir.glob("torch*/sgl_kernel_ext-*.whl")]):
        try:
            with WheelFile(path) as whl:
                text = whl.read(f"{whl.dist_info_path}/METADATA").decode()
        except (OSError, ValueError, KeyError):
            continue  # not a readable wheel: not one to offer
        meta = Metadata.from_email(text, validate=False)
        found.append(ExtWheel(path, str(meta.version), torch_pin([str(r) for r in meta.requires_dist or []])))
    return found


def ext_wheel_for(dist_dir: Path, torch: str | None) -> ExtWheel | None:
    """The sgl_kernel_ext wheel in dist_dir built for the installed torch, if there is one."""
    if torch is None:
        return None
    return next((w for w in ext_wheels(dist_dir) if w.torch_pin and pin_allows(w.torch_pin, torch)), None)
