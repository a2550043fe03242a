"""The KT GPU-expert remap on both FusedMoE weight-loader paths (sglang-kt 0.7.2), on both
packages: gpu_expert_remap.py (with expert_maps.py, one pytest process a package: conftest.py; its
docstring says how the layer is built and what stands in) states what every GPU slot holds on each. The tests of
what only the patch makes right fail on stock; every other test passes on both. And the patch's
own unit test, as the fork's CPU CI runs it."""

from pathlib import Path

import pytest

from helpers import REPO_ROOT, check_pytest_run, in_patch_test, run_pytest

HERE = Path(__file__).resolve().parent
REMAP = HERE / "gpu_expert_remap.py"
TARGET = "sglang-kt"
UPSTREAM_TEST = Path("test/registered/unit/layers/moe/test_fused_moe_kt_weight_loader.py")
NVFP4_BACKENDS = ("auto", "flashinfer_cutlass", "flashinfer_cutedsl")

REMAP_TESTS = [
    "test_the_layer_is_the_real_one",
    "test_auto_layer_without_a_non_prefix_mask_is_refused",
    "test_pr_mask_both_paths",
    "test_pr_mask_per_path",
    "test_small_mask",
    "test_non_prefix_strategies[random]",
    "test_non_prefix_strategies[frequency]",
    "test_prefix_strategies_unchanged[uniform]",
    "test_prefix_strategies_unchanged[front-loading]",
    "test_moe_tp_ranks[0]",
    "test_moe_tp_ranks[1]",
    "test_ep_rank_local_range",
    "test_fused_shared_expert_past_the_mask",
    "test_fused_shared_expert_inside_the_mask_with_ep",
    "test_explicit_mask_with_auto_layer",
    "test_frequency_without_a_file_is_not_a_prefix",
    "test_every_weight_case_is_correct",
    "test_weight_loader_fused",
    "test_mxfp4_all_experts_branch",
    *(f"test_nvfp4_reference_layer[{b}]" for b in NVFP4_BACKENDS),
    *(f"test_nvfp4_slot_scales_are_the_slot_experts[{b}]" for b in NVFP4_BACKENDS),
    "test_nvfp4_pairing_per_backend",
    "test_nvfp4_ep_rank_slot_scales",
    "test_nvfp4_input_scale_rows_in_slot_order",
    "test_nvfp4_without_metadata_and_the_cpu_expert_rows",
]
# The tests stock fails, each with a fragment of its failure: without metadata slot k holds expert k
# (weights and NVFP4 scales alike); with it, the NVFP4 branches that read every input-scale row read
# the CPU experts' unwritten (NaN) ones.
STOCK_FAILS = {
    "test_pr_mask_both_paths": "assert [0, 1, 2, 3] == [76, 145, 262, 268]",
    "test_every_weight_case_is_correct": "AssertionError: pr_mask/none",
    "test_nvfp4_slot_scales_are_the_slot_experts[auto]": "[(0, 0), (1, 1), (2, 2)] == [(1, 1), (4, 4), (6, 6)]",
    "test_nvfp4_slot_scales_are_the_slot_experts[flashinfer_cutlass]": "[(0, 0), (1, 0), (2, 0)] == [(1, 0), (4, 0), (6, 0)]",
    "test_nvfp4_slot_scales_are_the_slot_experts[flashinfer_cutedsl]": "[(0, 0), (1, 0), (2, 0)] == [(1, 0), (4, 0), (6, 0)]",
    "test_nvfp4_pairing_per_backend": "AssertionError: flashinfer_cutlass",
    "test_nvfp4_ep_rank_slot_scales": "[(4, 4), (5, 5)] == [(5, 5), (7, 7)]",
    "test_nvfp4_input_scale_rows_in_slot_order": "AssertionError: none",
}


@pytest.fixture(scope="module")
def runs(per_tree_runs):
    return {label: by_module[REMAP] for label, by_module in per_tree_runs.items()}


