"""The KT GPU-expert remap on both FusedMoE weight-loader paths (sglang-kt 0.7.2). Not collected
by the suite: test_kt_gpu_expert_remap.py runs it with the stock or the patched package first on
PYTHONPATH and TREE_ENV naming which. Each test states what it expects on each package
(``per_tree``); the tests of what only the patch makes right (the slot holds the expert routing
sends there) run alike on both and fail on stock, which the parent names.

Each case (kt_layer.py) builds the real ``FusedMoE`` of ``srt/layers/moe/fused_moe_triton/layer.py``,
wrapped by the real ``KTEPWrapperMethod`` of ``srt/layers/moe/kt_ep_wrapper.py``
(through the fork's quant-method registry, masks from its own placement strategies or
its mask cache), loads distinct synthetic weights for every logical expert (every
w1/w3 row and w2 column names its expert, shard and index) through the real
``weight_loader``, and decodes what each GPU slot holds. Routing sends logical expert
e to slot ``logical_to_gpu_index[e]``, so slot k must hold ``gpu_index_to_logical[k]``.

NVFP4 (``ModelOptNvFp4FusedMoEMethod`` of ``srt/layers/quantization/modelopt_quant.py``):
the case loads per-expert weight_scale_2 and input scales that name their expert,
runs the real ``KTEPWrapperMethod.process_weights_after_loading`` (which runs the
NVFP4 method's) and decodes, for each GPU slot, which expert's scales its g1/g2_alphas
and input-scale quant are made of. Those are what the routed computation reads for
slot k (``cutlass_moe_fp4``'s per-expert ``a1_gscale``/``w1_alphas``, flashinfer's
scalar input scale), so they must be the same as the non-KT layer's for expert
``gpu_index_to_logical[k]``; the reference is that layer, built the same way
with KT off. Unwritten rows hold NaN, so a read of one shows. Backends: ``auto``
(the default, per-slot branch), ``flashinfer_cutlass`` (one scalar: the max over all
rows; ``flashinfer_trtllm`` takes the same branch), ``flashinfer_cutedsl``. flashinfer
itself is not installed; the NVFP4 module handles its absence.

Paths: ``none`` = no expert-location metadata (``weight_loader`` -> ``_weight_loader_impl``),
``trivial`` = trivial metadata built with the real ``ExpertLocationMetadata._init_raw``
(``weight_loader`` -> ``logical_to_all_physical`` -> ``_weight_loader_physical``).

Stand-ins (tests/sglang_kt/kt_native_stubs), only for native pieces that cannot run
on a CPU-only machine:
- ``sgl_kernel``: stub package (the real one is a CUDA extension; every op raises).
- ``torch.cuda.get_device_capability`` -> (9, 0) (queried at import by quantization/fp8.py).
- ``torch.cuda.Stream`` / ``torch.cuda.Event``: inert (KT's CPU-expert stream on TP rank 0);
  ``torch.cuda.synchronize``: a no-op.
- ``kt_kernel.KTMoEWrapper`` as referenced by kt_ep_wrapper: records the map its
  ``load_weights`` gets (the real kt-kernel 0.7.2 is installed and imported, but its
  CPU-expert engine pins host memory in its constructor, which needs a CUDA driver).
- NVFP4 cases only: ``modelopt_quant.is_blackwell_supported`` -> True and
  ``Tensor.cuda()`` -> stays on the CPU (``swizzle_blockscale``).
Test plumbing, not stubs: the process-group rank/size holders read by the real
``get_moe_tensor_parallel_rank()`` etc. (no torch.distributed), a plain-value
``ServerArgs`` stand-in with the KT fields, and a temporary ``logical_count`` .pt file
for the ``frequency`` strategy.

EP > 1: sglang-kt 0.7.2 does not reject KT with ``--ep-size > 1``. Its
``StandardDispatcher`` turns top-k ids into EP-local ids before
``KTEPWrapperMethod.apply`` masks/remaps them, so on an EP rank the KT tables are
indexed by local ids; the loader (stock metadata path, and both paths after the
patch) does the same, and the test checks that agreement. The per-layer mask is built
over global ids, so entries at or past the rank's routed-expert count are reachable
only by the fused shared experts, whose local ids start there: a shared expert gets
a GPU slot when that entry is set, on stock and patched alike. That, and the mask
covering global ids at all, are the fork's KT+EP design, outside this patch.

Strategies: ``random`` and ``frequency`` give non-prefix masks; so does ``frequency``
without an ``--init-expert-location`` file: the fork logs a "uniform distribution
fallback", but kt-kernel's ``generate_gpu_experts_masks`` takes ``torch.topk`` over
equal frequencies of all layers at once, whose ties pick neither a prefix nor an
even split per layer (here: 12 GPU experts in layer 2, none in layers 1 and 3).
"""

