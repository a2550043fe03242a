"""The per-tree modules of this suite (gpu_expert_remap.py, expert_maps.py: each test states stock's and the
patch's values with per_tree) run in one pytest process per package: sglang's import, most of each run's
cost, is paid once for both."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_per_tree

HERE = Path(__file__).resolve().parent
REMAP = HERE / "gpu_expert_remap.py"
MAPS = HERE / "expert_maps.py"
TARGET = "sglang-kt"


@pytest.fixture(scope="session")
def per_tree_runs(stock_root, patched_root, tmp_path_factory):
    """label -> module -> its run on that package."""
    return run_per_tree({"stock": stock_root(TARGET), "patched": patched_root(TARGET)}, [REMAP, MAPS], tmp_path_factory)
