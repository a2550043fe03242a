"""The KT GPU-expert remap on both FusedMoE weight-loader paths (sglang-kt 0.7.2).

Each probe (kt_remap_probe.py, run in a subprocess against the stock or the patched
tree) builds the real ``FusedMoE`` of ``srt/layers/moe/fused_moe_triton/layer.py``,
wrapped by the real ``KTEPWrapperMethod`` of ``srt/layers/moe/kt_ep_wrapper.py``
(through the fork's quant-method registry, masks from its own placement strategies or
its mask cache), loads distinct synthetic weights for every logical expert (every
w1/w3 row and w2 column names its expert, shard and index) through the real
``weight_loader``, and decodes what each GPU slot holds. Routing sends logical expert
e to slot ``logical_to_gpu_index[e]``, so slot k must hold ``gpu_index_to_logical[k]``.

NVFP4 (``ModelOptNvFp4FusedMoEMethod`` of ``srt/layers/quantization/modelopt_quant.py``):
the probe loads per-expert weight_scale_2 and input scales that name their expert,
runs the real ``KTEPWrapperMethod.process_weights_after_loading`` (which runs the
NVFP4 method's) and decodes, for each GPU slot, which expert's scales its g1/g2_alphas
and input-scale quant are made of. Those are what the routed computation reads for
slot k (``cutlass_moe_fp4``'s per-expert ``a1_gscale``/``w1_alphas``, flashinfer's
scalar input scale), so they must be the same as the non-KT layer's for expert
``gpu_index_to_logical[k]``; the reference is that layer, built by the same probe
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

import json
import math
from pathlib import Path

import pytest
from kt_layer import explicit_masks, nvfp4_input_scale, nvfp4_weight_scale_2, resolve_layer_id

from helpers import REPO_ROOT, check_pytest_run, in_patch_test, run_probe, run_pytest, side_by_side

HERE = Path(__file__).resolve().parent
PROBE = HERE / "kt_layer.py"
TARGET = "sglang-kt"
UPSTREAM_TEST = Path("test/registered/unit/layers/moe/test_fused_moe_kt_weight_loader.py")

PR_MASK = [76, 145, 262, 268]  # the non-prefix placement of kvcache-ai/sglang PR #97
PR_EXPERTS = 270
FREQ_COUNTS_SEED = 1234


def _frequency_counts(num_layers=4, num_experts=16):
    import random

    rng = random.Random(FREQ_COUNTS_SEED)
    return [[[rng.randrange(1000) for _ in range(num_experts)] for _ in range(num_layers)]]


NVFP4_BACKENDS = ("auto", "flashinfer_cutlass", "flashinfer_cutedsl")
NVFP4 = dict(modelopt=True, hidden_size=64, intermediate_size=64)


def _weight_cases():
    """name -> probe config (without `path`) of the cases that load BF16 weights."""
    return {
        "pr_mask": dict(num_routed_experts=PR_EXPERTS, strategy="explicit", gpu_experts=PR_MASK),
        "small_mask": dict(num_routed_experts=8, strategy="explicit", gpu_experts=[1, 4, 6]),
        "explicit_auto_layer": dict(num_routed_experts=8, strategy="explicit", gpu_experts=[2, 5], layer_id="auto"),
        "random": dict(
            num_routed_experts=16,
            strategy="random",
            kt_num_gpu_experts=4,
            layer_id="auto",
        ),
        "frequency": dict(
            num_routed_experts=16,
            strategy="frequency",
            kt_num_gpu_experts=4,
            layer_id="auto",
            logical_count=_frequency_counts(),
        ),
        # No --init-expert-location file: the fork logs a uniform fallback, but
        # torch.topk over equal frequencies picks a non-prefix set.
        "frequency_no_file": dict(
            num_routed_experts=16,
            strategy="frequency",
            kt_num_gpu_experts=4,
            layer_id="auto",
        ),
        "uniform": dict(num_routed_experts=16, strategy="uniform", kt_num_gpu_experts=5, layer_id=2),
        "front-loading": dict(
            num_routed_experts=16,
            strategy="front-loading",
            kt_num_gpu_experts=20,
            layer_id=2,
        ),
        "tp0": dict(
            num_routed_experts=16,
            strategy="random",
            kt_num_gpu_experts=4,
            layer_id="auto",
            tp_size=2,
            tp_rank=0,
        ),
        "tp1": dict(
            num_routed_experts=16,
            strategy="random",
            kt_num_gpu_experts=4,
            layer_id="auto",
            tp_size=2,
            tp_rank=1,
        ),
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
    return {f"{name}/{path}": dict(cfg, path=path) for name, cfg in both.items() for path in ("none", "trivial")}


CASES = _cases()


@pytest.fixture(scope="module")
def results(stock_root, patched_root):
    """Every case on both trees: one probe process per tree, the two at once."""
    names = list(CASES)
    roots = {"stock": stock_root(TARGET), "patched": patched_root(TARGET)}
    runs = side_by_side(
        {
            label: lambda root=root: run_probe(root, PROBE, json.dumps([CASES[n] for n in names]))
            for label, root in roots.items()
        }
    )
    return {label: dict(zip(names, res)) for label, res in runs.items()}


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


# ---------------------------------------------------------------- the probe itself


def test_probe_runs_real_modules(results, stock_root, patched_root):
    for label, root in (
        ("stock", stock_root(TARGET)),
        ("patched", patched_root(TARGET)),
    ):
        res = results[label]["small_mask/none"]
        assert (
            Path(res["layer_file"]).resolve()
            == (Path(root) / "sglang/srt/layers/moe/fused_moe_triton/layer.py").resolve()
        )
        assert res["ktransformers_available"] is True  # real kt_kernel import
        assert res["kt_cpu_wrapper"] == "CpuExpertEngineStandIn"  # TP rank 0 built it
        assert res["loader_calls"] == 3 * 8


# ---------------------------------------------------------------- the PR's placement


def test_pr_mask_patched_both_paths(results):
    for path in ("none", "trivial"):
        res = results["patched"][f"pr_mask/{path}"]
        assert res["gpu_index_to_logical"] == PR_MASK
        assert slot_experts(res) == PR_MASK
        assert_correct(res)


def test_pr_mask_stock_without_metadata_is_wrong(results):
    res = results["stock"]["pr_mask/none"]
    assert res["gpu_index_to_logical"] == PR_MASK
    # Logical expert e landed in slot e: slots hold experts 0..3, routing expects the mask.
    assert slot_experts(res) == [0, 1, 2, 3]
    # The metadata path was already right on the stock tree.
    assert slot_experts(results["stock"]["pr_mask/trivial"]) == PR_MASK


def test_small_mask_stock_vs_patched(results):
    assert slot_experts(results["stock"]["small_mask/none"]) == [0, 1, 2]
    for path in ("none", "trivial"):
        assert slot_experts(results["patched"][f"small_mask/{path}"]) == [1, 4, 6]


# ---------------------------------------------------------------- the fork's strategies


@pytest.mark.parametrize("strategy", ["random", "frequency"])
def test_non_prefix_strategies(results, strategy):
    patched_none = results["patched"][f"{strategy}/none"]
    assert not patched_none["mask_is_prefix"], "strategy did not give a non-prefix mask"
    for path in ("none", "trivial"):
        assert_correct(results["patched"][f"{strategy}/{path}"])
    # Both paths give identical slot contents.
    assert patched_none["slots"] == results["patched"][f"{strategy}/trivial"]["slots"]
    # Stock, no metadata: slot k holds logical expert k, not gpu_index_to_logical[k].
    stock = results["stock"][f"{strategy}/none"]
    assert stock["gpu_index_to_logical"] == patched_none["gpu_index_to_logical"]
    assert slot_experts(stock) == list(range(stock["num_gpu_experts"]))
    assert slot_experts(stock) != stock["gpu_index_to_logical"]
    assert_correct(results["stock"][f"{strategy}/trivial"])


@pytest.mark.parametrize("strategy", ["uniform", "front-loading"])
def test_prefix_strategies_unchanged(results, strategy):
    for label in ("stock", "patched"):
        for path in ("none", "trivial"):
            res = results[label][f"{strategy}/{path}"]
            assert res["mask_is_prefix"]
            assert res["gpu_index_to_logical"] == list(range(res["num_gpu_experts"]))
            assert_correct(res)
    assert results["stock"][f"{strategy}/none"]["slots"] == results["patched"][f"{strategy}/none"]["slots"]


# ---------------------------------------------------------------- parallelism


@pytest.mark.parametrize("tp_rank", [0, 1])
def test_moe_tp_ranks(results, tp_rank):
    name = f"tp{tp_rank}"
    inter_per_rank = 8 // 2
    for path in ("none", "trivial"):
        res = results["patched"][f"{name}/{path}"]
        assert res["moe_tp_rank"] == tp_rank and res["shard_rows"] == inter_per_rank
        assert not res["mask_is_prefix"]
        assert_correct(res)
        # Every slot holds this rank's shard: rows/cols [tp_rank*4, tp_rank*4+4).
        assert shard_starts(res) == {(tp_rank * inter_per_rank,) * 3}
    assert results["patched"][f"{name}/none"]["slots"] == results["patched"][f"{name}/trivial"]["slots"]
    stock = results["stock"][f"{name}/none"]
    assert slot_experts(stock) == list(range(stock["num_gpu_experts"])) != stock["gpu_index_to_logical"]


def test_ep_rank_local_range(results):
    # EP 2, rank 1 owns global experts 4..7 (local 0..3); KT tables hold local ids
    # (see the module docstring), mask [1, 3] -> slots hold global experts 5 and 7.
    for path in ("none", "trivial"):
        res = results["patched"][f"ep1of2/{path}"]
        assert res["moe_ep_rank"] == 1 and res["num_local_experts"] == 4
        assert slot_experts(res) == [5, 7]
        assert_correct(res)
    assert slot_experts(results["stock"]["ep1of2/trivial"]) == [5, 7]
    assert slot_experts(results["stock"]["ep1of2/none"]) == [4, 5]


# ---------------------------------------------------------------- shared / CPU experts


def test_fused_shared_expert_past_the_mask(results):
    # EP 1: the shared expert's id (8) is past the 8-entry mask, so it gets no slot.
    for path in ("none", "trivial"):
        res = results["patched"][f"shared/{path}"]
        assert res["mask_len"] == 8 and res["num_local_experts"] == 9
        assert slot_experts(res) == [3, 6]
        assert_correct(res)
    assert slot_experts(results["stock"]["shared/none"]) == [0, 1]


def test_fused_shared_expert_inside_the_mask_with_ep(results):
    # EP 2 rank 0: the shared expert (global 8) has local id 4, mask entry 4 is set,
    # so routing sends it to slot 1 and both paths load it there.
    for path in ("none", "trivial"):
        res = results["patched"][f"shared_ep0of2/{path}"]
        assert res["num_local_experts"] == 5 and res["gpu_index_to_logical"] == [1, 4]
        assert expected_global(res, num_routed_experts=8, num_shared=1) == [1, 8]
        assert slot_experts(res) == [1, 8]
    assert slot_experts(results["stock"]["shared_ep0of2/trivial"]) == [1, 8]
    assert slot_experts(results["stock"]["shared_ep0of2/none"]) == [0, 1]


def test_explicit_mask_with_auto_layer(results):
    for path in ("none", "trivial"):
        res = results["patched"][f"explicit_auto_layer/{path}"]
        assert res["layer_id"] == 1  # the first MoE layer (first_k_dense_replace = 1)
        assert slot_experts(res) == [2, 5]


def test_auto_layer_without_a_non_prefix_mask_is_refused():
    masks = explicit_masks(4, 8, [0, 1])
    with pytest.raises(ValueError, match=r"layer_id='auto': no MoE layer 1\.\.3 has a non-prefix"):
        resolve_layer_id("auto", masks, 1)
    assert resolve_layer_id(2, masks, 1) == 2
    assert resolve_layer_id("auto", explicit_masks(4, 8, [0, 2]), 1) == 1


def test_frequency_without_a_file_is_not_a_prefix(results):
    # The "uniform distribution fallback" gives equal frequencies; torch.topk's ties
    # give a non-prefix set, so stock is wrong without metadata here too.
    patched = results["patched"]["frequency_no_file/none"]
    assert not patched["mask_is_prefix"]
    # 4 per MoE layer were asked for (layer 0 is dense, all GPU).
    assert patched["gpu_experts_per_layer"] == [16, 0, 12, 0]
    for path in ("none", "trivial"):
        assert_correct(results["patched"][f"frequency_no_file/{path}"])
    stock = results["stock"]["frequency_no_file/none"]
    assert slot_experts(stock) == list(range(stock["num_gpu_experts"])) != stock["gpu_index_to_logical"]


def test_every_patched_weight_case_is_correct(results):
    """Every BF16 case on the patched tree, both paths: slot k holds exactly the expert
    routing sends to slot k, so no CPU expert is in a slot."""
    names = [f"{name}/{path}" for name in WEIGHT_CASES for path in ("none", "trivial")]
    for name in names:
        cfg = CASES[name]
        res = results["patched"][name]
        expected = expected_global(res, cfg["num_routed_experts"], cfg.get("num_fused_shared_experts", 0))
        assert res["num_slots"] == res["num_gpu_experts"] == len(expected), name
        assert slot_experts(res) == expected, name


# ---------------------------------------------------------------- all experts at once


def test_weight_loader_fused(results):
    """weight_loader_fused (gpt-oss BF16/FP8): stock copies the [8, ...] tensor into
    the 3 GPU slots and fails loudly (right only when every expert is on the GPU);
    patched loads slot k from expert gpu_index_to_logical[k]."""
    for path in ("none", "trivial"):
        stock = results["stock"][f"fused/{path}"]
        assert stock["error"].startswith("The size of tensor a (3) must match the size of tensor b (8)")
        assert slot_experts(results["stock"][f"fused_all_gpu/{path}"]) == list(range(8))
        assert slot_experts(results["patched"][f"fused_all_gpu/{path}"]) == list(range(8))
        res = results["patched"][f"fused/{path}"]
        assert "error" not in res and slot_experts(res) == [1, 4, 6]


def test_mxfp4_all_experts_branch(results):
    """weight_loader(expert_id=None) with the MXFP4 config (gpt-oss MXFP4):
    Mxfp4MoEMethod has a row per local expert, so stock's copy succeeds and silently
    leaves expert k in slot k; patched rows follow the KT slot order."""
    for path in ("none", "trivial"):
        stock = results["stock"][f"mxfp4/{path}"]
        assert "error" not in stock and stock["gpu_index_to_logical"] == [1, 4, 6]
        assert [w13 for w13, _ in stock["slot_experts"]] == list(range(8))
        res = results["patched"][f"mxfp4/{path}"]
        assert res["slot_experts"] == [[e, e] for e in (1, 4, 6, 0, 2, 3, 5, 7)]


# ---------------------------------------------------------------- NVFP4 scales


def _pairs(res, gemm):
    """(weight_scale_2 expert, input-scale expert) of each GPU slot."""
    return [(s["weight_scale_2"], s["input_scale"]) for s in res[f"{gemm}_slots"]]


@pytest.mark.parametrize("backend", NVFP4_BACKENDS)
def test_nvfp4_slot_scales_are_the_slot_experts(results, backend):
    """After process_weights_after_loading, slot k's g1/g2_alphas and input-scale
    quant (what cutlass_moe_fp4 / flashinfer read for slot k) equal the non-KT
    layer's for expert gpu_index_to_logical[k], on both paths."""
    for path in ("none", "trivial"):
        ref = results["patched"][f"nvfp4_ref/{backend}/{path}"]
        assert ref == results["stock"][f"nvfp4_ref/{backend}/{path}"]
        res = results["patched"][f"nvfp4/{backend}/{path}"]
        assert res["gpu_index_to_logical"] == [1, 4, 6]
        for gemm in ("w13", "w2"):
            assert _pairs(res, gemm) == [_pairs(ref, gemm)[e] for e in (1, 4, 6)], (path, gemm)
            assert res[f"{gemm}_input_scale_quant_numel"] == ref[f"{gemm}_input_scale_quant_numel"]
        assert res["cpu_wrapper_loaded"] == [list(range(8))]


