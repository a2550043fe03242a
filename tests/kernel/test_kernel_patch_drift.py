"""The sgl-kernel patch and the extension's copy.cu cannot drift apart.

- the pre-image side (the tree's `upstream` commit, which `sgl-overlay fetch`
  rebuilt from the patch's full-context hunks) hashes to the pinned upstream
  blobs, and the series touches exactly the pinned files;
- the tree passes `sgl-overlay verify`: HEAD holds the blobs the series' `index`
  lines end at;
- sgl_kernel_ext/csrc/copy.cu has the bytes (and so the blob id) of the tree's
  HEAD, and `git apply` of the patches in order onto the pre-image gives the same bytes;
- the post-image is clang-format clean (upstream's sgl-kernel style) and the
  patched test file black/isort clean.

No stubs: this reads files and runs git/sgl-overlay/clang-format/black/isort.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import kernel_patch as kp
import pytest

from helpers import TREES

EXT_COPY_CU = kp.EXT_DIR / "csrc" / "copy.cu"


def test_preimage_blobs_are_the_pinned_ones():
    assert kp.touched_files() == kp.SERIES_FILES == set(kp.PINNED_PREIMAGES)
    for path, pinned in kp.PINNED_PREIMAGES.items():
        assert kp.tree_blob("old", path) == pinned, f"{path}: rebuilt pre-image is not the pinned blob"


def test_tree_is_what_the_series_says():
    tool = kp.REPO_ROOT / ".venv" / "bin" / "sgl-overlay"
    if not tool.exists():
        pytest.skip("the tool's venv is not built here (scripts/setup_venvs.sh --tool-only)")
    proc = subprocess.run(
        [
            str(tool),
            "--patches",
            str(kp.REPO_ROOT / "patches"),
            "--trees",
            str(TREES),
            "verify",
            "--target",
            kp.TARGET_NAME,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"verified {kp.TARGET_NAME}: base matches pins" in proc.stdout


def test_preimage_is_the_buggy_kernel():
    old = kp.image("old", kp.COPY_CU).decode()
    assert 'TORCH_CHECK(false, "unexpected N");' in old
    assert "copy_to_gpu_no_ce_impl<16>" not in old
    new = kp.image("new", kp.COPY_CU).decode()
    assert "unexpected N" not in new
    # the length -> kernel ladder is written once, for the tensor op and the list op
    for n in (16, 32, 64, 72):
        assert new.count(f"if (n == {n})") == 1, n
        assert new.count(f"std::integral_constant<int, {n}>") == 1, n
    assert len(re.findall(r"dispatch_copy_to_gpu_no_ce\(\s*n,", new)) == 2


def _no_ce_lines(text: str, *markers: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if "_to_gpu_no_ce" in ln and ln.strip().startswith(markers)]


def test_extension_registers_what_the_series_registers():
    # sgl-kernel 0002 declares the list op in sgl_kernel_ops.h, registers it in
    # common_extension.cc and exposes it from sgl_kernel; the extension's own registration
    # carries the same declarations and the same m.def/m.impl lines (its namespace and
    # c10::kCUDA aside), so the two cannot drift apart.
    ours = (kp.EXT_DIR / "csrc" / "registration.cc").read_text()
    ours_lines = {ln.strip() for ln in ours.splitlines()}
    header = kp.image("new", kp.OPS_H).decode()
    declarations = _no_ce_lines(header, "void ", "at::Tensor ")
    assert declarations == [
        "void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output);",
        "at::Tensor copy_list_to_gpu_no_ce(at::IntArrayRef values);",
    ]
    assert set(declarations) <= ours_lines, declarations
    registration = _no_ce_lines(kp.image("new", kp.COMMON_EXTENSION).decode(), "m.def(", "m.impl(")
    assert len(registration) == 4, registration
    for line in registration:
        assert line.replace("torch::kCUDA", "c10::kCUDA") in ours_lines, line
    assert "copy_list_to_gpu_no_ce" not in kp.image("old", kp.COMMON_EXTENSION).decode()
    elementwise = kp.image("new", kp.ELEMENTWISE_PY).decode()
    assert "def copy_list_to_gpu_no_ce(values: List[int]) -> torch.Tensor:" in elementwise
    init = kp.image("new", kp.INIT_PY).decode()
    assert init.count("copy_list_to_gpu_no_ce") == 2  # imported from .elementwise and in __all__
    test = kp.image("new", kp.TEST_COPY).decode()
    assert "from sgl_kernel.elementwise import copy_list_to_gpu_no_ce, copy_to_gpu_no_ce" in test


def test_extension_copy_cu_is_the_post_image_blob():
    assert kp.file_blob(EXT_COPY_CU) == kp.tree_blob("new", kp.COPY_CU)
    assert EXT_COPY_CU.read_bytes() == kp.image("new", kp.COPY_CU)


def test_git_apply_to_rebuilt_preimage_gives_extension_copy_cu(tmp_path):
    git = shutil.which("git")
    assert git, "git is needed"
    kp.write_tree(tmp_path, "old")
    subprocess.run([git, "init", "-q"], cwd=tmp_path, check=True)
    for patch in kp.TARGET.patch_paths():
        subprocess.run([git, "apply", "--whitespace=nowarn", str(patch)], cwd=tmp_path, check=True)
    assert (tmp_path / kp.COPY_CU).read_bytes() == EXT_COPY_CU.read_bytes()
    assert kp.file_blob(tmp_path / kp.TEST_COPY) == kp.tree_blob("new", kp.TEST_COPY)


def _tool(name: str) -> str:
    exe = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(exe).exists():
        pytest.skip(f"{name} is not installed in this venv (see requirements/sglang.txt)")
    return exe


def test_post_image_is_clang_format_clean(tmp_path):
    exe = _tool("clang-format")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    work = kp.write_tree(tmp_path, "new")
    # upstream's sgl-kernel/.clang-format; the extension keeps the same file
    style = kp.EXT_DIR / "csrc" / ".clang-format"
    registrations = (kp.EXT_DIR / "csrc" / "registration.cc", Path(__file__).with_name("preimage_registration.cc"))
    for path in (work / kp.COPY_CU, *registrations):
        # (common_extension.cc and sgl_kernel_ops.h: only their two added lines are ours,
        # and those are checked against registration.cc, which is formatted here)
        proc = subprocess.run(
            [exe, f"--style=file:{style}", "--dry-run", "--Werror", str(path)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, f"{path.name} not clang-format clean ({version}):\n{proc.stderr}"


def test_patched_test_file_is_black_and_isort_clean(tmp_path):
    black, isort = _tool("black"), _tool("isort")
    work = kp.write_tree(tmp_path, "new")
    # isort: not __init__.py, whose import block is not isort-clean upstream either (pre-image)
    for rel in (kp.TEST_COPY, kp.ELEMENTWISE_PY, kp.INIT_PY):
        target = str(work / rel)
        proc = subprocess.run([black, "--check", "--diff", target], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if rel == kp.INIT_PY:
            continue
        proc = subprocess.run(
            [isort, "--check-only", "--diff", "--profile", "black", target], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