def test_patched_loads_every_slot_right(runs):
    """Every slot holds the expert routing sends there, on every path and placement."""
    check_pytest_run(runs["patched"], dict.fromkeys(REMAP_TESTS, "passed"))


def test_stock_loads_slots_wrong_where_the_patch_remaps(runs):
    """Stock passes the tests that state its own slot contents and fails those of what the patch
    makes right, each where it loads another expert (or reads unwritten scales)."""
    run = runs["stock"]
    check_pytest_run(run, {**dict.fromkeys(REMAP_TESTS, "passed"), **dict.fromkeys(STOCK_FAILS, "failed")})
    for test, fragment in STOCK_FAILS.items():
        assert fragment in run.failures[test], run.failures[test][-3000:]


# ---------------------------------------------------------------- the patch's own test


def _run_upstream_test(root, test_file, stock=False):
    """The patch's own test, as the fork's CPU CI runs it: no project stand-ins (the
    test stands in for the CUDA natives itself, with the helper the patch adds to
    sglang.test, which the stock package gets from the patched tree:
    patch_test_helpers.py)."""
    if stock:
        return run_pytest([root, HERE, REPO_ROOT / "tests"], test_file, test_file.parent, ("patch_test_helpers",))
    return run_pytest([root], test_file, test_file.parent)


# Each test's outcome on stock; all pass patched. Stock passes where no remap is needed (a prefix
# placement, the fused loader's stand-ins, a full layer that loads every tensor) and fails the rest.
UPSTREAM_STOCK = {
    f"TestFusedMoEKTWeightLoader::{name}": outcome
    for name, outcome in {
        "test_eplb_needs_every_local_expert_on_the_gpu": "failed",
        "test_full_gpu_prefill_accepted_where_apply_never_takes_it": "failed",
        "test_full_gpu_prefill_accepted_where_the_full_layer_loads_all": "passed",
        "test_full_gpu_prefill_with_unloaded_checkpoint_params_is_refused": "failed",
        "test_fused_shared_expert_is_not_loaded_to_gpu_slots": "failed",
        "test_import_stand_ins_are_restored": "passed",
        "test_layouts_that_loaded_right_take_the_tensor_as_it_comes": "failed",
        "test_map_kt_gpu_expert_id": "failed",
        "test_mxfp4_all_experts_branch_follows_the_expert_map": "failed",
        "test_non_prefix_placement_both_paths": "failed",
        "test_prefix_placement_is_identity": "passed",
        "test_require_global_experts_params_in_slot_order": "failed",
        "test_require_global_experts_rows_follow_the_expert_map": "failed",
        "test_tensor_parallel_shard": "failed",
        "test_weight_loader_fused": "failed",
        "test_weight_loader_fused_expert_parallel": "failed",
        "test_weight_loader_fused_follows_the_expert_map": "failed",
        "test_weight_loader_fused_takes_this_ranks_experts": "failed",
    }.items()
}


def test_upstream_unit_test_passes_on_patched(patched_root):
    test_file = in_patch_test(TARGET, UPSTREAM_TEST)
    check_pytest_run(_run_upstream_test(patched_root(TARGET), test_file), dict.fromkeys(UPSTREAM_STOCK, "passed"))


def test_upstream_unit_test_fails_on_stock(stock_root):
    test_file = in_patch_test(TARGET, UPSTREAM_TEST)
    run = _run_upstream_test(stock_root(TARGET), test_file, stock=True)
    check_pytest_run(run, UPSTREAM_STOCK)
    slots = run.failures["TestFusedMoEKTWeightLoader::test_non_prefix_placement_both_paths"]
    assert "slot 0 w13 does not hold expert 1" in slots, slots[-3000:]
    remap = run.failures["TestFusedMoEKTWeightLoader::test_map_kt_gpu_expert_id"]
    assert "has no attribute '_map_kt_gpu_expert_id'" in remap, remap[-3000:]
