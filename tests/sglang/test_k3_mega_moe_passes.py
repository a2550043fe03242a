"""MegaMoE rows over the token cap run in passes every EP rank agrees on
(patches/sglang/0002), in the shared ``run_mega_routed_experts`` and in Kimi K3's
``_forward_mega_experts``, which runs its kernel through the same helpers.

Runs sglang 0.5.23's real code in subprocess probes, on the stock and the patched
tree, with DeepGEMM's fused MegaMoE kernel, its symmetric buffer and the
``mega_moe_pre_dispatch`` JIT kernel (native CUDA code that cannot run on a CPU)
replaced by a reference MoE from the same expert weights
(k3_cap_probes/mega_moe_standin.py). On one rank (passes.py) and on 4 ranks over
gloo whose stand-in kernel is a real all-gather + all-reduce on every launch
(passes_ranks.py), with a gloo timeout that turns a hang into a failure.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from helpers import run_probe, side_by_side

PROBES = Path(__file__).resolve().parent / "k3_cap_probes"
CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"
ROWS = 40
# rows:cap pairs: one pass (cap above and at the rows), 2, 4 and 5 passes, no rows.
ONE_PASS, AT_CAP = f"{ROWS}:64", f"{ROWS}:{ROWS}"
MULTI = [f"{ROWS}:39", f"{ROWS}:13", f"{ROWS}:8"]
EMPTY = "0:8"
PAIRS = [ONE_PASS, AT_CAP, *MULTI, EMPTY]
PATHS = ("shared", "k3")
# Long enough that a rank slowed by a loaded machine never times out: a rank left waiting
# by peers that finished sees their closed connection at once, not the timeout.
GLOO_TIMEOUT = "120"
RANK_CAP = 8  # passes_ranks.CAP
LAYOUTS = {"dp4", "dp2_sp", "tp4_sp", "tp4_unpadded"}


def close(result) -> bool:
    """The output is the reference MoE's, to bf16 precision."""
    return result["max_error"] <= 0.01 * max(result["max_ref"], 1.0)


@pytest.fixture(scope="module")
def one_rank(patched_root, stock_root):
    patched, stock = patched_root("sglang"), stock_root("sglang")

    def run(root, flags=()):
        return lambda: run_probe(root, PROBES / "passes.py", *PAIRS, flags=flags)

    return side_by_side({"patched": run(patched), "stock": run(stock), "stock-O": run(stock, ("-O",))})


@pytest.fixture(scope="module")
def ranks(patched_root, stock_root):
    script = PROBES / "passes_ranks.py"
    patched, stock = patched_root("sglang"), stock_root("sglang")
    runs = side_by_side(
        {
            "patched": lambda: run_probe(patched, script, "patched", GLOO_TIMEOUT),
            "stock": lambda: run_probe(stock, script, "stock", GLOO_TIMEOUT),
        }
    )
    return {**runs["patched"], **runs["stock"]}


@pytest.mark.parametrize("path", PATHS)
def test_k_passes_give_the_one_pass_output(one_rank, path):
    res = one_rank["patched"][path]
    assert res[ONE_PASS]["launches"] == [ROWS]
    assert res[AT_CAP]["launches"] == [ROWS]
    for pair in [ONE_PASS, AT_CAP, *MULTI]:
        assert res[pair]["error_type"] is None, res[pair]["error"]
        assert res[pair]["out"] == res[ONE_PASS]["out"], pair
        # The reference includes the routed scaling factor once.
        assert close(res[pair]), res[pair]
    for pair in MULTI:
        cap = int(pair.split(":")[1])
        launches = res[pair]["launches"]
        assert len(launches) == math.ceil(ROWS / cap), (pair, launches)
        assert sum(launches) == ROWS and max(launches) <= cap, (pair, launches)
    # No rows: one launch, as stock does, so an empty rank still meets its peers.
    assert res[EMPTY]["error_type"] is None and res[EMPTY]["launches"] == [0]


def test_one_warning_per_process(one_rank):
    """Of everything sglang logged at WARNING, one line about the cap, over ten calls."""
    assert [line for line in one_rank["patched"]["warnings"] if CAP_ENV in line] == [
        f"MegaMoE: {ROWS} rows on the busiest EP rank exceed {CAP_ENV}=39; running the "
        f"routed experts in 2 passes. Set {CAP_ENV}={ROWS} to run them in one pass. "
        "Logged once per process."
    ]


@pytest.mark.parametrize("path", PATHS)
def test_stock_fails_over_the_cap(one_rank, path):
    """Stock asserts; under -O the assert is gone and the rows overflow the buffer."""
    stock, stock_o = one_rank["stock"][path], one_rank["stock-O"][path]
    assert stock[ONE_PASS]["out"] == one_rank["patched"][path][ONE_PASS]["out"]
    for pair in MULTI:
        assert stock[pair]["error_type"] == "AssertionError", stock[pair]
        assert stock[pair]["error"].startswith("mega MoE: num_tokens=40 exceeds"), stock[pair]
        assert stock[pair]["launches"] == []
        assert stock_o[pair]["error_type"] == "RuntimeError", stock_o[pair]
        assert "overflow the" in stock_o[pair]["error"]


def _rounds(result):
    """Round index -> {rank: round}, for ranks that reported."""
    by_round = {}
    for rank, out in result["ranks"].items():
        for i, rnd in enumerate(out["rounds"]):
            by_round.setdefault(i, {})[rank] = rnd
    return by_round


def _busiest(layout, counts, rows, path):
    """The row count the pass count must cover: the shared path bounds an SP-MoE
    shard by its DP rank's whole count; K3 divides it over its shards."""
    if path == "shared" and layout in ("dp4", "dp2_sp"):
        return max(counts)
    return max(rows)


def test_every_rank_runs_the_same_passes(ranks):
    res = ranks["patched"]
    assert res["hung"] == []
    assert {rank: out["error"] for rank, out in res["ranks"].items()} == {str(r): None for r in range(4)}
    rounds = _rounds(res)
    assert len(rounds) == len(ranks["plan"]) == 12
    assert {layout for layout, *_ in ranks["plan"]} == LAYOUTS
    for i, (layout, _fields, counts, rows) in enumerate(ranks["plan"]):
        for path in PATHS:
            expected = max(1, math.ceil(_busiest(layout, counts, rows, path) / RANK_CAP))
            for rank, rnd in rounds[i].items():
                layer = rnd["layers"][path]
                assert len(layer["launches"]) == expected, (layout, path, rows, rank, layer)
                assert rnd["rows"] == rows[int(rank)] == layer["out_rows"] == sum(layer["launches"])
                assert max(layer["launches"]) <= RANK_CAP
                assert close(layer), (layout, path, rank, layer)
    # No collective but the kernel's.
    assert {out["row_reductions"] for out in res["ranks"].values()} == {0}
    # The plan holds empty ranks next to ranks over the cap, and unequal DP ranks.
    dp4 = [rows for layout, _, _, rows in ranks["plan"] if layout == "dp4"]
    assert all(min(rows) == 0 and max(rows) > RANK_CAP for rows in dp4)


def test_stock_ranks_over_the_cap_assert(ranks):
    res = ranks["stock"]
    errors = {rank: out["error"] for rank, out in res["ranks"].items()}
    rows = ranks["plan"][0][3]
    for rank, n in enumerate(rows):
        if n > RANK_CAP:
            assert errors[str(rank)].startswith(f"AssertionError: mega MoE: num_tokens={n} exceeds")
