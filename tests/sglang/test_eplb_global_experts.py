"""sglang 0004: ``ExpertLocationMetadata.logical_to_all_physical(require_global_experts=True)``
names the global-expert rows (the ModelOpt NVFP4 MoE input scales) by the physical-to-logical
map. The patch's own unit test, taken from the patched tree (upstream's layout, CPU only, no
stand-ins beyond the model-registry lookup it patches), passes on the patched package and fails
on stock, where every non-trivial placement of its grid writes a row with another expert's scale
and every trivial one is right."""

import pytest

from helpers import check_pytest_run, in_patch_test, run_pytest, side_by_side

TARGET = "sglang"
REL = "test/registered/unit/eplb/test_expert_location_global_experts.py"
TESTS = (
    "TestGlobalExpertRows::test_every_row_takes_the_expert_it_holds",
    "TestGlobalExpertRows::test_rows_of_a_placement_file",
)


@pytest.fixture(scope="module")
def runs(stock_root, patched_root, tmp_path_factory):
    roots = {"stock": stock_root(TARGET), "patched": patched_root(TARGET)}
    test_file = in_patch_test(TARGET, REL)
    return side_by_side(
        {
            label: lambda root=root, cwd=tmp_path_factory.mktemp(label): run_pytest([root], test_file, cwd)
            for label, root in roots.items()
        }
    )


def test_in_patch_test_passes_on_patched(runs):
    check_pytest_run(runs["patched"], dict.fromkeys(TESTS, "passed"))


def test_in_patch_test_fails_on_stock(runs):
    run = runs["stock"]
    check_pytest_run(run, dict.fromkeys(TESTS, "failed"))
    grid, placement_file = (run.failures[t] for t in TESTS)
    assert "144 of 168 placements write a global row with another expert" in grid, grid[-3000:]
    assert "[[0, 4], [1, 5], [2], [3]] != [[1, 5], [3], [0, 4], [2]]" in placement_file, placement_file[-3000:]
