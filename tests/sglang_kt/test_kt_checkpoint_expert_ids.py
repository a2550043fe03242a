"""sglang-kt 0007: a DeepSeek checkpoint whose experts are numbered 1..E. The patch's own
test, as the fork's CPU CI runs it, on both trees, and what the real
``DeepseekV2WeightLoaderMixin.do_load_weights`` loads on each (stock_expert_ids.py; the FusedMoE
loader is not under test)."""

from pathlib import Path

import pytest

from helpers import REPO_ROOT, check_pytest_run, in_patch_test, run_pytest, side_by_side

HERE = Path(__file__).resolve().parent
TARGET = "sglang-kt"
UPSTREAM_TEST = "test/registered/unit/models/test_deepseek_weight_loader_expert_ids.py"
STOCK_LOAD = HERE / "stock_expert_ids.py"


@pytest.fixture(scope="module")
def runs(stock_root, patched_root):
    test_file = in_patch_test(TARGET, UPSTREAM_TEST)
    stock, patched = stock_root(TARGET), patched_root(TARGET)
    # The stock package lacks the test helper 0001 adds to sglang.test: patch_test_helpers.py brings it.
    helper = ("patch_test_helpers",)
    return side_by_side(
        {
            "stock": lambda: run_pytest([stock, HERE, REPO_ROOT / "tests"], test_file, test_file.parent, helper),
            "patched": lambda: run_pytest([patched], test_file, test_file.parent),
            **{
                f"{label}_load": lambda root=root: run_pytest(
                    [root, test_file.parent, HERE, REPO_ROOT / "tests"], STOCK_LOAD, test_file.parent
                )
                for label, root in (("stock", stock), ("patched", patched))
            },
        }
    )


def test_upstream_unit_test_passes_patched_and_fails_stock(runs):
    loads = "TestDeepseekWeightLoaderExpertIds::test_experts_numbered_from_zero_load"
    refused = "TestDeepseekWeightLoaderExpertIds::test_expert_id_outside_the_model_is_refused"
    check_pytest_run(runs["patched"], {loads: "passed", refused: "passed"})
    check_pytest_run(runs["stock"], {loads: "passed", refused: "failed"})
    assert "ValueError not raised" in runs["stock"].failures[refused]


def test_stock_loads_experts_numbered_from_one_shifted(runs):
    """Stock loads them one expert off; patched refuses them (stock_expert_ids.py)."""
    shifted = "test_experts_numbered_from_one_load_shifted"
    check_pytest_run(runs["stock_load"], {shifted: "passed"})
    check_pytest_run(runs["patched_load"], {shifted: "failed"})
    assert "ValueError" in runs["patched_load"].failures[shifted]
