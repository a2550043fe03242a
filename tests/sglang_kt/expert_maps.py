"""Every KT GPU slot runs its own expert under every expert map, all-experts loader
and run-time move, or the server refuses the combination (sglang-kt 0.7.2, series
0003-0007). Not collected by the suite: test_kt_expert_maps.py runs it with the stock or the
patched package first on PYTHONPATH and TREE_ENV naming which; each test states what it
expects on each package (``per_tree``).

Each case builds the layer with kt_layer.py (stand-ins listed in gpu_expert_remap.py); a
rebalance at run time is eplb_rebalance.py's test. What a slot must hold comes from the maps
themselves: the map file the test writes, the map the real EPLB algorithm makes
(``ExpertLocationMetadata.init_by_eplb``, as the layer's metadata reports it), and the KT
tables (slot k of EP rank r is physical expert r * local + gpu_index_to_logical[k], which
must hold logical expert physical_to_logical[physical]); what stock holds instead is stated
as values.

Paths: ``none`` and ``trivial`` as in gpu_expert_remap.py; ``mapfile`` = an
``--init-expert-location`` JSON with ``physical_to_logical_map`` (MAP_FILE), read by
the real ``compute_initial_expert_location_metadata``; ``eplbmap`` = the same with
the map the real EPLB algorithm computes from seeded counts.

Stand-ins beyond those of gpu_expert_remap.py: none for native code. Test
plumbing: the model-registry lookup of ``ModelConfigForExpertLocation`` answers the
case's layer and expert counts; the CPU-expert engine stand-in keeps its own copy of
the GPU-expert mask (kt-kernel's engine has one, which a dynamic update rewrites); for
the dynamic-update step the real ``SharedFullContext`` is built without its host
buffers and its full layer is filled from the checkpoint instead of through the KT
engine's transfer (both need the CPU-expert engine), which is not the code under test.
For NVFP4 full-GPU prefill the full layer is not filled at all: what its load would
transfer is read from the real ``SharedFullContext.weight_names``, everything else is
marked unwritten (NaN). gpt-oss MXFP4 goes through the real
``GptOssForCausalLM._load_mxfp4_experts_weights`` (the model object stands in with its
parameters and config only). Redundant experts: routing is the real static dispatch
map and the real ``mask_and_remap_expert_ids`` run eagerly (it is compiled on a GPU).
"""

import kt_layer
import pytest
from kt_layer import MAP_PATHS, held, physical_map, reachable_slots, whole_slots, wrong_weight_slots

from helpers import per_tree

E = 8
MAP_FILE = [5, 2, 7, 0, 6, 3, 1, 4]  # physical expert p holds logical expert MAP_FILE[p]
# --ep-num-redundant-experts 2: logical experts 5 and 2 have two physical copies, 4 only one, past the first 8.
MAP_REDUNDANT = [5, 2, 7, 0, 6, 3, 1, 5, 4, 2]
NVFP4 = dict(modelopt=True, hidden_size=64, intermediate_size=64, num_routed_experts=E, strategy="explicit")

EPLB_LINE = (
    "--enable-eplb with KTransformers experts (--kt-weight-path) needs every local expert on the GPU: a "
    "rebalance moves GPU weights as physical experts but neither the KT GPU-expert slots and masks nor the "
    "CPU experts (layer 1: GPU experts [1, 2] of local experts 0..3). Put every local expert on the GPU, or "
    "drop --enable-eplb (place GPU experts with --kt-expert-placement-strategy, or fix a placement with "
    "--init-expert-location)."
)
REDUNDANT_LINE = (
    "--ep-num-redundant-experts does not support KTransformers experts (--kt-weight-path): the KT "
    "GPU-expert masks and the CPU experts cover the model's logical experts, not redundant physical "
    "copies. Set --ep-num-redundant-experts 0; place GPU experts with --kt-expert-placement-strategy."
)


def full_prefill_line(method, unloaded):
    return (
        f"--kt-gpu-prefill-token-threshold does not support {method} GPU experts: the full-GPU prefill layer "
        f"does not load {unloaded}. Drop --kt-gpu-prefill-token-threshold; prefill then runs on the hybrid "
        "CPU/GPU path."
    )


