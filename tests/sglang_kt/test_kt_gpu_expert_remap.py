"""The KT GPU-expert remap on both FusedMoE weight-loader paths (sglang-kt 0.7.2).

Each probe (kt_remap_probe.py, run in a subprocess against the stock or the patched
tree) builds the real ``FusedMoE`` of ``srt/layers/moe/fused_moe_triton/layer.py``,
wrapped by the real ``KTEPWrapperMethod`` of ``srt/layers/moe/kt_ep_wrapper.py``
(through the fork's quant-method registry, masks from its own placement strategies or
its mask cache), loads distinct synthetic weights for every logical expert (every
w1/w3 row and w2 column names its expert, shard and index) through the real
``weight_loader``, and decodes what each GPU slot holds. Routing sends logical expert
e to slot ``logical_to_gpu_index[e]``, so slot k must hold ``gpu_index_to_logical[k]``.

Paths: ``none`` = no expert-location metadata (``weight_loader`` -> ``_weight_loader_impl``),
``trivial`` = trivial metadata built with the real ``ExpertLocationMetadata._init_raw``
(``weight_loader`` -> ``logical_to_all_physical`` -> ``_weight_loader_physical``).

Stand-ins (tests/sglang_kt/kt_native_stubs), only for native pieces that cannot run
on a CPU-only machine:
- ``sgl_kernel``: stub package (the real one is a CUDA extension; every op raises).
- ``torch.cuda.get_device_capability`` -> (9, 0) (queried at import by quantization/fp8.py).
- ``torch.cuda.Stream`` / ``torch.cuda.Event``: inert (KT's CPU-expert stream on TP rank 0).
- ``kt_kernel.KTMoEWrapper`` as referenced by kt_ep_wrapper: records its arguments (the
  real kt-kernel 0.7.2 is installed and imported, but its CPU-expert engine pins host
  memory in its constructor, which needs a CUDA driver).
- NVFP4 case only: ``modelopt_quant.is_blackwell_supported`` -> True and
  ``Tensor.cuda()`` -> stays on the CPU (``swizzle_blockscale`` in create_weights).
Test plumbing, not stubs: the process-group rank/size holders read by the real
``get_moe_tensor_parallel_rank()`` etc. (no torch.distributed), a plain-value
``ServerArgs`` stand-in with the KT fields, and a temporary ``logical_count`` .pt file
for the ``frequency`` strategy.

EP > 1: sglang-kt 0.7.2 does not reject KT with ``--ep-size > 1``. Its
``StandardDispatcher`` turns top-k ids into EP-local ids before
``KTEPWrapperMethod.apply`` masks/remaps them, so on an EP rank the KT tables are
indexed by local ids; the loader (stock metadata path, and both paths after the
patch) does the same, and the test checks that agreement. The per-layer mask is built
over global ids, so mask entries at or past ``num_local_experts`` are never reachable
on any rank; that is a limitation of the fork's KT+EP design, outside this patch.
"""

import json
from pathlib import Path

import pytest

from helpers import in_patch_test, run_probe, run_pytest

HERE = Path(__file__).resolve().parent
PROBE = HERE / "kt_remap_probe.py"
STUBS = HERE / "kt_native_stubs"
TARGET = "sglang-kt"
UPSTREAM_TEST = Path("test/registered/unit/layers/moe/test_fused_moe_kt_weight_loader.py")

PR_MASK = [76, 145, 262, 268]  # the non-prefix placement of kvcache-ai/sglang PR #97
PR_EXPERTS = 270
FREQ_COUNTS_SEED = 1234


def _frequency_counts(num_layers=4, num_experts=16):
    import random

    rng = random.Random(FREQ_COUNTS_SEED)
    return [[[rng.randrange(1000) for _ in range(num_experts)] for _ in range(num_layers)]]


def _cases():
    """name -> probe config (without `path`)."""
    cases = {
        "pr_mask": dict(num_routed_experts=PR_EXPERTS, strategy="explicit", gpu_experts=PR_MASK),
        "small_mask": dict(num_routed_experts=8, strategy="explicit", gpu_experts=[1, 4, 6]),
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
        "nvfp4": dict(
            num_routed_experts=8,
            strategy="explicit",
            gpu_experts=[1, 4, 6],
            modelopt=True,
            hidden_size=64,
            intermediate_size=64,
        ),
    }
    return {f"{name}/{path}": dict(cfg, path=path) for name, cfg in cases.items() for path in ("none", "trivial")}