import math
import os
from pathlib import Path

import kt_layer
import pytest
from kt_layer import explicit_masks, nvfp4_input_scale, nvfp4_weight_scale_2, resolve_layer_id, whole_slots

from helpers import per_tree

PATHS = ("none", "trivial")
PR_MASK = [76, 145, 262, 268]  # the non-prefix placement of kvcache-ai/sglang PR #97
PR_EXPERTS = 270
FREQ_COUNTS_SEED = 1234


def _frequency_counts(num_layers=4, num_experts=16):
    import random

    rng = random.Random(FREQ_COUNTS_SEED)
    return [[[rng.randrange(1000) for _ in range(num_experts)] for _ in range(num_layers)]]


NVFP4_BACKENDS = ("auto", "flashinfer_cutlass", "flashinfer_cutedsl")
NVFP4 = dict(modelopt=True, hidden_size=64, intermediate_size=64)


# 4 of 16 experts on the GPU, placed by a strategy that needs no mask
RANDOM = dict(num_routed_experts=16, strategy="random", kt_num_gpu_experts=4, layer_id="auto")


def _weight_cases():
    """name -> probe config (without `path`) of the cases that load BF16 weights."""
    return {
        "pr_mask": dict(num_routed_experts=PR_EXPERTS, strategy="explicit", gpu_experts=PR_MASK),
        "small_mask": dict(num_routed_experts=8, strategy="explicit", gpu_experts=[1, 4, 6]),
        "explicit_auto_layer": dict(num_routed_experts=8, strategy="explicit", gpu_experts=[2, 5], layer_id="auto"),
        "random": RANDOM,
        "frequency": dict(RANDOM, strategy="frequency", logical_count=_frequency_counts()),
        # No --init-expert-location file: the fork logs a uniform fallback, but
        # torch.topk over equal frequencies picks a non-prefix set.
        "frequency_no_file": dict(RANDOM, strategy="frequency"),
        "uniform": dict(num_routed_experts=16, strategy="uniform", kt_num_gpu_experts=5, layer_id=2),
        "front-loading": dict(
            num_routed_experts=16,
            strategy="front-loading",
            kt_num_gpu_experts=20,
            layer_id=2,
        ),
        **{f"tp{rank}": dict(RANDOM, tp_size=2, tp_rank=rank) for rank in (0, 1)},
        "ep1of2": dict(
            num_routed_experts=8,
            strategy="explicit",
            gpu_experts=[1, 3],
            ep_size=2,
            ep_rank=1,
        ),
        "shared": dict(
            num_routed_experts=8,
            num_fused_shared_experts=1,
            strategy="explicit",
            gpu_experts=[3, 6],
        ),
        # EP 2, rank 0: local ids 0..3 routed, 4 the shared expert; mask entry 4 is set.
        "shared_ep0of2": dict(
            num_routed_experts=8,
            num_fused_shared_experts=1,
            strategy="explicit",
            gpu_experts=[1, 4],
            ep_size=2,
            ep_rank=0,
        ),
    }