FULL_PREFILL_NVFP4_LINE = full_prefill_line(
    "ModelOptNvFp4FusedMoEMethod", "w13_weight_scale_2, w2_weight_scale_2, w13_input_scale, w2_input_scale"
)
MXFP4_PREFILL_LINE = full_prefill_line("Mxfp4MoEMethod", "w13_weight_bias, w2_weight_bias")


def _with_path(cfg, path):
    out = dict(cfg, path=path)
    if path == "mapfile":
        out["physical_to_logical"] = MAP_FILE
    return out


def _nvfp4_cases():
    """Each NVFP4 runner branch whose input-scale rows a slot reads, under both maps."""
    layouts = {
        "auto": [dict(gpu_experts=[1, 4, 6])],
        "flashinfer_cutlass": [dict(gpu_experts=[1, 4, 6])],
        "flashinfer_cutedsl": [dict(gpu_experts=[1, 3], ep_size=2, ep_rank=r) for r in (0, 1)],
    }
    return {
        f"nvfp4/{backend}/ep{lay.get('ep_rank', 0)}of{lay.get('ep_size', 1)}/{path}": _with_path(
            dict(NVFP4, moe_runner_backend=backend, **lay), path
        )
        for backend, lays in layouts.items()
        for lay in lays
        for path in MAP_PATHS
    }


FUSED_MASKS = {"full": list(range(E)), "1_3": [1, 3], "0_2_3_6": [0, 2, 3, 6], "1_4_6": [1, 4, 6]}


def _fused_cases():
    """gpt-oss BF16: all experts in one tensor through weight_loader_fused, EP 2 both ranks."""
    base = dict(num_routed_experts=E, strategy="explicit", loader="fused", hidden_size=64, intermediate_size=64)
    return {
        f"fused/{mask}/ep{rank}of2/{path}": _with_path(dict(base, gpu_experts=experts, ep_size=2, ep_rank=rank), path)
        for mask, experts in FUSED_MASKS.items()
        for rank in (0, 1)
        for path in ("none", "trivial", *MAP_PATHS)
    }


def _fused_plain_cases():
    """gpt-oss BF16 through weight_loader_fused into the layer without KT: one EP rank and both ranks of EP 2."""
    base = dict(num_routed_experts=E, strategy="explicit", loader="fused", hidden_size=64, intermediate_size=64)
    lays = {"ep0of1": dict(kt=False), **{f"ep{r}of2": dict(kt=False, ep_size=2, ep_rank=r) for r in (0, 1)}}
    return {
        f"fused_nokt/{name}/{path}": _with_path(dict(base, **lay), path)
        for name, lay in lays.items()
        for path in ("none", "trivial", "mapfile")
    }


def _gpt_oss_mxfp4_cases():
    """gpt-oss MXFP4: the real model loader (GptOssForCausalLM._load_mxfp4_experts_weights)
    into the KT layer on EP 1 and both ranks of EP 2, and into the plain layer."""
    base = dict(num_routed_experts=E, strategy="explicit", loader="gpt_oss_mxfp4", hidden_size=64, intermediate_size=64)
    lays = {"ep0of1": dict(gpu_experts=[1, 4, 6])}
    lays.update({f"ep{r}of2": dict(gpu_experts=[1, 3], ep_size=2, ep_rank=r) for r in (0, 1)})
    lays["nokt"] = dict(kt=False)
    lays.update({f"nokt_ep{r}of2": dict(kt=False, ep_size=2, ep_rank=r) for r in (0, 1)})
    return {
        f"mxfp4/{name}/{path}": _with_path(dict(base, **lay), path)
        for name, lay in lays.items()
        for path in ("none", "trivial", *MAP_PATHS)
    }


def _per_expert_cases():
    """The per-expert loader under both maps (right before this series too)."""
    lays = {"ep0of1": dict(gpu_experts=[1, 4, 6])}
    lays.update({f"ep{r}of2": dict(gpu_experts=[1, 3], ep_size=2, ep_rank=r) for r in (0, 1)})
    return {
        f"bf16/{name}/{path}": _with_path(dict(num_routed_experts=E, strategy="explicit", **lay), path)
        for name, lay in lays.items()
        for path in MAP_PATHS
    }


