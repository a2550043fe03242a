"""Every KT GPU slot runs its own expert under every expert map, all-experts loader and
run-time move, or the server refuses the combination (sglang-kt 0.7.2, series 0003-0007), on
both packages: expert_maps.py (with gpu_expert_remap.py, one pytest process a package:
conftest.py) states what every slot holds, or what is refused, on each; every test passes on
both. A rebalance at run time (eplb_rebalance.py, on stock) and 0006's own test, as the fork's
CPU CI runs it."""

from pathlib import Path

import pytest

from helpers import check_pytest_run, in_patch_test, run_pytest

HERE = Path(__file__).resolve().parent
MAPS = HERE / "expert_maps.py"
EPLB_REBALANCE = HERE / "eplb_rebalance.py"
TARGET = "sglang-kt"
SERVER_ARGS_TEST = "test/registered/unit/test_kt_server_args.py"
MAPS_TESTS = [
    "test_maps_are_non_trivial",
    "test_nvfp4_slots_pair_their_own_scales_under_maps",
    "test_fused_loader_ep2_every_rank",
    "test_loaders_that_were_right_are_unchanged",
    "test_gpt_oss_mxfp4_loader_follows_the_map",
    "test_per_expert_loader_under_maps",
    "test_eplb_with_kt_is_refused_where_a_slot_cannot_follow",
    "test_redundant_experts_with_kt",
    "test_dynamic_update",
    "test_dynamic_update_mxfp4_moves_no_biases",
    "test_full_gpu_prefill_nvfp4",
    "test_wrong_slot_counts",
]


@pytest.fixture(scope="module")
def runs(per_tree_runs):
    return {label: by_module[MAPS] for label, by_module in per_tree_runs.items()}


@pytest.mark.parametrize("label", ["stock", "patched"])
def test_each_package_holds_what_its_tests_state(runs, label):
    """Each test states both packages' values, so each package passes all and the other's
    expectations fail."""
    check_pytest_run(runs[label], dict.fromkeys(MAPS_TESTS, "passed"))


def test_eplb_rebalance_on_stock(stock_root, tmp_path):
    """One EPLB rebalance on the stock tree, 2 EP ranks over gloo (eplb_rebalance.py): with a CPU
    expert or a slot that is no local expert in order, GPU slots and CPU experts stay on the old
    map; with every local expert on the GPU they follow it, as the plain layer's do. (The layer is
    the same patched: the patch refuses the flag at startup, expert_maps.py::test_eplb_with_kt_is_refused_where_a_slot_cannot_follow.)"""
    run = run_pytest([stock_root(TARGET), HERE, HERE.parent], EPLB_REBALANCE, tmp_path)
    check_pytest_run(run, {"test_rebalance_leaves_kt_slots_on_the_old_map": "passed"})


@pytest.mark.parametrize("label", ["stock", "patched"])
def test_server_args_unit_test(label, stock_root, patched_root):
    """0006's own test, as the fork's CPU CI runs it: passes patched; on stock the
    redundant-experts refusal test fails (accepted there); EPLB with KT is accepted
    in the arguments on both (it is checked per layer)."""
    test_file = in_patch_test(TARGET, SERVER_ARGS_TEST)
    root = patched_root(TARGET) if label == "patched" else stock_root(TARGET)
    passes = "TestKTServerArgs::test_eplb_and_kt_placements_are_accepted"
    refusal = "TestKTServerArgs::test_redundant_experts_with_kt_are_refused"
    outcomes = {passes: "passed", refusal: "passed" if label == "patched" else "failed"}
    check_pytest_run(run_pytest([root], test_file, test_file.parent), outcomes)