def _fused_cases():
    """name -> probe config (without `path`): all experts in one tensor, as gpt-oss loads."""
    base = dict(num_routed_experts=8, strategy="explicit", hidden_size=64, intermediate_size=64)
    return {
        "fused": dict(base, loader="fused", gpu_experts=[1, 4, 6]),
        "fused_all_gpu": dict(base, loader="fused", gpu_experts=list(range(8))),
        "mxfp4": dict(base, loader="mxfp4", gpu_experts=[1, 4, 6]),
    }


def _nvfp4_cases():
    """name -> probe config (without `path`): NVFP4 scales through
    process_weights_after_loading, per MoE runner backend; `ref` is the same layer
    without KT (upstream's own pairing, slot e = expert e)."""
    cases = {}
    for backend in NVFP4_BACKENDS:
        base = dict(NVFP4, num_routed_experts=8, moe_runner_backend=backend)
        cases[f"nvfp4/{backend}"] = dict(base, strategy="explicit", gpu_experts=[1, 4, 6])
        cases[f"nvfp4_ref/{backend}"] = dict(base, strategy="explicit", kt=False)
    # EP 2 rank 1 (local experts 4..7); the default branch needs EP 1 upstream too.
    ep = dict(NVFP4, num_routed_experts=8, moe_runner_backend="flashinfer_cutedsl", ep_size=2, ep_rank=1)
    cases["nvfp4_ep1of2/flashinfer_cutedsl"] = dict(ep, strategy="explicit", gpu_experts=[1, 3])
    cases["nvfp4_ref_ep1of2/flashinfer_cutedsl"] = dict(ep, strategy="explicit", kt=False)
    return cases


WEIGHT_CASES = _weight_cases()


def _cases():
    both = {**WEIGHT_CASES, **_fused_cases(), **_nvfp4_cases()}
    return {f"{name}/{path}": dict(cfg, path=path) for name, cfg in both.items() for path in PATHS}


CASES = _cases()


@pytest.fixture(scope="module")
def results():
    return kt_layer.run_cases(CASES)


def slot_experts(res):
    """Expert held by each GPU slot; raises if a slot is not one clean expert shard."""
    held = []
    for k, slot in enumerate(res["slots"]):
        parts = [slot["w1"], slot["w3"], slot["w2"]]
        for part in parts:
            assert isinstance(part, list), f"slot {k}: {slot}"
        experts = {p[0] for p in parts}
        assert len(experts) == 1, f"slot {k} mixes experts: {slot}"
        held.append(experts.pop())
    return held


def shard_starts(res):
    return {tuple(p[1] for p in (s["w1"], s["w3"], s["w2"])) for s in res["slots"]}


def expected_global(res, num_routed_experts=None, num_shared=0):
    """What slot k must hold: the expert routing sends there. The KT tables hold
    EP-local ids; the dispatcher maps global routed id ep_rank * local_routed + l to l
    and the fused shared experts to local_routed + j."""
    local_routed = res["num_local_experts"] - num_shared
    offset = res["moe_ep_rank"] * local_routed
    return [
        offset + e if e < local_routed else num_routed_experts + e - local_routed for e in res["gpu_index_to_logical"]
    ]


def assert_correct(res):
    assert res["num_slots"] == res["num_gpu_experts"] == len(res["gpu_index_to_logical"])
    assert slot_experts(res) == expected_global(res)


def loaded(res):
    """What the GPU slots hold, or the loader's error."""
    return res["error"] if "error" in res else slot_experts(res)


# ---------------------------------------------------------------- the layer itself


