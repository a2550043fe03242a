"""The unit tests carried inside the sglang patches, in upstream's layout (``test/registered/unit/...``), run as
upstream's CPU CI runs them: each patch's test, as that patch adds it, fails on the patch's pre-image for the
reason it names, and every test as the series leaves it passes on the patched package.

A patch's pre-image is a tree that holds the pre-image of every file the patch changes: the stock package where
no earlier patch of the series changes one of those files (the base its own pull request is reviewed on), else the
laid-out tree's commit before the patch. One pytest process per tree, the processes side by side: the stock
package (0001, 0003, 0004, 0005, 0007), the trees before 0002 and before 0006, and the patched package (every
test). The stock and patched packages are the trees' or installed wheels' (SGL_OVERLAY_STOCK_ROOT_SGLANG,
SGL_OVERLAY_PATCHED_ROOT_SGLANG).

Stand-ins inside those tests, for native code and what a CPU lacks: DeepGEMM's symmetric buffer, fused MegaMoE
kernel and ``mega_moe_pre_dispatch`` (a reference MoE instead), sgl-kernel's ``copy_to_gpu_no_ce`` (with the
released kernel's lengths), and the model-registry lookup of the expert-location constructors.
"""

from __future__ import annotations

import subprocess

import pytest

from copy_list_probe import IN_PATCH_OUTCOMES
from copy_list_probe import IN_PATCH_TEST as COPY_LIST
from helpers import export_tree, run_pytest_files, side_by_side, tree_dir

