"""MegaMoE under attention DP with CUDA graphs (patches/sglang/0005-0006): in every forward, eager
or replayed, every EP rank makes the same fused-kernel launches, so no configuration that
stock serves hangs, and stock's results are the expected values.

k3_cap_probes/graphs_ranks.py (run with passes_ranks.py in one process a package: conftest.py)
runs sglang 0.5.23's real layers (Kimi K3's and the shared
path) on 4 ranks over gloo, the fused kernel a real exchange per launch
(mega_moe_standin.py), graphs captured under sglang's own ``model_capture_mode()`` in
0.5.23's order and replayed as their recorded launches beside eager ranks; in graphs_own
sglang's scheduler and decode graph runner decide, rank by rank, which graph replays.
Stock hangs or asserts where the tests say so; evidence of the earlier 0002 hanging in
graphs_own, prefill_graph_over_cap and adaptive_steps_over_cap:
benchmarks/results/cpu-2026-12-05-mega-moe-graphs.
"""

from __future__ import annotations

import pytest

SCENARIOS = (
    "graphs_gathered",
    "graphs_own",
    "prefill_graph_over_cap",
    "prefill_graph_sp",
    "adaptive_steps",
    "adaptive_steps_over_cap",
    "should_use_own",
    "should_use_gathered",
)
CAP = 8  # graphs_ranks.CAP
LAYERS = ("k3", "shared")


@pytest.fixture(scope="module")
def runs(mega_moe_ranks):
    """label -> scenario -> its ranks (the probe run in conftest.py)."""
    return {label: probes["graphs"] for label, probes in mega_moe_ranks.items()}


def test_every_scenario_ran(runs):
    assert set(runs["patched"]) == set(runs["stock"]) == set(SCENARIOS)


def ranks(result):
    return [result["ranks"][str(r)] for r in range(4)]


def launch_counts(forward):
    return {layer: len(forward[layer]) for layer in LAYERS}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rank_makes_the_same_launches(runs, scenario):
    """No rank hangs, and in each forward every rank that ran it launched alike."""
    result = runs["patched"][scenario]
    assert result["hung"] == []
    per_rank = ranks(result)
    # A rank stops only on a refusal, or on the closed connection of a peer that refused.
    errors = [out["error"] for out in per_rank if out["error"]]
    assert not any("Timed out" in e for e in errors), errors
    assert all(e.startswith("RuntimeError: mega MoE: ") for e in errors if "Connection closed" not in e), errors
    for i in range(max(len(out["forwards"]) for out in per_rank)):
        counts = [launch_counts(out["forwards"][i]) for out in per_rank if len(out["forwards"]) > i]
        assert all(c == counts[0] for c in counts), (scenario, i, counts)
    for out in per_rank:
        for graph, capture in out["captures"].items():
            if capture["error"] is None:
                # A graph runs one pass whatever was captured before it.
                assert [len(capture["launches"][layer]) for layer in LAYERS] == [1, 1], (graph, capture)


@pytest.mark.parametrize("scenario", ["graphs_gathered", "prefill_graph_sp", "adaptive_steps"])
def test_what_stock_serves_runs_as_stock(runs, scenario):
    """Graphs and forwards stock completes: the same launches, rank by rank (one per layer)."""
    for patched, stock in zip(ranks(runs["patched"][scenario]), ranks(runs["stock"][scenario])):
        assert patched["captures"] == stock["captures"]
        served = stock["forwards"]
        assert served and patched["forwards"][: len(served)] == served
        assert all(launch_counts(f) == {"k3": 1, "shared": 1} for f in served)
    if scenario != "graphs_gathered":
        assert {out["error"] for out in ranks(runs["patched"][scenario])} == {None}


def test_gathered_counts_over_the_cap_run_passes_where_stock_asserts(runs):
    last = [out["forwards"][-1] for out in ranks(runs["patched"]["graphs_gathered"])]
    held = [20, 3, 0, 9]  # graphs_ranks: the all-eager forward
    for rows, forward in zip(held, last):
        for layer in LAYERS:
            assert sum(forward[layer]) == rows and max(forward[layer]) <= CAP
    assert len(last[0]["k3"]) > 1
    stock = ranks(runs["stock"]["graphs_gathered"])
    assert stock[0]["error"].startswith("AssertionError: mega MoE: num_tokens=20 exceeds")


@pytest.mark.parametrize("scenario", ["prefill_graph_over_cap", "adaptive_steps_over_cap"])
def test_a_graph_over_the_cap_fails_its_capture_where_stock_does(runs, scenario):
    for patched, stock in zip(ranks(runs["patched"][scenario]), ranks(runs["stock"][scenario])):
        failed = {g: c["error"] for g, c in stock["captures"].items() if c["error"]}
        assert failed and all(e.startswith("AssertionError: mega MoE: num_tokens=") for e in failed.values())
        assert {g for g, c in patched["captures"].items() if c["error"]} == set(failed)
        for graph, error in failed.items():
            # stock's message, raised instead of asserted
            assert patched["captures"][graph]["error"] == error.replace("AssertionError", "RuntimeError", 1)
        assert patched["forwards"] == stock["forwards"] == []


def test_own_count_flags_gather_the_counts_and_serve_over_the_cap(runs):
    """graphs_own (--enable-dp-lm-head --moe-dense-tp-size 1), decided by sglang's scheduler
    and decode graph runner. Stock publishes each rank's own count: ranks replay graphs of
    their own sizes beside an eager rank, and rank 3's 12 rows fail its assert while its
    peers replay. Patched, MLP sync publishes every rank's count: every rank replays the
    same graph or all run eager, the forwards stock serves run one launch per layer, and
    12 rows run in passes on every rank."""
    patched, stock = ranks(runs["patched"]["graphs_own"]), ranks(runs["stock"]["graphs_own"])
    assert [out["actions"][:2] for out in stock] == [
        [["replay", "decode-2", 2], ["replay", "decode-4", 4]],
        [["replay", "decode-1", 1], ["replay", "decode-4", 3]],
        [["replay", "decode-1", 1], ["replay", "decode-1", 1]],
        [["replay", "decode-2", 2], ["eager", 6]],
    ]
    assert stock[3]["error"].startswith("AssertionError: mega MoE: num_tokens=12 exceeds")
    assert [out["actions"] for out in patched] == [
        [["replay", "decode-2", bs[0]], ["eager", bs[1]], ["eager", bs[2]]]
        for bs in zip([2, 1, 1, 2], [4, 3, 1, 6], [4, 2, 1, 12])
    ]
    served = [f for out in stock for f in out["forwards"][:2]]
    assert all(launch_counts(f) == {"k3": 1, "shared": 1} for f in served)
    for out in patched:
        assert out["error"] is None
        assert [launch_counts(f) for f in out["forwards"]] == [{"k3": 1, "shared": 1}] * 2 + [{"k3": 2, "shared": 2}]


def test_should_use_mega_moe_is_decided_alike(runs):
    gathered = [out["decisions"] for out in ranks(runs["patched"]["should_use_gathered"])]
    assert gathered == [out["decisions"] for out in ranks(runs["stock"]["should_use_gathered"])]
    assert len(set(gathered)) == 1
    # graphs_own's layout: stock sends the rank over the cap to the fallback while its peers
    # enter MegaMoE; patched, every rank decides from every rank's count, as when gathered.
    stock = [out["decisions"] for out in ranks(runs["stock"]["should_use_own"])]
    assert stock == [True, False, True, True]
    assert [out["decisions"] for out in ranks(runs["patched"]["should_use_own"])] == gathered
