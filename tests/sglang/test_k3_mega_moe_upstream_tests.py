"""Issue 5: the unit tests carried inside patches/sglang/0001 and 0002 run from
the patched tree and pass there, and fail against the stock sglang package.

They live in the patched tree in upstream's layout (``test/registered/unit/...``).
The test files are always taken from the patched tree; only the ``sglang``
package on PYTHONPATH changes (the tree's, or an installed wheel's).
Stubs inside those tests: ``deep_gemm`` and ``mega_moe_pre_dispatch`` (native
kernels), as in upstream's own MegaMoE unit tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_pytest

UPSTREAM_TESTS = {
    "test/registered/unit/arg_groups/test_kimi_k3_mega_moe_token_budget.py": 8,
    "test/registered/unit/arg_groups/test_mega_moe_token_budget_dp.py": 2,
}


def _tree_root(patched_tree) -> Path:
    tree = patched_tree("sglang")
    missing = [p for p in UPSTREAM_TESTS if not (tree / p).is_file()]
    if missing:
        pytest.fail(f"patched tree {tree} lacks the in-patch tests {missing}")
    return tree


def _pytest(package_root: Path, test_file: Path, tmp_path: Path):
    return run_pytest([package_root], test_file, tmp_path)


@pytest.mark.parametrize("rel", sorted(UPSTREAM_TESTS))
def test_in_patch_tests_pass_on_patched(patched_root, patched_tree, tmp_path, rel):
    tree = _tree_root(patched_tree)
    proc = _pytest(Path(patched_root("sglang")), tree / rel, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert f"{UPSTREAM_TESTS[rel]} passed" in out, out[-3000:]


@pytest.mark.parametrize("rel", sorted(UPSTREAM_TESTS))
def test_in_patch_tests_fail_on_stock(patched_tree, stock_root, tmp_path, rel):
    tree = _tree_root(patched_tree)
    proc = _pytest(Path(stock_root("sglang")), tree / rel, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-6000:]
    # Stock starts every overflowing config: the refusals are never raised.
    assert "AssertionError: ValueError not raised" in out, out[-3000:]
    if rel.endswith("test_kimi_k3_mega_moe_token_budget.py"):
        # Five startup tables refused nothing; the runtime check is an assert.
        assert "6 failed, 2 passed" in out, out[-3000:]
        assert "AssertionError: mega MoE: num_tokens=65 exceeds" in out, out[-3000:]
    else:
        assert "3 failed, 1 passed" in out, out[-3000:]
