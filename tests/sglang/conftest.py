"""The MegaMoE rank probes (k3_cap_probes/passes_ranks.py for test_k3_mega_moe_passes.py,
graphs_ranks.py for test_k3_mega_moe_graphs.py) run in one process a package
(k3_cap_probes/ranks.py): sglang's import, a large part of each run's cost, is paid once for both."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_probe, side_by_side

RANKS = Path(__file__).resolve().parent / "k3_cap_probes" / "ranks.py"
# A gloo wait this long only ends in a hang (a rank whose peers finished sees their closed
# connection at once, not the timeout); the probes' join deadlines then report the rank as hung.
GLOO_TIMEOUT = "120"


@pytest.fixture(scope="session")
def mega_moe_ranks(patched_root, stock_root):
    """label -> {"passes": passes_ranks' output, "graphs": graphs_ranks' output}."""
    roots = {"patched": patched_root("sglang"), "stock": stock_root("sglang")}
    return side_by_side(
        {
            label: lambda label=label, root=root: run_probe(root, RANKS, label, GLOO_TIMEOUT)
            for label, root in roots.items()
        }
    )