def _move_cases():
    dyn = dict(num_routed_experts=E, strategy="explicit", gpu_experts=[1, 4, 6], path="none")
    dyn.update(dynamic_update=True, batch_experts=[2, 5, 7, 2, 5, 7])
    kt_eplb = dict(tp_size=2, ep_size=2, enable_eplb=True, kt_weight_path="/kt-weights")
    return {
        "dynamic/bf16": dyn,
        "dynamic/nvfp4": dict(dyn, **NVFP4, moe_runner_backend="auto", prefill_threshold=512),
        # The flag alone: the update promotes experts from the full-GPU prefill layer only.
        "dynamic_flag/nvfp4": dict(
            NVFP4, gpu_experts=[1, 4, 6], path="none", moe_runner_backend="auto", dynamic_flag=True
        ),
        "dynamic/mxfp4": dict(
            dyn,
            loader="gpt_oss_mxfp4",
            hidden_size=64,
            intermediate_size=64,
            prefill_threshold=512,
        ),
        "full_prefill/nvfp4": dict(
            NVFP4,
            gpu_experts=[1, 4, 6],
            path="none",
            moe_runner_backend="auto",
            prefill_threshold=512,
            full_prefill=True,
        ),
        "full_prefill/bf16": dict(
            num_routed_experts=E, strategy="explicit", gpu_experts=[1, 4, 6], path="none", prefill_threshold=512
        ),
        "server_args/eplb_kt": dict(server_args=kt_eplb),
        "eplb/kt_partial": dict(
            num_routed_experts=E, strategy="explicit", gpu_experts=[1, 2], path="none", ep_size=2, enable_eplb=True
        ),
        "eplb/kt_all_local": dict(
            num_routed_experts=E,
            strategy="explicit",
            gpu_experts=[0, 1, 2, 3],
            path="none",
            ep_size=2,
            ep_rank=1,
            enable_eplb=True,
        ),
        "server_args/eplb": dict(server_args=dict(tp_size=2, ep_size=2, enable_eplb=True)),
        "server_args/kt_mapfile": dict(
            server_args=dict(tp_size=2, ep_size=2, kt_weight_path="/kt-weights", init_expert_location="map.json")
        ),
    }


def _redundant_cases():
    """--ep-num-redundant-experts 2 on one EP rank under a placement file and under the
    real EPLB algorithm's map, the same placement without redundant experts as the
    control, and the server-argument check."""
    base = dict(num_routed_experts=E, strategy="explicit", gpu_experts=[1, 4, 6], route=True)
    kt = dict(tp_size=1, ep_size=1, kt_weight_path="/kt-weights")
    return {
        "redundant/mapfile": dict(base, redundant=2, path="mapfile", physical_to_logical=MAP_REDUNDANT),
        "redundant/eplbmap": dict(base, redundant=2, path="eplbmap"),
        "redundant/control/mapfile": dict(base, path="mapfile", physical_to_logical=MAP_FILE),
        "server_args/redundant_kt": dict(server_args=dict(kt, ep_num_redundant_experts=2)),
        "server_args/redundant": dict(server_args=dict(tp_size=1, ep_size=1, ep_num_redundant_experts=2)),
    }


CASES = {
    **_nvfp4_cases(),
    **_fused_cases(),
    **_fused_plain_cases(),
    **_gpt_oss_mxfp4_cases(),
    **_per_expert_cases(),
    **_move_cases(),
    **_redundant_cases(),
}


@pytest.fixture(scope="module")
def results():
    return kt_layer.run_cases(CASES)


def mxfp4_wrong_slots(res, cfg):
    """Reachable slots (KT) or local physical experts (plain layer) of which any MXFP4
    tensor (blocks, scales, biases) holds another expert than the one routed there."""
    if cfg.get("kt", True):
        want = reachable_slots(res, cfg)
    else:
        local = cfg["num_routed_experts"] // cfg.get("ep_size", 1)
        offset = cfg.get("ep_rank", 0) * local
        want = [(k, physical_map(res, cfg)[offset + k]) for k in range(local)]
    if "error" in res:
        return len(want)
    return sum(set(res["slot_tensors"][k].values()) != {e} for k, e in want)


