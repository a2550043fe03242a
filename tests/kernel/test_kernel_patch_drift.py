"""The sgl-kernel patch, its laid-out tree and the test-only build cannot drift apart.

- the pre-image side (the tree's `upstream` commit, which `sgl-overlay fetch`
  rebuilt from the patch's full-context hunks) hashes to the pinned upstream
  blobs, and the series touches exactly the pinned files;
- the tree passes `sgl-overlay verify`: HEAD holds the blobs the series' `index`
  lines end at;
- `git apply` of the patches in order onto the pre-image gives the tree's HEAD bytes,
  which the test-only build (copy_ext.py) compiles as they are;
- the KT fork's copy.cu (blob 09719f51), which the GPU tests build, is the pre-image without its
  N = 32 kernel;
- the post-image is clang-format clean (upstream's sgl-kernel/.clang-format, kept here as
  sgl-kernel.clang-format) and the patched test file black/isort clean.

No stubs: this reads files and runs git/sgl-overlay/clang-format/black/isort.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import copy_ext
import kernel_patch as kp
import pytest

from helpers import TREES

STYLE = Path(__file__).with_name("sgl-kernel.clang-format")


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
    # the length -> kernel ladder is written once; no code outside the op's own path
    for n in (16, 32, 64, 72):
        assert new.count(f"if (n == {n})") == 1, n
        assert new.count(f"std::integral_constant<int, {n}>") == 1, n
    assert len(re.findall(r"dispatch_copy_to_gpu_no_ce\(\s*n,", new)) == 1
    assert "fallback_impl" not in new


def test_kt_fork_copy_cu_is_the_preimage_without_n_32():
    """The GPU tests and caller_bench build the KT fork's kernel from sgl-kernel's pre-image."""
    kt = copy_ext.kt_copy_cu(kp.image("old", kp.COPY_CU)).decode()
    assert "copy_to_gpu_no_ce_impl<32>" not in kt and 'TORCH_CHECK(false, "unexpected N");' in kt


def test_test_only_build_compiles_the_tree_bytes(tmp_path):
    import copy_ext

    source = kp.image("new", kp.COPY_CU)
    copy_ext.write_sources("post", source, tmp_path)
    assert (tmp_path / "post" / "copy.cu").read_bytes() == source
    assert kp.file_blob(tmp_path / "post" / "copy.cu") == kp.tree_blob("new", kp.COPY_CU)


def test_git_apply_to_rebuilt_preimage_gives_the_post_image(tmp_path):
    git = shutil.which("git")
    assert git, "git is needed"
    kp.write_tree(tmp_path, "old")
    subprocess.run([git, "init", "-q"], cwd=tmp_path, check=True)
    for patch in kp.TARGET.patch_paths():
        subprocess.run([git, "apply", "--whitespace=nowarn", str(patch)], cwd=tmp_path, check=True)
    for rel in kp.SERIES_FILES:
        assert (tmp_path / rel).read_bytes() == kp.image("new", rel), rel


def copy_ext_registration() -> str:
    import copy_ext

    return copy_ext.REGISTRATION.format(name="post")


def _tool(name: str) -> str:
    exe = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(exe).exists():
        pytest.skip(f"{name} is not installed in this venv (see requirements/sglang.txt)")
    return exe


def test_post_image_is_clang_format_clean(tmp_path):
    exe = _tool("clang-format")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    work = kp.write_tree(tmp_path, "new")
    registration = tmp_path / "registration.cc"
    registration.write_text(copy_ext_registration())
    for path in (work / kp.COPY_CU, registration):
        proc = subprocess.run(
            [exe, f"--style=file:{STYLE}", "--dry-run", "--Werror", str(path)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, f"{path.name} not clang-format clean ({version}):\n{proc.stderr}"


def test_patched_test_file_is_black_and_isort_clean(tmp_path):
    black, isort = _tool("black"), _tool("isort")
    work = kp.write_tree(tmp_path, "new")
    for rel in (kp.TEST_COPY,):
        target = str(work / rel)
        proc = subprocess.run([black, "--check", "--diff", target], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        proc = subprocess.run(
            [isort, "--check-only", "--diff", "--profile", "black", target], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