TARGET = "sglang"
BUDGET_DP = "test/registered/unit/arg_groups/test_mega_moe_token_budget_dp.py"
NO_FALLBACK = "test/registered/unit/arg_groups/test_mega_moe_token_budget_no_fallback.py"
CAP_ERROR = "test/registered/unit/layers/moe/test_mega_moe_token_cap_error.py"
GLOBAL_ROWS = "test/registered/unit/eplb/test_expert_location_global_experts.py"
GATHER = "test/registered/unit/utils/test_require_mlp_tp_gather_megamoe.py"
PASSES = "test/registered/unit/layers/moe/test_mega_moe_passes.py"
FUSED_LOADER = "test/registered/unit/layers/moe/test_fused_moe_weight_loader_fused.py"
ON_DEVICE = "TestCopyListToGpuNoCeOnDevice::test_every_local_expert_count"
# Per patch: its tests' outcomes on its pre-image (a test not named passes there), and a line of the report of
# each failing test named.
PREIMAGE = {
    # The per-DP chunk divided twice (cap 384 passes) and never by attention TP.
    "0001": (
        {
            BUDGET_DP: {
                "TestMegaMoeTokenBudgetDataParallel::test_per_dp_chunk_is_not_divided_again": "failed",
                "TestMegaMoeTokenBudgetDataParallel::test_per_dp_chunk_is_split_over_attention_tp": "failed",
                "TestMegaMoeTokenBudgetDataParallel::test_unaligned_per_dp_chunk_is_padded_to_attention_tp": "failed",
            }
        },
        [
            (
                BUDGET_DP,
                "TestMegaMoeTokenBudgetDataParallel::test_per_dp_chunk_is_not_divided_again",
                "Regex didn't match",
            )
        ],
    ),
    # Kimi K3 and MiniMax M3 unchecked, the chunk not split over attention TP without DP, decode
    # bounded by the graph only; rows over the cap assert.
    "0002": (
        {
            NO_FALLBACK: {
                "TestMegaMoeTokenBudgetNoFallback::test_kimi_k3_and_minimax_m3_are_checked": "failed",
                "TestMegaMoeTokenBudgetNoFallback::test_chunk_is_split_over_attention_tp": "failed",
                "TestMegaMoeTokenBudgetNoFallback::test_unaligned_chunk_is_padded_to_attention_tp": "failed",
                "TestMegaMoeTokenBudgetNoFallback::test_unpadded_chunk_stays_whole": "failed",
                "TestMegaMoeTokenBudgetNoFallback::test_eager_decode_above_the_largest_graph": "failed",
                "TestMegaMoeTokenBudgetNoFallback::test_decode_is_split_over_attention_tp": "failed",
            },
            CAP_ERROR: {
                "TestMegaMoeTokenCapError::test_shared_path_raises": "failed",
                "TestMegaMoeTokenCapError::test_kimi_k3_raises": "failed",
            },
        },
        [(CAP_ERROR, "TestMegaMoeTokenCapError::test_shared_path_raises", "AssertionError: mega MoE: num_tokens=9")],
    ),
    # The runner refuses every count length its kernel lacks (on a CPU the on-device test skips).
    "0003": (
        {COPY_LIST: IN_PATCH_OUTCOMES["stock"]},
        [(COPY_LIST, "TestCopyListToGpuNoCe::test_every_count_in_released_lengths", "unexpected N")],
    ),
    # Every non-trivial placement writes a global row with another expert's scale.
    "0004": (
        {
            GLOBAL_ROWS: {
                "TestGlobalExpertRows::test_every_row_takes_the_expert_it_holds": "failed",
                "TestGlobalExpertRows::test_rows_of_a_placement_file": "failed",
            }
        },
        [
            (
                GLOBAL_ROWS,
                "TestGlobalExpertRows::test_every_row_takes_the_expert_it_holds",
                "144 of 168 placements write a global row with another expert",
            ),
            (
                GLOBAL_ROWS,
                "TestGlobalExpertRows::test_rows_of_a_placement_file",
                "[[0, 4], [1, 5], [2], [3]] != [[1, 5], [3], [0, 4], [2]]",
            ),
        ],
    ),
    # Each DP rank keeps its own count under --enable-dp-lm-head --moe-dense-tp-size 1.
    "0005": (
        {GATHER: {"test_megamoe_gathers_every_dp_rank_count[megamoe-True]": "failed"}},
        [(GATHER, "test_megamoe_gathers_every_dp_rank_count[megamoe-True]", "assert False is True")],
    ),
    # Rows over the cap fail; rows within it, and the gate's use of the buffer, were right.
    "0006": (
        {
            PASSES: {
                "TestMegaMoePasses::test_rows_over_the_cap_run_in_passes": "failed",
                "TestMegaMoePasses::test_every_dp_rank_runs_the_busiest_ranks_passes": "failed",
                "TestMegaMoePasses::test_dp_rows_are_split_over_attention_tp": "failed",
                "TestMegaMoePasses::test_a_captured_graph_runs_one_pass": "failed",
                "TestMegaMoePasses::test_routing_stays_out_of_the_buffer_in_passes": "failed",
                "TestMegaMoePasses::test_one_warning_per_process": "failed",
                "TestKimiK3MegaMoePasses::test_k_passes_give_the_one_pass_output": "failed",
            }
        },
        [(PASSES, "TestMegaMoePasses::test_rows_over_the_cap_run_in_passes", "num_tokens=40 exceeds cap")],
    ),
    # gpt-oss's all-experts tensors are copied whole: EP > 1 and redundant experts fail at load, a map on one EP
    # rank loads the wrong experts; one EP rank without a map, and a loader of its own experts, were right.
    "0007": (
        {
            FUSED_LOADER: {
                "TestWeightLoaderFused::test_each_ep_rank_loads_its_experts": "failed",
                "TestWeightLoaderFused::test_every_slot_holds_the_expert_of_its_physical_expert": "failed",
            }
        },
        [
            (
                FUSED_LOADER,
                "TestWeightLoaderFused::test_each_ep_rank_loads_its_experts",
                "RuntimeError: The size of tensor a (4) must match the size of tensor b (8) at non-singleton dimension 0",
            ),
            (
                FUSED_LOADER,
                "TestWeightLoaderFused::test_every_slot_holds_the_expert_of_its_physical_expert",
                "103 of 105 layouts load a slot with another expert or fail",
            ),
        ],
    ),
}
# The tree each patch's test runs on before it: the stock package, or the commit of the patch named.
PREIMAGE_TREE = {"0001": None, "0002": "0001", "0003": None, "0004": None, "0005": None, "0006": "0005", "0007": None}
# On the patched package every test passes but the on-device one, which skips on a CPU.
PATCHED_NOT_PASSED = {COPY_LIST: {ON_DEVICE: "skipped"}}
ALL_TESTS = sorted({rel for tests, _ in PREIMAGE.values() for rel in tests})


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree_dir(TARGET)), *args], capture_output=True, text=True, check=True
    ).stdout