def test_the_layer_is_the_real_one(results):
    """The package's own layer (the parent puts it first on PYTHONPATH), the real kt_kernel import,
    the CPU-expert engine stand-in built on TP rank 0, every shard of the 8 experts loaded."""
    root = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0])
    res = results["small_mask/none"]
    assert Path(res["layer_file"]).resolve() == (root / "sglang/srt/layers/moe/fused_moe_triton/layer.py").resolve()
    assert res["ktransformers_available"] is True  # real kt_kernel import
    assert res["kt_cpu_wrapper"] == "CpuExpertEngineStandIn"  # TP rank 0 built it
    assert res["loader_calls"] == 3 * 8


def test_auto_layer_without_a_non_prefix_mask_is_refused():
    masks = explicit_masks(4, 8, [0, 1])
    with pytest.raises(ValueError, match=r"layer_id='auto': no MoE layer 1\.\.3 has a non-prefix"):
        resolve_layer_id("auto", masks, 1)
    assert resolve_layer_id(2, masks, 1) == 2
    assert resolve_layer_id("auto", explicit_masks(4, 8, [0, 2]), 1) == 1


# ---------------------------------------------------------------- the PR's placement


def test_pr_mask_both_paths(results):
    """Slot k holds gpu_index_to_logical[k] with and without metadata (fails on stock)."""
    for path in PATHS:
        res = results[f"pr_mask/{path}"]
        assert res["gpu_index_to_logical"] == PR_MASK
        assert slot_experts(res) == PR_MASK, path
        assert_correct(res)


def test_pr_mask_per_path(results):
    """Stock without metadata: logical expert e landed in slot e, so the slots hold experts 0..3
    where routing expects the mask. The metadata path was already right on stock."""
    res = results["pr_mask/none"]
    assert res["gpu_index_to_logical"] == PR_MASK
    assert slot_experts(res) == per_tree(stock=[0, 1, 2, 3], patched=PR_MASK)
    assert slot_experts(results["pr_mask/trivial"]) == PR_MASK


def test_small_mask(results):
    assert slot_experts(results["small_mask/none"]) == per_tree(stock=[0, 1, 2], patched=[1, 4, 6])
    assert slot_experts(results["small_mask/trivial"]) == [1, 4, 6]


# ---------------------------------------------------------------- the fork's strategies

# The placements the fork's non-prefix strategies make for the layer under test (the same on both trees).
NON_PREFIX = {"random": [0, 2, 5, 6, 7, 9, 12], "frequency": [2, 6, 7, 12]}


def assert_path_without_metadata(none, trivial):
    """Without metadata stock leaves logical expert k in slot k, not gpu_index_to_logical[k], so its
    two paths differ; patched, they give identical slot contents."""
    gpu_experts = none["gpu_index_to_logical"]
    assert none["num_slots"] == none["num_gpu_experts"] == len(gpu_experts)
    assert slot_experts(none) == per_tree(stock=list(range(len(gpu_experts))), patched=gpu_experts)
    assert (none["slots"] == trivial["slots"]) is per_tree(stock=False, patched=True)


@pytest.mark.parametrize("strategy", ["random", "frequency"])
def test_non_prefix_strategies(results, strategy):
    none, trivial = (results[f"{strategy}/{path}"] for path in PATHS)
    assert not none["mask_is_prefix"], "strategy did not give a non-prefix mask"
    assert none["gpu_index_to_logical"] == trivial["gpu_index_to_logical"] == NON_PREFIX[strategy]
    assert_correct(trivial)
    assert_path_without_metadata(none, trivial)


PREFIX = {"uniform": 5, "front-loading": 16}  # GPU experts of the layer under test


@pytest.mark.parametrize("strategy", PREFIX)
def test_prefix_strategies_unchanged(results, strategy):
    """A prefix placement: slot k holds the whole expert k on both trees and paths."""
    for path in PATHS:
        res = results[f"{strategy}/{path}"]
        assert res["mask_is_prefix"]
        assert res["gpu_index_to_logical"] == list(range(PREFIX[strategy]))
        assert_correct(res)
        assert res["slots"] == whole_slots(range(PREFIX[strategy]))


# ---------------------------------------------------------------- parallelism