def nvfp4_expected_pairs(res, cfg, gemm):
    """(weight_scale_2 expert, input-scale expert) slot k must compute with: its own
    expert's, or one scalar over every expert (expert 0's: the largest input scale)."""
    scalar = cfg["moe_runner_backend"] == "flashinfer_cutlass" or (
        cfg["moe_runner_backend"] == "flashinfer_cutedsl" and gemm == "w13"
    )
    return [(e, 0 if scalar else e) for _, e in reachable_slots(res, cfg)]


def nvfp4_wrong_slots(res, cfg):
    wrong = 0
    for k, _ in reachable_slots(res, cfg):
        pairs = [(res[f"{g}_slots"][k]["weight_scale_2"], res[f"{g}_slots"][k]["input_scale"]) for g in ("w13", "w2")]
        wrong += pairs != [nvfp4_expected_pairs(res, cfg, g)[k] for g in ("w13", "w2")]
    return wrong


def _names(prefix):
    return [n for n in CASES if n.startswith(prefix)]


def plain_wrong_slots(res, cfg):
    """Local physical experts of the layer without KT that hold another expert (all of them when loading
    raised)."""
    local = cfg["num_routed_experts"] // cfg.get("ep_size", 1)
    offset = cfg.get("ep_rank", 0) * local
    want = [physical_map(res, cfg)[offset + k] for k in range(local)]
    if "error" in res:
        return len(want)
    return sum(held(res["slots"][k]) != e for k, e in enumerate(want))


def routes_past_the_mask(res):
    """Routed physical experts the KT mask has no entry for."""
    return [r for r in res["routes"] if r["physical"] >= res["mask_len"]]


def mxfp4_bias_mismatches(res):
    """Slots whose biases are another expert's than their weights and scales."""
    mismatches = 0
    for tensors in res.get("updated_slot_tensors", []):
        weights = {e for n, e in tensors.items() if not n.endswith("_bias")}
        biases = {e for n, e in tensors.items() if n.endswith("_bias")}
        mismatches += len(weights) != 1 or biases != weights
    return mismatches


SIZE_MISMATCH = "The size of tensor a ({}) must match the size of tensor b (8) at non-singleton dimension 0"
# The map the real EPLB algorithm makes from the seeded counts, per EP size (the same on both trees).
EPLB_MAPS = {1: [2, 5, 0, 1, 3, 7, 6, 4], 2: [2, 1, 7, 4, 5, 0, 3, 6]}
MXFP4_TENSORS = [param for param, _ in kt_layer.GPT_OSS_MXFP4.values()]


# ---------------------------------------------------------------- the maps themselves


def test_maps_are_non_trivial(results):
    """Every map case loads under a map that moves experts: MAP_FILE, or the one the real EPLB
    algorithm makes for the case's EP size."""
    for name in _names("nvfp4/") + _names("bf16/"):
        cfg = CASES[name]
        p2l = results[name]["physical_to_logical"]
        assert sorted(p2l) == list(range(E)) and p2l != list(range(E)), name
        assert p2l == (MAP_FILE if cfg["path"] == "mapfile" else EPLB_MAPS[cfg.get("ep_size", 1)]), name


# ---------------------------------------------------------------- NVFP4 input scales under maps

# Stock: slots whose NVFP4 weight_scale_2 / input-scale pair is not the one the slot must compute with.
NVFP4_STOCK_WRONG = {
    "nvfp4/auto/ep0of1/mapfile": 3,
    "nvfp4/auto/ep0of1/eplbmap": 2,
    "nvfp4/flashinfer_cutlass/ep0of1/mapfile": 3,
    "nvfp4/flashinfer_cutlass/ep0of1/eplbmap": 3,
    "nvfp4/flashinfer_cutedsl/ep0of2/mapfile": 2,
    "nvfp4/flashinfer_cutedsl/ep0of2/eplbmap": 2,
    "nvfp4/flashinfer_cutedsl/ep1of2/mapfile": 2,
    "nvfp4/flashinfer_cutedsl/ep1of2/eplbmap": 2,
}