def test_nvfp4_pairing_per_backend(results):
    """The pairs themselves: per-slot input scales on the default (cutlass) branch and
    for w2 on cutedsl; one scalar, the max over all experts (expert 0's), otherwise."""
    own = [(e, e) for e in (1, 4, 6)]
    scalar = [(e, 0) for e in (1, 4, 6)]
    expected = {
        "auto": (own, own),
        "flashinfer_cutlass": (scalar, scalar),
        "flashinfer_cutedsl": (scalar, own),
    }
    for backend, (w13, w2) in expected.items():
        res = results["patched"][f"nvfp4/{backend}/trivial"]
        assert (_pairs(res, "w13"), _pairs(res, "w2")) == (w13, w2), backend


def test_nvfp4_ep_rank_slot_scales(results):
    ref = results["patched"]["nvfp4_ref_ep1of2/flashinfer_cutedsl/none"]
    for path in ("none", "trivial"):
        res = results["patched"][f"nvfp4_ep1of2/flashinfer_cutedsl/{path}"]
        assert res["gpu_index_to_logical"] == [1, 3]
        assert _pairs(res, "w2") == [_pairs(ref, "w2")[e] for e in (1, 3)] == [(5, 5), (7, 7)]


def test_nvfp4_input_scale_rows_in_slot_order(results):
    """Every input-scale row is written once: GPU experts in slot order, then CPU experts."""
    order = [1, 4, 6, 0, 2, 3, 5, 7]
    for path in ("none", "trivial"):
        res = results["patched"][f"nvfp4/auto/{path}"]
        assert res["loaded_w13_input_scale"] == [[nvfp4_input_scale(e, "w1")] * 2 for e in order]
        assert res["loaded_w2_input_scale"] == [nvfp4_input_scale(e, "w2") for e in order]
        n = res["num_gpu_experts"]
        assert res["loaded_w2_weight_scale_2"][:n] == [nvfp4_weight_scale_2(e, "w2") for e in (1, 4, 6)]