@pytest.mark.parametrize("tp_rank", [0, 1])
def test_moe_tp_ranks(results, tp_rank):
    name = f"tp{tp_rank}"
    inter_per_rank = 8 // 2
    none, trivial = (results[f"{name}/{path}"] for path in PATHS)
    for res in (none, trivial):
        assert res["moe_tp_rank"] == tp_rank and res["shard_rows"] == inter_per_rank
        assert not res["mask_is_prefix"]
        assert res["gpu_index_to_logical"] == NON_PREFIX["random"]
        # Every slot holds this rank's shard: rows/cols [tp_rank*4, tp_rank*4+4).
        assert shard_starts(res) == {(tp_rank * inter_per_rank,) * 3}
    assert_correct(trivial)
    assert_path_without_metadata(none, trivial)


def test_ep_rank_local_range(results):
    """EP 2, rank 1 owns global experts 4..7 (local 0..3); KT tables hold local ids (see the
    module docstring): mask [1, 3] -> slots hold global experts 5 and 7; stock without metadata
    loads 4 and 5."""
    for path in PATHS:
        res = results[f"ep1of2/{path}"]
        assert res["moe_ep_rank"] == 1 and res["num_local_experts"] == 4
        assert expected_global(res) == [5, 7]
    assert_correct(results["ep1of2/trivial"])
    assert slot_experts(results["ep1of2/none"]) == per_tree(stock=[4, 5], patched=[5, 7])


# ---------------------------------------------------------------- shared / CPU experts


def test_fused_shared_expert_past_the_mask(results):
    """EP 1: the shared expert's id (8) is past the 8-entry mask, so it gets no slot."""
    for path in PATHS:
        res = results[f"shared/{path}"]
        assert res["mask_len"] == 8 and res["num_local_experts"] == 9
    assert_correct(results["shared/trivial"])
    assert slot_experts(results["shared/trivial"]) == [3, 6]
    assert slot_experts(results["shared/none"]) == per_tree(stock=[0, 1], patched=[3, 6])


def test_fused_shared_expert_inside_the_mask_with_ep(results):
    """EP 2 rank 0: the shared expert (global 8) has local id 4, mask entry 4 is set, so routing
    sends it to slot 1 and both paths load it there (stock: only with metadata)."""
    for path in PATHS:
        res = results[f"shared_ep0of2/{path}"]
        assert res["num_local_experts"] == 5 and res["gpu_index_to_logical"] == [1, 4]
        assert expected_global(res, num_routed_experts=8, num_shared=1) == [1, 8]
    assert slot_experts(results["shared_ep0of2/trivial"]) == [1, 8]
    assert slot_experts(results["shared_ep0of2/none"]) == per_tree(stock=[0, 1], patched=[1, 8])


def test_explicit_mask_with_auto_layer(results):
    for path in PATHS:  # the first MoE layer (first_k_dense_replace = 1)
        assert results[f"explicit_auto_layer/{path}"]["layer_id"] == 1
    assert slot_experts(results["explicit_auto_layer/trivial"]) == [2, 5]
    assert slot_experts(results["explicit_auto_layer/none"]) == per_tree(stock=[0, 1], patched=[2, 5])


def test_frequency_without_a_file_is_not_a_prefix(results):
    """The "uniform distribution fallback" gives equal frequencies; torch.topk's ties give a
    non-prefix set, so stock is wrong without metadata here too."""
    none, trivial = (results[f"frequency_no_file/{path}"] for path in PATHS)
    assert not none["mask_is_prefix"]
    # 4 per MoE layer were asked for (layer 0 is dense, all GPU).
    assert none["gpu_experts_per_layer"] == [16, 0, 12, 0]
    assert none["gpu_index_to_logical"] == [1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15]
    assert_correct(trivial)
    assert_path_without_metadata(none, trivial)


