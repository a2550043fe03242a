"""Kimi K3 MegaMoE token cap at startup (patches/sglang/0003): one WARNING where a
simple per-rank row bound exceeds the cap, naming the rows, the passes and the cap
that runs them in one pass; never a refusal, never a changed request pool.

Runs sglang 0.5.23's real startup hook (``validate_mega_moe_token_budget_for_model``
on real ``ServerArgs`` objects, after the real hooks the pipeline runs before it: a
PD node's graph roles and the DP handlers) in a subprocess probe, once against the
stock tree and once against the patched one, and the runtime's own pass count
(``mega_moe.mega_moe_passes``, patches/sglang/0002) on the rows the warning names.
No stubs.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from helpers import run_probe, side_by_side

STARTUP = Path(__file__).resolve().parent / "k3_cap_probes" / "startup.py"
K3 = "KimiK3ForConditionalGeneration"
K3_LINEAR = "KimiK3LinearForCausalLM"
CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"
TP8 = {"tp_size": 8, "ep_size": 8, "chunked_prefill_size": 16384}
DSPARK = {"speculative_algorithm": "DSPARK", "speculative_num_draft_tokens": 8}

# name -> (architecture, server args, decode graph max bs, rows per rank worked out by hand)
TABLE = {
    # The B300 recipe: the 16384-token chunk on attention TP 8 (SP-MoE) is 2048 rows;
    # decode is 48 requests x 8 verify tokens = 384.
    "recipe": (K3, {**TP8, **DSPARK, "max_running_requests": 48}, 48, 2048),
    # TP8/DP2: the per-DP chunk 8192 on attention TP 4.
    "dp2": (K3, {**TP8, "attn_dp_size": 2}, 64, 2048),
    # TP8/DP8: the per-DP chunk 2048 on attention TP 1.
    "dp8": (K3_LINEAR, {**TP8, "attn_dp_size": 8}, 64, 2048),
    # TP8/DP2 with an odd per-DP chunk: 8191 padded to 8192 on attention TP 4.
    "dp2_odd": (K3, {**TP8, "attn_dp_size": 2, "chunked_prefill_size": 16382}, 64, 2048),
    # A 1024-token chunk is 128 rows; decode 64 requests x 8 verify tokens = 512.
    "decode_bound": (K3, {**TP8, **DSPARK, "chunked_prefill_size": 1024, "max_running_requests": 64}, 64, 512),
    # Chunked prefill off: decode's 256-batch graph only.
    "unchunked": (K3, {**TP8, "chunked_prefill_size": -1}, 256, 256),
    # A PD decode node prefills nothing: decode's 160-batch graph.
    "pd_decode": (K3, {**TP8, "disaggregation_mode": "decode"}, 160, 160),
    # A PD prefill node runs no decode graph: the 2048-row chunk.
    "pd_prefill": (K3_LINEAR, {**TP8, "disaggregation_mode": "prefill"}, 4096, 2048),
}
# A few caps per row: at, just under, and far under the bound, and above it.
CAP_FRACTIONS = ((1, 1), (1, 2), (3, 10), (2, 1))
WARNING = re.compile(
    r"^(?P<arch>\w+) with MegaMoE: up to (?P<rows>\d+) rows per rank \(the per-DP prefill chunk on its "
    r"attention-TP shard, or the largest decode graph batch x verify width\) exceed "
    rf"{CAP_ENV}=(?P<cap>\d+); such forwards run the routed experts in (?P<passes>\d+) passes\. "
    rf"Set {CAP_ENV}=(?P<value>\d+) to run them in one pass\.$"
)


def caps(rows):
    return sorted({rows - 1, *(max(1, rows * a // b) for a, b in CAP_FRACTIONS)})


def cases():
    out = []
    for name, (arch, args, decode_max_bs, rows) in TABLE.items():
        for cap in caps(rows):
            out.append(
                {"name": f"{name}@{cap}", "arch": arch, "cap": cap, "args": args, "decode_max_bs": decode_max_bs}
            )
    return out


def run(root):
    rows = sorted({rows for *_, rows in TABLE.values()})
    return run_probe(root, STARTUP, json.dumps(cases()), *map(str, rows))


@pytest.fixture(scope="module")
def both(patched_root, stock_root):
    roots = {"patched": patched_root("sglang"), "stock": stock_root("sglang")}
    return side_by_side({label: lambda root=root: run(root) for label, root in roots.items()})


@pytest.fixture(scope="module")
def patched(both):
    return both["patched"]


@pytest.fixture(scope="module")
def stock(both):
    return both["stock"]


@pytest.mark.parametrize("name", sorted(TABLE))
def test_warns_iff_the_bound_exceeds_the_cap(patched, name):
    arch, args, _decode_max_bs, rows = TABLE[name]
    for cap in caps(rows):
        res = patched[f"{name}@{cap}"]
        assert res["error"] is None, res
        assert res["max_running_requests"] == args.get("max_running_requests"), res
        if cap >= rows:
            assert res["warnings"] == [], (cap, res)
            continue
        (line,) = res["warnings"]
        m = WARNING.match(line)
        assert m, line
        passes = math.ceil(rows / cap)
        assert m.groupdict() == {
            "arch": arch,
            "rows": str(rows),
            "cap": str(cap),
            "passes": str(passes),
            "value": str(rows),
        }
        # The runtime runs these rows in the passes the warning names under this cap
        # (res["passes"] is computed under the case's cap) ...
        assert res["passes"][str(rows)][0] == passes, res["passes"]


def test_the_named_value_runs_the_bound_in_one_pass(patched):
    for name, (*_, rows) in TABLE.items():
        # ... and in one pass under the value it names: the case whose cap is the rows.
        res = patched[f"{name}@{rows}"]
        assert res["passes"][str(rows)] == [1, rows], (name, res["passes"])


def test_stock_says_nothing_about_the_cap(stock):
    """Stock checks no token cap for K3: every case starts without a word."""
    for name, res in stock.items():
        assert (res["error"], res["warnings"], res["passes"]) == (None, [], None), (name, res)
