"""MegaMoE rows over the token cap run in passes every EP rank agrees on
(patches/sglang/0006), in the shared ``run_mega_routed_experts`` and in Kimi K3's
``_forward_mega_experts``: 4 EP ranks over gloo (k3_cap_probes/passes_ranks.py, run with
graphs_ranks.py in one process a package: conftest.py), each
holding the MoE rows sglang's own layer-boundary code gives it, running sglang 0.5.23's
real layers with DeepGEMM's fused kernel, symmetric buffer and pre-dispatch (native CUDA
code) replaced by a reference MoE whose every launch is a real all-gather + all-reduce
(k3_cap_probes/mega_moe_standin.py). A gloo timeout turns a hang into a failure.

The expected pass count comes from the rows the ranks hold, never from the patch's
``mega_moe_num_passes``: one launch per layer wherever no rank holds more than the cap (as
stock), else ceil(busiest rank's rows / cap) on every rank.
"""

from __future__ import annotations

import math

import pytest

PATHS = ("shared", "k3")
CAP = 8  # passes_ranks.CAP
LAYOUTS = {"dp4", "dp2_sp", "tp4_sp", "tp4_unpadded"}


def close(result) -> bool:
    """The output is the reference MoE's, to bf16 precision."""
    return result["max_error"] <= 0.01 * max(result["max_ref"], 1.0)


@pytest.fixture(scope="module")
def ranks(mega_moe_ranks):
    """{"plan": the rounds, "patched": ..., "stock": ...} (the probe run in conftest.py)."""
    return {**mega_moe_ranks["patched"]["passes"], **mega_moe_ranks["stock"]["passes"]}


def _rounds(result):
    """Round index -> {rank: round}, for ranks that reported."""
    by_round = {}
    for rank, out in result["ranks"].items():
        for i, rnd in enumerate(out["rounds"]):
            by_round.setdefault(i, {})[rank] = rnd
    return by_round


def test_every_rank_runs_the_busiest_ranks_passes(ranks):
    res = ranks["patched"]
    assert res["hung"] == []
    assert {rank: out["error"] for rank, out in res["ranks"].items()} == {str(r): None for r in range(4)}
    rounds = _rounds(res)
    assert len(rounds) == len(ranks["plan"]) == 15
    assert {layout for layout, *_ in ranks["plan"]} == LAYOUTS
    within_cap = 0
    for i, (layout, *_rest) in enumerate(ranks["plan"]):
        busiest = max(rnd["rows"] for rnd in rounds[i].values())
        expected = max(1, math.ceil(busiest / CAP))
        within_cap += expected == 1
        for path in PATHS:
            for rank, rnd in rounds[i].items():
                layer = rnd["layers"][path]
                assert len(layer["launches"]) == expected, (layout, path, rank, rnd["rows"], layer)
                assert rnd["rows"] == layer["out_rows"] == sum(layer["launches"])
                assert max(layer["launches"]) <= CAP
                assert close(layer), (layout, path, rank, layer)
    # No collective but the kernel's.
    assert {out["row_reductions"] for out in res["ranks"].values()} == {0}
    # The plan holds forwards within the cap (one launch, as stock), among them a DP rank
    # of twice the cap split over attention TP 2, and empty ranks beside ranks over it.
    assert within_cap == 3
    held = [[rounds[i][str(r)]["rows"] for r in range(4)] for i in rounds]
    assert [CAP, CAP, 1, 1] in held
    dp4 = [i for i, (layout, *_) in enumerate(ranks["plan"]) if layout == "dp4"]
    assert all(min(r["rows"] for r in rounds[i].values()) == 0 for i in dp4)


def test_stock_ranks_over_the_cap_fail(ranks):
    res = ranks["stock"]
    errors = {rank: out["error"] for rank, out in res["ranks"].items()}
    first = _rounds(res)[0]
    over = [rank for rank, rnd in first.items() if rnd["rows"] > CAP]
    assert over, first
    for rank in over:
        assert errors[rank].startswith("AssertionError: mega MoE: num_tokens="), errors
