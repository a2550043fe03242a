"""Every quantisation method of sglang-kt 0.7.2 that can back a KT GPU expert x KT flag x GPU
placement x EP size, on both packages (quant_grid.py, one pytest process each): stock computes
with unloaded numbers in the cells quant_grid.WRONG names and refuses none; the patch refuses
exactly those, each in one line, and computes right in the rest."""

from pathlib import Path

import pytest

from helpers import check_pytest_run, run_pytest, side_by_side

HERE = Path(__file__).resolve().parent
GRID = HERE / "quant_grid.py"
TARGET = "sglang-kt"
STOCK_TEST = "test_stock_computes_wrong_in_the_cells_named"
PATCHED_TEST = "test_patched_refuses_the_cells_named"


@pytest.fixture(scope="module")
def runs(stock_root, patched_root, tmp_path_factory):
    roots = {"stock": stock_root(TARGET), "patched": patched_root(TARGET)}
    return side_by_side(
        {
            label: lambda root=root, cwd=tmp_path_factory.mktemp(label): run_pytest(
                [root, HERE, HERE.parent], GRID, cwd
            )
            for label, root in roots.items()
        }
    )


def test_stock_computes_wrong_where_the_patch_refuses(runs):
    check_pytest_run(runs["stock"], {STOCK_TEST: "passed", PATCHED_TEST: "failed"})


def test_patched_refuses_where_stock_computed_wrong(runs):
    check_pytest_run(runs["patched"], {STOCK_TEST: "failed", PATCHED_TEST: "passed"})