def test_every_weight_case_is_correct(results):
    """Every BF16 case, both paths: slot k holds exactly the expert routing sends to slot k, so no
    CPU expert is in a slot (fails on stock)."""
    for name in (f"{name}/{path}" for name in WEIGHT_CASES for path in PATHS):
        cfg = CASES[name]
        res = results[name]
        expected = expected_global(res, cfg["num_routed_experts"], cfg.get("num_fused_shared_experts", 0))
        assert res["num_slots"] == res["num_gpu_experts"] == len(expected), name
        assert slot_experts(res) == expected, name


# ---------------------------------------------------------------- all experts at once


def test_weight_loader_fused(results):
    """weight_loader_fused (gpt-oss BF16/FP8): stock copies the [8, ...] tensor into the 3 GPU
    slots and fails loudly (right only when every expert is on the GPU); patched loads slot k from
    expert gpu_index_to_logical[k]."""
    size_mismatch = "The size of tensor a (3) must match the size of tensor b (8) at non-singleton dimension 0"
    for path in PATHS:
        assert loaded(results[f"fused/{path}"]) == per_tree(stock=size_mismatch, patched=[1, 4, 6])
        assert loaded(results[f"fused_all_gpu/{path}"]) == list(range(8))


def test_mxfp4_all_experts_branch(results):
    """weight_loader(expert_id=None) with the MXFP4 config (gpt-oss MXFP4): Mxfp4MoEMethod has a
    row per local expert, so stock's copy succeeds and silently leaves expert k in slot k; patched
    rows follow the KT slot order."""
    order = per_tree(stock=range(8), patched=(1, 4, 6, 0, 2, 3, 5, 7))
    for path in PATHS:
        res = results[f"mxfp4/{path}"]
        assert "error" not in res and res["gpu_index_to_logical"] == [1, 4, 6]
        assert res["slot_experts"] == [[e, e] for e in order]


# ---------------------------------------------------------------- NVFP4 scales


def _pairs(res, gemm):
    """(weight_scale_2 expert, input-scale expert) of each GPU slot."""
    return [(s["weight_scale_2"], s["input_scale"]) for s in res[f"{gemm}_slots"]]


OWN = [(e, e) for e in range(8)]
SCALAR = [(e, 0) for e in range(8)]
# Per backend: the pairs of the layer without KT (w13, w2) and how many input-scale quant values it has.
NVFP4_REFERENCE = {
    "auto": (OWN, OWN, 8),
    "flashinfer_cutlass": (SCALAR, SCALAR, 1),
    "flashinfer_cutedsl": (SCALAR, OWN, 8),
}


@pytest.mark.parametrize("backend", NVFP4_BACKENDS)
def test_nvfp4_reference_layer(results, backend):
    """The layer without KT, on both trees and paths: slot e computes with expert e's
    weight_scale_2 and input scale, or with one scalar input scale (expert 0's: the largest)."""
    w13, w2, numel = NVFP4_REFERENCE[backend]
    for path in PATHS:
        ref = results[f"nvfp4_ref/{backend}/{path}"]
        assert (_pairs(ref, "w13"), _pairs(ref, "w2")) == (w13, w2), path
        assert ref["w13_input_scale_quant_numel"] == ref["w2_input_scale_quant_numel"] == numel


@pytest.mark.parametrize("backend", NVFP4_BACKENDS)
def test_nvfp4_slot_scales_are_the_slot_experts(results, backend):
    """After process_weights_after_loading, slot k's g1/g2_alphas and input-scale quant (what
    cutlass_moe_fp4 / flashinfer read for slot k) equal the non-KT layer's for expert
    gpu_index_to_logical[k], on both paths (fails on stock)."""
    for path in PATHS:
        ref = results[f"nvfp4_ref/{backend}/{path}"]
        res = results[f"nvfp4/{backend}/{path}"]
        assert res["gpu_index_to_logical"] == [1, 4, 6]
        for gemm in ("w13", "w2"):
            assert _pairs(res, gemm) == [_pairs(ref, gemm)[e] for e in (1, 4, 6)], (path, gemm)
            assert res[f"{gemm}_input_scale_quant_numel"] == ref[f"{gemm}_input_scale_quant_numel"]
        assert res["cpu_wrapper_loaded"] == [list(range(8))]