CASES = _cases()


@pytest.fixture(scope="module")
def results(stock_root, patched_root):
    """Every case on both trees: one probe process per tree (import costs ~7 s)."""
    out = {}
    names = list(CASES)
    for label, root in (
        ("stock", stock_root(TARGET)),
        ("patched", patched_root(TARGET)),
    ):
        res = run_probe(root, PROBE, json.dumps([CASES[n] for n in names]))
        out[label] = dict(zip(names, res))
    return out


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


def expected_global(res):
    """What slot k must hold: the expert routing sends there (EP-local ids -> global)."""
    offset = res["moe_ep_rank"] * res["num_local_experts"]
    return [offset + e for e in res["gpu_index_to_logical"]]


def assert_correct(res):
    assert res["num_slots"] == res["num_gpu_experts"] == len(res["gpu_index_to_logical"])
    assert all(s[p] != "unwritten" for s in res["slots"] for p in s), "a GPU slot was not written"
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


def test_fused_shared_expert_skipped(results):
    for path in ("none", "trivial"):
        res = results["patched"][f"shared/{path}"]
        assert res["mask_len"] == 8 and res["num_local_experts"] == 9
        assert 8 not in slot_experts(res)
        assert slot_experts(res) == [3, 6]
        assert_correct(res)
    assert slot_experts(results["stock"]["shared/none"]) == [0, 1]


def test_cpu_experts_never_written(results):
    """Every patched case: each GPU slot holds exactly the GPU expert routed there, so no
    CPU expert was written into a slot."""
    for name, res in results["patched"].items():
        if "slots" in res:
            assert_correct(res)
            assert set(slot_experts(res)) <= set(expected_global(res)), name


# ---------------------------------------------------------------- require-global params


def _scale(expert, shard):
    return float(expert * 10000 + {"w1": 1000, "w3": 3000, "w2": 2000}[shard])


def test_nvfp4_input_scales_global_on_both_paths(results):
    for path in ("none", "trivial"):
        res = results["patched"][f"nvfp4/{path}"]
        assert res["require_global"] == [True, True]
        assert res["input_scale_shapes"] == [
            [8, 2],
            [8],
        ]  # [num_experts, 2], [num_experts]
        # One row per global expert, CPU experts included (w3 is loaded after w1 and
        # _load_single_value writes the whole row).
        assert res["w13_input_scale"] == [[_scale(e, "w3")] * 2 for e in range(8)]
        assert res["w2_input_scale"] == [_scale(e, "w2") for e in range(8)]
        # The per-slot scales (weight_scale_2) follow the KT remap.
        n = res["num_gpu_experts"]
        assert res["w13_weight_scale_2"][:n] == [[_scale(e, "w1"), _scale(e, "w3")] for e in (1, 4, 6)]
        assert res["w2_weight_scale_2"][:n] == [_scale(e, "w2") for e in (1, 4, 6)]
    assert results["patched"]["nvfp4/none"]["w13_input_scale"] == results["patched"]["nvfp4/trivial"]["w13_input_scale"]


def test_nvfp4_input_scales_stock_metadata_path_is_wrong(results):
    res = results["stock"]["nvfp4/trivial"]
    # Stock remapped the global-indexed input scales to GPU-slot rows and skipped the
    # CPU experts, whose rows stay uninitialised (the probe's sentinel -1).
    assert res["w2_input_scale"] == [_scale(e, "w2") for e in (1, 4, 6)] + [-1.0] * 5
    assert res["w13_input_scale"][3:] == [[-1.0, -1.0]] * 5


# ---------------------------------------------------------------- the patch's own test


def _run_upstream_test(root, test_file):
    return run_pytest([root, STUBS], test_file, test_file.parent, plugins=("kt_cpu_stubs",))


def test_upstream_unit_test_passes_on_patched(patched_root):
    test_file = in_patch_test(TARGET, UPSTREAM_TEST)
    proc = _run_upstream_test(patched_root(TARGET), test_file)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_upstream_unit_test_fails_on_stock(stock_root):
    test_file = in_patch_test(TARGET, UPSTREAM_TEST)
    proc = _run_upstream_test(stock_root(TARGET), test_file)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "test_non_prefix_placement_both_paths" in proc.stdout
    assert "has no attribute '_map_kt_gpu_expert_id'" in proc.stdout