def test_nvfp4_stock(results):
    """Stock: without metadata slot k holds expert k (scales and weights alike); with
    metadata the per-slot pairs are right but the CPU experts' input-scale rows stay
    unwritten, and the branches that take a max over them get NaN."""
    nan = [("nan", "nan")] * 3
    for backend in NVFP4_BACKENDS:
        none = results["stock"][f"nvfp4/{backend}/none"]
        assert [ws2 for ws2, _ in _pairs(none, "w13")] == [0, 1, 2]
    trivial = {b: results["stock"][f"nvfp4/{b}/trivial"] for b in NVFP4_BACKENDS}
    own = [(e, e) for e in (1, 4, 6)]
    assert _pairs(trivial["auto"], "w13") == _pairs(trivial["auto"], "w2") == own
    assert _pairs(trivial["flashinfer_cutlass"], "w13") == _pairs(trivial["flashinfer_cutlass"], "w2") == nan
    assert _pairs(trivial["flashinfer_cutedsl"], "w13") == nan
    assert all(math.isnan(v) for row in trivial["auto"]["loaded_w13_input_scale"][3:] for v in row)


# ---------------------------------------------------------------- the patch's own test


def _run_upstream_test(root, test_file, stock=False):
    """The patch's own test, as the fork's CPU CI runs it: no project stand-ins (the
    test stands in for the CUDA natives itself, with the helper the patch adds to
    sglang.test, which the stock package gets from the patched tree:
    patch_test_helpers.py)."""
    if stock:
        return run_pytest([root, HERE, REPO_ROOT / "tests"], test_file, test_file.parent, ("patch_test_helpers",))
    return run_pytest([root], test_file, test_file.parent)