def test_nvfp4_pairing_per_backend(results):
    """The pairs themselves, with metadata: per-slot input scales on the default (cutlass) branch
    and for w2 on cutedsl; one scalar, the max over all experts (expert 0's), otherwise (fails on
    stock)."""
    own = [(e, e) for e in (1, 4, 6)]
    scalar = [(e, 0) for e in (1, 4, 6)]
    expected = {
        "auto": (own, own),
        "flashinfer_cutlass": (scalar, scalar),
        "flashinfer_cutedsl": (scalar, own),
    }
    for backend, (w13, w2) in expected.items():
        res = results[f"nvfp4/{backend}/trivial"]
        assert (_pairs(res, "w13"), _pairs(res, "w2")) == (w13, w2), backend


def test_nvfp4_ep_rank_slot_scales(results):
    """EP 2 rank 1, cutedsl: slot k's w2 scales are its global expert's, the non-KT layer's (fails on stock)."""
    ref = results["nvfp4_ref_ep1of2/flashinfer_cutedsl/none"]
    for path in PATHS:
        res = results[f"nvfp4_ep1of2/flashinfer_cutedsl/{path}"]
        assert res["gpu_index_to_logical"] == [1, 3]
        assert _pairs(res, "w2") == [_pairs(ref, "w2")[e] for e in (1, 3)] == [(5, 5), (7, 7)], path


def test_nvfp4_input_scale_rows_in_slot_order(results):
    """Every input-scale row is written once: GPU experts in slot order, then CPU experts (fails
    on stock)."""
    order = [1, 4, 6, 0, 2, 3, 5, 7]
    for path in PATHS:
        res = results[f"nvfp4/auto/{path}"]
        assert res["loaded_w13_input_scale"] == [[nvfp4_input_scale(e, "w1")] * 2 for e in order], path
        assert res["loaded_w2_input_scale"] == [nvfp4_input_scale(e, "w2") for e in order]
        n = res["num_gpu_experts"]
        assert res["loaded_w2_weight_scale_2"][:n] == [nvfp4_weight_scale_2(e, "w2") for e in (1, 4, 6)]


def test_nvfp4_without_metadata_and_the_cpu_expert_rows(results):
    """Stock: without metadata slot k holds expert k (scales and weights alike); with metadata the
    per-slot pairs are right but the CPU experts' input-scale rows stay unwritten, and the branches
    that take a max over them get NaN. Patched: every slot its own expert's, every row written."""
    for backend in NVFP4_BACKENDS:
        none = results[f"nvfp4/{backend}/none"]
        assert [ws2 for ws2, _ in _pairs(none, "w13")] == per_tree(stock=[0, 1, 2], patched=[1, 4, 6]), backend
    trivial = {b: results[f"nvfp4/{b}/trivial"] for b in NVFP4_BACKENDS}
    own = [(e, e) for e in (1, 4, 6)]
    scalar = per_tree(stock=[("nan", "nan")] * 3, patched=[(e, 0) for e in (1, 4, 6)])
    assert _pairs(trivial["auto"], "w13") == _pairs(trivial["auto"], "w2") == own
    assert _pairs(trivial["flashinfer_cutlass"], "w13") == _pairs(trivial["flashinfer_cutlass"], "w2") == scalar
    assert _pairs(trivial["flashinfer_cutedsl"], "w13") == scalar
    cpu_rows = trivial["auto"]["loaded_w13_input_scale"][3:]
    assert [all(math.isnan(v) for v in row) for row in cpu_rows] == [per_tree(stock=True, patched=False)] * 5