def test_nvfp4_slots_pair_their_own_scales_under_maps(results):
    """Patched: on every branch, slot k's weight_scale_2 and input scale are those of the logical
    expert its physical expert holds. Stock: the per-slot branches pair the weights with the input
    scale of logical expert <physical id> instead, wrong in every slot whose expert the map moves;
    flashinfer_cutlass takes one maximum over all rows, which the map only permutes, but stock's is
    NaN for the reason 0001 fixes (the CPU experts' rows are left unwritten), not for the map."""
    names = _names("nvfp4/")
    for name in names:
        assert results[name]["gpu_index_to_logical"] == CASES[name]["gpu_experts"], name
    wrong = {name: nvfp4_wrong_slots(results[name], CASES[name]) for name in names}
    assert wrong == per_tree(stock=NVFP4_STOCK_WRONG, patched=dict.fromkeys(names, 0))
    for name in _names("nvfp4/flashinfer_cutlass/"):
        input_scales = {s["input_scale"] for g in ("w13", "w2") for s in results[name][f"{g}_slots"]}
        assert input_scales == per_tree(stock={"nan"}, patched={0}), name


# ---------------------------------------------------------------- the all-experts loader, EP 2


def test_fused_loader_ep2_every_rank(results):
    """Patched: each rank's reachable slots hold its own experts under every map. Stock: a full
    mask loads without error, but rank 1 holds experts 0..3 and under a map the slots ignore it;
    any other mask raises a size mismatch."""
    names = _names("fused/")
    errors = {name: results[name]["error"] for name in names if "error" in results[name]}
    stock_errors = {n: SIZE_MISMATCH.format(len(CASES[n]["gpu_experts"])) for n in names if "/full/" not in n}
    assert errors == per_tree(stock=stock_errors, patched={})
    wrong = [name for name in names if wrong_weight_slots(results[name], CASES[name])]
    right_on_stock = ("fused/full/ep0of2/none", "fused/full/ep0of2/trivial")
    assert wrong == per_tree(stock=[n for n in names if n not in right_on_stock], patched=[])
    full_rank1 = results["fused/full/ep1of2/none"]["slots"][:4]
    assert [held(s) for s in full_rank1] == per_tree(stock=[0, 1, 2, 3], patched=[4, 5, 6, 7])


def test_loaders_that_were_right_are_unchanged(results):
    """Where stock loads every expert right, the all-experts loaders give the same layer on both
    trees (the layer without KT, where 0001's KT slot order is not in play): gpt-oss BF16 on one EP
    rank without a map or with the trivial one, gpt-oss MXFP4 without a map on every rank.
    Elsewhere the patched layer holds every expert right and stock does not (a map; BF16 on EP 2
    raises a size mismatch)."""
    for path in ("none", "trivial"):
        bf16 = {"num_local_experts": E, "num_slots": E, "shard_rows": 64, "slots": whole_slots(range(E))}
        assert results[f"fused_nokt/ep0of1/{path}"] == dict(bf16, physical_to_logical=None), path
        for lay, local in (("nokt", range(E)), ("nokt_ep0of2", range(4)), ("nokt_ep1of2", range(4, E))):
            slot_tensors = [dict.fromkeys(MXFP4_TENSORS, e) for e in local]
            mxfp4 = {"num_local_experts": len(local), "num_slots": len(local), "slot_tensors": slot_tensors}
            assert results[f"mxfp4/{lay}/{path}"] == dict(mxfp4, physical_to_logical=None), (lay, path)
    names = _names("fused_nokt/")
    wrong = [name for name in names if plain_wrong_slots(results[name], CASES[name])]
    right_on_stock = ("fused_nokt/ep0of1/none", "fused_nokt/ep0of1/trivial")
    assert wrong == per_tree(stock=[n for n in names if n not in right_on_stock], patched=[])


def test_gpt_oss_mxfp4_loader_follows_the_map(results):
    """Patched: every reachable slot's blocks, scales and biases are its own expert's on every
    path, rank and map, with and without KT. Stock: gpt-oss cuts the tensors to the rank's logical
    experts and slot k takes row k, whatever the map; under KT it has no slot order either (the
    masks are no prefix of the rank's experts)."""
    names = _names("mxfp4/")
    wrong = [name for name in names if mxfp4_wrong_slots(results[name], CASES[name])]
    stock = [n for n in names if CASES[n]["path"] in MAP_PATHS or CASES[n].get("kt", True)]
    assert wrong == per_tree(stock=stock, patched=[])


