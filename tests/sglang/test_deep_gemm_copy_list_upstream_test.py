"""The unit test carried inside patches/sglang/0004 (DeepGEMM runner: per-expert
counts to the GPU in one launch) passes from the patched tree and fails against the
stock sglang package. Stand-in inside that test: ``sgl_kernel`` (a CUDA library);
its GPU case skips here.
"""

from __future__ import annotations

from helpers import in_patch_test, run_pytest

REL = "test/registered/unit/layers/moe/test_deep_gemm_copy_list.py"


def test_in_patch_test_passes_on_patched(patched_root, tmp_path):
    proc = run_pytest([patched_root("sglang")], in_patch_test("sglang", REL), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "3 passed, 1 skipped" in out, out[-3000:]


def test_in_patch_test_fails_on_stock(stock_root, tmp_path):
    proc = run_pytest([stock_root("sglang")], in_patch_test("sglang", REL), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-6000:]
    # stock has no once-resolved list op: every case of the no-copy-engine caller fails
    assert "3 failed, 1 skipped" in out, out[-3000:]