# Each test's outcome on stock; all pass patched. Stock passes where no remap is needed (a prefix
# placement, the fused loader's stand-ins, a full layer that loads every tensor) and fails the rest.
UPSTREAM_STOCK = {
    f"TestFusedMoEKTWeightLoader::{name}": outcome
    for name, outcome in {
        "test_eplb_needs_every_local_expert_on_the_gpu": "failed",
        "test_full_gpu_prefill_accepted_where_apply_never_takes_it": "failed",
        "test_full_gpu_prefill_accepted_where_the_full_layer_loads_all": "passed",
        "test_full_gpu_prefill_with_unloaded_checkpoint_params_is_refused": "failed",
        "test_fused_shared_expert_is_not_loaded_to_gpu_slots": "failed",
        "test_import_stand_ins_are_restored": "passed",
        "test_layouts_that_loaded_right_take_the_tensor_as_it_comes": "failed",
        "test_map_kt_gpu_expert_id": "failed",
        "test_mxfp4_all_experts_branch_follows_the_expert_map": "failed",
        "test_non_prefix_placement_both_paths": "failed",
        "test_prefix_placement_is_identity": "passed",
        "test_require_global_experts_params_in_slot_order": "failed",
        "test_require_global_experts_rows_follow_the_expert_map": "failed",
        "test_tensor_parallel_shard": "failed",
        "test_weight_loader_fused": "failed",
        "test_weight_loader_fused_expert_parallel": "failed",
        "test_weight_loader_fused_follows_the_expert_map": "failed",
    }.items()
}


def test_upstream_unit_test_passes_on_patched(patched_root):
    test_file = in_patch_test(TARGET, UPSTREAM_TEST)
    check_pytest_run(_run_upstream_test(patched_root(TARGET), test_file), dict.fromkeys(UPSTREAM_STOCK, "passed"))


def test_upstream_unit_test_fails_on_stock(stock_root):
    test_file = in_patch_test(TARGET, UPSTREAM_TEST)
    run = _run_upstream_test(stock_root(TARGET), test_file, stock=True)
    check_pytest_run(run, UPSTREAM_STOCK)
    slots = run.failures["TestFusedMoEKTWeightLoader::test_non_prefix_placement_both_paths"]
    assert "slot 0 w13 does not hold expert 1" in slots, slots[-3000:]
    remap = run.failures["TestFusedMoEKTWeightLoader::test_map_kt_gpu_expert_id"]
    assert "has no attribute '_map_kt_gpu_expert_id'" in remap, remap[-3000:]