def test_per_expert_loader_under_maps(results):
    """Right on both trees (before this series too)."""
    for name in _names("bf16/"):
        assert wrong_weight_slots(results[name], CASES[name]) == 0, name


# ---------------------------------------------------------------- run-time moves


def test_eplb_with_kt_is_refused_where_a_slot_cannot_follow(results):
    """Stock refuses nothing. Patched: the arguments accept EPLB with KT; a layer whose GPU slots
    are not exactly its local experts in order is refused at startup, one with every local expert
    on the GPU builds (a rebalance then moves its slots right: eplb_rebalance.py)."""
    for name in ("server_args/eplb", "server_args/kt_mapfile", "server_args/eplb_kt"):
        assert results[name] == {"accepted": True, "ep_dispatch_algorithm": "static"}, name
    assert results["eplb/kt_all_local"]["gpu_index_to_logical"] == [0, 1, 2, 3]
    assert results["eplb/kt_partial"].get("refused") == per_tree(stock=None, patched=EPLB_LINE)


def test_redundant_experts_with_kt(results):
    """The layer is the fork's on both trees (the patch refuses at the arguments): with 2
    redundant experts it has 10 physical experts, the KT mask and slot tables 8 entries
    (the model's logical experts). Routing that the real static dispatch sends to a
    physical expert past them fails in KTEPWrapperMethod.apply's mask_and_remap_expert_ids
    (IndexError here, a device-side assert compiled on a GPU), and the CPU-expert engine
    is built for 10 experts from the 8-entry mask (kt-kernel copies the mask into a tensor
    of num_experts entries: a size mismatch at startup on TP rank 0). Experts routed
    within the mask reach the slot that holds them. Patched: refused at startup."""
    for name in ("redundant/mapfile", "redundant/eplbmap", "redundant/control/mapfile"):
        res = results[name]
        p2l = res["physical_to_logical"]
        redundant = CASES[name].get("redundant", 0)
        assert len(p2l) == res["num_local_experts"] == res["cpu_engine_num_experts"] == E + redundant, name
        assert sorted(set(p2l)) == list(range(E)) and res["mask_len"] == E, name
        assert [held(s) for s in res["slots"]] == [p2l[p] for p in CASES[name]["gpu_experts"]], name
        past = routes_past_the_mask(res)
        assert bool(past) == bool(redundant), (name, res["routes"])
        for r in past:
            assert r["slot"] == f"IndexError: index {r['physical']} is out of bounds for dimension 0 with size {E}"
        for logical, r in enumerate(res["routes"]):
            if r not in past:
                assert p2l[r["physical"]] == logical
                assert r["slot"] == -1 or held(res["slots"][r["slot"]]) == logical, (name, logical)
    assert results["server_args/redundant"] == {"accepted": True, "ep_dispatch_algorithm": None}
    assert results["server_args/redundant_kt"].get("refused") == per_tree(stock=None, patched=REDUNDANT_LINE)


def test_dynamic_update(results):
    """BF16: weights, KT tables and the CPU engine's mask move together (stock and patched).
    NVFP4 with a threshold: AttributeError mid-serving on stock, refused at startup patched (its
    full-GPU prefill layer loads no NVFP4 scales). NVFP4 with the flag alone: accepted on both,
    every patched slot on its own scales (the update needs the full-GPU prefill layer, which runs
    only over a threshold)."""
    res = results["dynamic/bf16"]
    assert res["updated_gpu_index_to_logical"] == res["updated_mask"] == res["updated_cpu_engine_mask"] == [2, 5, 7]
    assert [held(s) for s in res["updated_slots"]] == [2, 5, 7]
    nvfp4 = results["dynamic/nvfp4"]
    no_scale = "AttributeError: 'FusedMoE' object has no attribute 'w13_weight_scale'"
    assert nvfp4.get("update_error") == per_tree(stock=no_scale, patched=None)
    assert nvfp4.get("refused") == per_tree(stock=None, patched=FULL_PREFILL_NVFP4_LINE)
    flag = results["dynamic_flag/nvfp4"]
    assert "refused" not in flag and "update_error" not in flag
    # Stock's slots pair the wrong input scales for the reason 0001 fixes.
    assert nvfp4_wrong_slots(flag, CASES["dynamic_flag/nvfp4"]) == per_tree(stock=3, patched=0)


