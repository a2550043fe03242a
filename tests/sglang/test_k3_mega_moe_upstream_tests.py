"""The unit tests carried inside the MegaMoE patches (patches/sglang/0001, 0002, 0005, 0006), in
upstream's layout (``test/registered/unit/...``): each patch's test, as that patch adds it, fails
on the patch's pre-image (the tree before it) for the reason it names, and every test as the
series leaves it passes on the patched package.

The pre-images are commits of the laid-out tree; the patched package is the tree's, or an
installed wheel's (SGL_OVERLAY_PATCHED_ROOT_SGLANG). Stubs inside those tests: DeepGEMM's
symmetric buffer and fused MegaMoE kernel and ``mega_moe_pre_dispatch`` (native kernels),
replaced by a reference MoE.
"""

from __future__ import annotations

import subprocess

import pytest

from helpers import export_tree, in_patch_test, run_pytest_files, side_by_side, tree_dir

BUDGET_DP = "test/registered/unit/arg_groups/test_mega_moe_token_budget_dp.py"
NO_FALLBACK = "test/registered/unit/arg_groups/test_mega_moe_token_budget_no_fallback.py"
CAP_ERROR = "test/registered/unit/layers/moe/test_mega_moe_token_cap_error.py"
GATHER = "test/registered/unit/utils/test_require_mlp_tp_gather_megamoe.py"
PASSES = "test/registered/unit/layers/moe/test_mega_moe_passes.py"
# Per patch, its tests' outcomes on its pre-image (a test not named passes there), and a line
# of the report of one test that fails.
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
        (BUDGET_DP, "TestMegaMoeTokenBudgetDataParallel::test_per_dp_chunk_is_not_divided_again", "Regex didn't match"),
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
        (CAP_ERROR, "TestMegaMoeTokenCapError::test_shared_path_raises", "AssertionError: mega MoE: num_tokens=9"),
    ),
    # Each DP rank keeps its own count under --enable-dp-lm-head --moe-dense-tp-size 1.
    "0005": (
        {GATHER: {"test_megamoe_gathers_every_dp_rank_count[megamoe-True]": "failed"}},
        (GATHER, "test_megamoe_gathers_every_dp_rank_count[megamoe-True]", "assert False is True"),
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
        (PASSES, "TestMegaMoePasses::test_rows_over_the_cap_run_in_passes", "num_tokens=40 exceeds cap"),
    ),
}
ALL_TESTS = [BUDGET_DP, NO_FALLBACK, CAP_ERROR, GATHER, PASSES]


def _patch_commit(number: str) -> str:
    """The tree's commit of the series' patch `number` (the tree holds one commit per patch)."""
    tree = tree_dir("sglang")
    subjects = subprocess.run(
        ["git", "-C", str(tree), "log", "--reverse", "--format=%H", "upstream..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return subjects[int(number) - 1]


@pytest.fixture(scope="module")
def runs(patched_root, tmp_path_factory):
    """Each patch's tests (as the patch adds them) on its pre-image, and every test on the patched
    package; one pytest process a run, the runs side by side."""
    calls = {}
    for number, (tests, _) in PREIMAGE.items():
        commit = _patch_commit(number)
        pre = export_tree("sglang", tmp_path_factory.mktemp(f"pre-{number}"), f"{commit}^")
        post = export_tree("sglang", tmp_path_factory.mktemp(f"post-{number}"), commit)
        files = [post / rel for rel in tests]
        calls[number] = lambda pre=pre, files=files, cwd=tmp_path_factory.mktemp(number): run_pytest_files(
            [pre / "python"], files, cwd
        )
    files = [in_patch_test("sglang", rel) for rel in ALL_TESTS]
    cwd = tmp_path_factory.mktemp("patched")
    calls["patched"] = lambda: run_pytest_files([patched_root("sglang")], files, cwd)
    return side_by_side(calls)


def test_in_patch_tests_pass_on_patched(runs):
    results = runs["patched"]
    assert len(results) == len(ALL_TESTS)
    for run in results.values():
        assert run.outcomes and set(run.outcomes.values()) == {"passed"}, run.output[-6000:]
        assert run.returncode == 0, run.output[-6000:]


@pytest.mark.parametrize("number", sorted(PREIMAGE))
def test_each_patch_test_fails_on_its_preimage(runs, number):
    tests, (rel, failing, line) = PREIMAGE[number]
    results = {rel.split("/")[-1]: run for rel_path, run in runs[number].items() for rel in [str(rel_path)]}
    for rel_path, expected in tests.items():
        run = results[rel_path.split("/")[-1]]
        assert run.outcomes, run.output[-6000:]
        assert {t: o for t, o in run.outcomes.items() if o != "passed"} == expected, run.output[-6000:]
    failure = results[rel.split("/")[-1]].failures[failing]
    assert line in failure, failure[-3000:]
