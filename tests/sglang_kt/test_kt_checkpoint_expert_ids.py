"""sglang-kt 0007: a DeepSeek checkpoint whose experts are numbered 1..E. The patch's own
test, as the fork's CPU CI runs it, on both trees, and what the real
``DeepseekV2WeightLoaderMixin.do_load_weights`` loads on stock (the test's stand-in
model records every expert-loader call; the FusedMoE loader is not under test)."""

from pathlib import Path

import pytest

from helpers import REPO_ROOT, check_pytest_run, in_patch_test, run_probe, run_pytest, side_by_side

HERE = Path(__file__).resolve().parent
TARGET = "sglang-kt"
UPSTREAM_TEST = "test/registered/unit/models/test_deepseek_weight_loader_expert_ids.py"
PROBE = HERE / "kt_expert_ids_probe.py"


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
            "stock_probe": lambda: run_probe(stock, PROBE, extra_path=(test_file.parent, HERE)),
        }
    )


def test_upstream_unit_test_passes_patched_and_fails_stock(runs):
    loads = "TestDeepseekWeightLoaderExpertIds::test_experts_numbered_from_zero_load"
    refused = "TestDeepseekWeightLoaderExpertIds::test_expert_id_outside_the_model_is_refused"
    check_pytest_run(runs["patched"], {loads: "passed", refused: "passed"})
    check_pytest_run(runs["stock"], {loads: "passed", refused: "failed"})
    assert "ValueError not raised" in runs["stock"].failures[refused]


def test_stock_loads_experts_numbered_from_one_shifted(runs):
    """Stock: experts 1..3 of the checkpoint go to the router's experts 1..3 (each the
    one below its own), the router's expert 0 gets nothing, expert 4 is skipped."""
    out = runs["stock_probe"]
    assert out["error"] is None
    assert sorted({e for e, _ in out["calls"]}) == [1, 2, 3]