def test_dynamic_update_mxfp4_moves_no_biases(results):
    """Stock: the full-GPU layer of a gpt-oss MXFP4 layer loads the four tensors of the FP8
    per-channel layout the context detects (no biases), and the update moves the weights and
    scales of experts 2, 5, 7 into the slots but leaves every slot the biases of the expert it
    held. Patched: the threshold is refused at startup with MXFP4."""
    res = results["dynamic/mxfp4"]
    assert res.get("refused") == per_tree(stock=None, patched=MXFP4_PREFILL_LINE)
    fp8_channel = ["w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale"]
    assert res.get("full_loaded") == per_tree(stock=fp8_channel, patched=None)
    assert res.get("updated_gpu_index_to_logical") == per_tree(stock=[2, 5, 7], patched=None)
    slots = res.get("updated_slot_tensors", [])
    weights = [{e for n, e in slot.items() if not n.endswith("_bias")} for slot in slots]
    assert weights == per_tree(stock=[{2}, {5}, {7}], patched=[])
    assert mxfp4_bias_mismatches(res) == per_tree(stock=3, patched=0)


def test_full_gpu_prefill_nvfp4(results):
    """Stock: the full-GPU prefill layer of an NVFP4 layer is loaded with the four tensors of the
    FP8 per-channel layout the context detects; NVFP4's input scales and weight_scale_2
    (torch.empty at creation) are never written, so every expert's g1/g2_alphas and input-scale
    quant are made of unwritten values. Patched: refused at startup; BF16 with the threshold stays
    accepted."""
    res = results["full_prefill/nvfp4"]
    assert res.get("refused") == per_tree(stock=None, patched=FULL_PREFILL_NVFP4_LINE)
    fp8_channel = ["w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale"]
    assert res.get("full_transferred") == per_tree(stock=fp8_channel, patched=None)
    nvfp4_scales = ["w13_input_scale", "w13_weight_scale_2", "w2_input_scale", "w2_weight_scale_2"]
    assert res.get("full_not_transferred") == per_tree(stock=nvfp4_scales, patched=None)
    unwritten = [{"input_scale": "nan", "weight_scale_2": "nan"}] * E
    for gemm in ("w13", "w2"):
        assert res.get(f"full_{gemm}_experts") == per_tree(stock=unwritten, patched=None), gemm
    assert "refused" not in results["full_prefill/bf16"]
    assert results["full_prefill/bf16"]["gpu_index_to_logical"] == [1, 4, 6]


def test_wrong_slot_counts(results):
    """Over every case of a kind: GPU slots that compute with another expert's weights or scales
    (all of a case's slots where its load raised), the fused cases whose load raised, routes past
    the KT mask (the same layer on both: the patch refuses redundant experts at the arguments),
    NVFP4 full-GPU prefill expert GEMMs on unwritten scales and MXFP4 dynamic-update slots with
    another expert's biases (patched refuses both)."""
    assert [len(_names(kind)) for kind in ("nvfp4/", "fused/", "mxfp4/")] == [8, 32, 24]
    full_prefill = results["full_prefill/nvfp4"]
    counts = {
        "nvfp4": sum(nvfp4_wrong_slots(results[n], CASES[n]) for n in _names("nvfp4/")),
        "fused": sum(wrong_weight_slots(results[n], CASES[n]) for n in _names("fused/")),
        "fused raised": sum("error" in results[n] for n in _names("fused/")),
        "gpt-oss mxfp4": sum(mxfp4_wrong_slots(results[n], CASES[n]) for n in _names("mxfp4/")),
        "routes past the mask": sum(len(routes_past_the_mask(results[n])) for n in _names("redundant/")),
        "full prefill on unwritten scales": sum(
            s["input_scale"] == "nan" for g in ("w13", "w2") for s in full_prefill.get(f"full_{g}_experts", [])
        ),
        "another expert's biases": mxfp4_bias_mismatches(results["dynamic/mxfp4"]),
    }
    stock = [19, 71, 24, 58, 3, 16, 3]
    patched = [0, 0, 0, 0, 3, 0, 0]
    assert counts == dict(zip(counts, per_tree(stock=stock, patched=patched)))