def _preimage_trees() -> dict[str, str | None]:
    """Per patch of the laid-out series (number -> commit before it, or None for the stock package): None where no
    earlier patch changes a package file the patch changes."""
    commits = _git("rev-list", "--reverse", "upstream..HEAD").split()
    changed: set[str] = set()
    trees = {}
    for index, commit in enumerate(commits):
        files = {f for f in _git("diff", "--name-only", f"{commit}^", commit).splitlines() if f.startswith("python/")}
        trees[f"{index + 1:04d}"] = commits[index - 1] if files & changed else None
        changed |= files
    return trees


@pytest.fixture(scope="module")
def runs(stock_root, patched_root, tmp_path_factory):
    """(the pre-image tree of each patch, each test file's run by patch; each test file's run on the patched
    package); one pytest process per tree, the processes side by side."""
    trees = _preimage_trees()
    commits = _git("rev-list", "--reverse", "upstream..HEAD").split()
    files, groups = {}, {}
    for number, (tests, _) in PREIMAGE.items():
        dest = export_tree(TARGET, tmp_path_factory.mktemp(f"tests-{number}"), commits[int(number) - 1], tuple(tests))
        files[number] = {rel: dest / rel for rel in tests}
        groups.setdefault(trees[number], []).extend(files[number].values())
    roots = {
        tree: stock_root(TARGET)
        if tree is None
        else export_tree(TARGET, tmp_path_factory.mktemp(f"pre-{tree[:12]}"), tree) / "python"
        for tree in groups
    }
    calls = {
        tree: lambda tree=tree, cwd=tmp_path_factory.mktemp("run"): run_pytest_files([roots[tree]], groups[tree], cwd)
        for tree in groups
    }
    patched = [tree_dir(TARGET) / rel for rel in ALL_TESTS]
    cwd = tmp_path_factory.mktemp("patched")
    calls["patched"] = lambda: run_pytest_files([patched_root(TARGET)], patched, cwd)
    results = side_by_side(calls)
    preimage = {
        number: {rel: results[trees[number]][path] for rel, path in by_rel.items()} for number, by_rel in files.items()
    }
    patched_runs = {str(path.relative_to(tree_dir(TARGET))): run for path, run in results["patched"].items()}
    return trees, preimage, patched_runs


def test_preimage_trees(runs):
    trees, _, _ = runs
    commits = _git("rev-list", "--reverse", "upstream..HEAD").split()
    assert trees == {number: None if tree is None else commits[int(tree) - 1] for number, tree in PREIMAGE_TREE.items()}


def test_in_patch_tests_pass_on_patched(runs):
    _, _, results = runs
    assert sorted(results) == ALL_TESTS
    for rel, run in results.items():
        assert run.outcomes, run.output[-6000:]
        assert {t: o for t, o in run.outcomes.items() if o != "passed"} == PATCHED_NOT_PASSED.get(rel, {}), run.output[
            -6000:
        ]
        assert run.returncode == 0, run.output[-6000:]


@pytest.mark.parametrize("number", sorted(PREIMAGE))
def test_each_patch_test_fails_on_its_preimage(runs, number):
    _, preimage, _ = runs
    tests, failing = PREIMAGE[number]
    for rel, expected in tests.items():
        run = preimage[number][rel]
        assert run.outcomes, run.output[-6000:]
        assert {t: o for t, o in run.outcomes.items() if o != "passed"} == expected, run.output[-6000:]
    for rel, test, line in failing:
        failure = preimage[number][rel].failures[test]
        assert line in failure, failure[-3000:]
