"""Every quantisation method of sglang-kt 0.7.2 that can back a KT GPU expert x KT flag x GPU
placement x EP size: each cell is refused at startup in one line, or computes with loaded numbers
(series 0006-0007). Fixed grid, no randomness. Not collected by the suite: test_kt_quant_grid.py
runs it with the stock or the patched package first on PYTHONPATH; the stock package passes
test_stock_computes_wrong_in_the_cells_named and fails the other, the patched one the reverse.
WRONG names the cells, so the patch refuses exactly the cells that are wrong on stock.

Each cell builds the real ``FusedMoE`` with the real quantisation config (through the fork's
quant-method registry, so the real ``KTEPWrapperMethod`` wraps the real GPU method), fills every
checkpoint parameter with its expert's number (row e of a parameter with one row per expert slot
holds ``gpu_index_to_logical[e]``) and runs the real ``KTEPWrapperMethod.process_weights_after_loading``.
Where the layer is accepted with a prefill threshold, the real ``SharedFullContext`` builds its full
layer (its host buffers and the KT engine's transfer not: they need the CPU-expert engine); the
tensors the context's load transfers (``weight_names``) and whatever its INT4 load sets itself are
written into that layer, every other parameter marked unwritten (NaN, or -1 for integers). A cell is
right when:

- ``--kt-gpu-prefill-token-threshold``: every checkpoint parameter of the full-GPU prefill layer
  holds each expert's numbers after the load (a parameter the load does not transfer keeps its
  created values, and what post-processing derives from it is derived from those), and the load
  does not raise;
- ``--kt-enable-dynamic-expert-update``: it copies from that full layer, so the same; without a
  threshold it never runs (it needs the full-GPU prefill layer);
- ``--enable-eplb``: GPU slot k is local expert k for every local expert, the one placement whose
  slots a rebalance moves right (the real ``ExpertLocationUpdater`` on 2 EP ranks:
  test_kt_expert_maps.py::test_eplb_rebalance_on_stock);
- no flag: the placement loads (the loaders' slot contents under every map are
  gpu_expert_remap.py's and expert_maps.py's cases).

Stand-ins beyond kt_layer.py's: ``is_blackwell_supported`` -> True (NVFP4); ``Tensor.cuda()``
stays on the CPU. The wrapped method's own ``process_weights_after_loading`` is replaced by a
pass-through where it calls a GPU kernel or the device (per-tensor FP8 requantisation:
``sgl_per_tensor_quant_fp8``; INT4 Marlin repack; MXFP4 triton swizzle; NVFP4 block-scale swizzle);
where those branches keep ``w13_weight`` the full-GPU path is reachable, which is what the check
reads (a branch that deletes it is test_fused_moe_kt_weight_loader's case).
"""

import kt_layer
import pytest
import torch

HIDDEN = INTER = 128
NUM_LAYERS = 4
LAYER = 1
# Methods whose post-processing calls a GPU kernel (see the docstring).
GPU_POSTPROCESS = {
    "fp8_tensor_static",
    "fp8_tensor_dynamic",
    "ct_fp8_tensor_static",
    "ct_wna16",
    "ct_wna16_group",
    "modelopt_fp8",
    "mxfp4",
    "modelopt_fp4",
    "ct_nvfp4",
}


def _ct(weights, acts, fmt):
    from sglang.srt.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig

    group = {"targets": ["Linear"], "weights": weights, "input_activations": acts}
    return CompressedTensorsConfig.from_config(
        {"format": fmt, "quant_method": "compressed-tensors", "config_groups": {"group_0": group}, "ignore": []}
    )


def _fp8(strategy, dynamic):
    return {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True, "dynamic": dynamic}


def _int4(actorder):
    return {
        "num_bits": 4,
        "type": "int",
        "strategy": "group",
        "group_size": 32,
        "symmetric": True,
        "dynamic": False,
        "actorder": actorder,
    }


def quant_config(name):
    from sglang.srt.layers.quantization import modelopt_quant
    from sglang.srt.layers.quantization.fp8 import Fp8Config
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    nvfp4 = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True}
    makers = {
        "bf16": lambda: None,
        "fp8_block": lambda: Fp8Config(is_checkpoint_fp8_serialized=True, weight_block_size=[128, 128]),
        "fp8_tensor_static": lambda: Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="static"),
        "fp8_tensor_dynamic": lambda: Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic"),
        "ct_fp8_channel": lambda: _ct(_fp8("channel", False), _fp8("token", True), "float-quantized"),
        "ct_fp8_tensor_static": lambda: _ct(_fp8("tensor", False), _fp8("tensor", False), "float-quantized"),
        "ct_nvfp4": lambda: _ct(dict(nvfp4, dynamic=False), dict(nvfp4, dynamic="local"), "nvfp4-pack-quantized"),
        "ct_wna16": lambda: _ct(_int4(None), None, "pack-quantized"),
        "ct_wna16_group": lambda: _ct(_int4("group"), None, "pack-quantized"),
        "modelopt_fp4": lambda: modelopt_quant.ModelOptFp4Config(is_checkpoint_nvfp4_serialized=True, group_size=16),
        "modelopt_fp8": lambda: modelopt_quant.ModelOptFp8Config(is_checkpoint_fp8_serialized=True),
        "mxfp4": lambda: Mxfp4Config(is_checkpoint_mxfp4_serialized=True),
    }
    return makers[name]()


def fill_by_expert(layer, experts):
    """Row e of every checkpoint parameter with one row per slot holds experts[e]."""
    for name, p in layer.named_parameters():
        if not hasattr(p, "weight_loader"):
            continue
        if p.dim() == 0 or p.shape[0] != len(experts):
            p.data.fill_(-2)  # not per expert
            continue
        for row, e in enumerate(experts):
            p.data[row] = e


def experts_held(p):
    """Per row, the expert it holds (None: unwritten or mixed)."""
    out = []
    for row in p.data:
        vals = set(row.float().flatten().tolist()) if row.numel() else {None}
        v = vals.pop() if len(vals) == 1 else None
        out.append(None if v is None or v != v or v < 0 else int(v))
    return out


def full_layer(moe, checkpoint_names):
    """The real SharedFullContext's full layer after what its load writes: per
    checkpoint parameter, whether every expert's row then holds that expert."""
    from sglang.srt.layers.moe import kt_ep_wrapper

    ctx = kt_layer.shared_full_context(moe)
    ctx.close = lambda: None  # it made no host buffers; its gc.collect() per context is slow
    full = ctx.gpu_layer
    for p in ctx.original_params.values():
        p.data.fill_(float("nan") if p.dtype.is_floating_point and p.dtype.itemsize >= 2 else -1)
    written = list(ctx.weight_names)
    for name in written:
        for e, row in enumerate(getattr(full, name).data):
            row.fill_(e)
    set_by_load = []
    if ctx.weight_names is kt_ep_wrapper.SharedFullContext.WEIGHT_NAMES_INT4:
        try:  # _prepare_weight_int4 starts with this
            actorder = ctx._resolve_int4_quant_params()[3]
        except AttributeError as exc:
            return {"transferred": written, "load_error": f"AttributeError: {exc}"}
        if actorder != "group":  # _prepare_weight_int4 empties these
            set_by_load = ["w13_weight_g_idx", "w2_weight_g_idx", "w13_g_idx_sort_indices", "w2_g_idx_sort_indices"]
    loaded = {
        name: name in set_by_load or experts_held(getattr(full, name)) == list(range(full.num_experts))
        for name in checkpoint_names
        if not name.endswith("_weight_shape")  # compressed-tensors metadata, never computed with
    }
    return {"transferred": written, "full_params_loaded": loaded}


def run_case(cfg):
    from sglang.srt.layers.moe.fused_moe_triton import layer as layer_mod

    routed = 8
    kt_layer.set_process_groups(1, 0, cfg["ep_size"], cfg["ep_rank"])
    server_args = kt_layer.make_server_args(
        dict(
            num_routed_experts=routed,
            strategy="explicit",
            gpu_experts=cfg["gpu_experts"],
            ep_size=cfg["ep_size"],
            prefill_threshold=cfg["prefill_threshold"] or None,
            dynamic_update=cfg["dynamic_update"],
            enable_eplb=cfg["enable_eplb"],
            hidden_size=HIDDEN,
            intermediate_size=INTER,
        ),
        NUM_LAYERS,
        1,
        None,
    )
    kt_layer.install_server_args(server_args)
    kt_layer.install_explicit_masks(NUM_LAYERS, routed, cfg["gpu_experts"])
    try:
        moe = layer_mod.FusedMoE(
            num_experts=routed,
            hidden_size=HIDDEN,
            intermediate_size=INTER,
            layer_id=LAYER,
            top_k=2,
            params_dtype=torch.bfloat16,
            quant_config=quant_config(cfg["quant"]),
            prefix=f"model.layers.{LAYER}.mlp.experts",
        )
    except ValueError as exc:
        return {"refused": str(exc), "at": "build"}
    method = moe.quant_method
    assert type(method).__name__ == "KTEPWrapperMethod", type(method)
    slots = [int(i) for i in method.gpu_index_to_logical]
    fill_by_expert(moe, slots)
    checkpoint_names = [n for n, p in moe.named_parameters() if hasattr(p, "weight_loader")]
    if cfg["quant"] in GPU_POSTPROCESS:
        method.gpu_method.process_weights_after_loading = lambda layer: None
    try:
        method.process_weights_after_loading(moe)
    except ValueError as exc:
        return {"refused": str(exc), "at": "process_weights_after_loading"}
    out = {"gpu_index_to_logical": slots, "num_local_experts": moe.num_local_experts}
    if cfg["prefill_threshold"]:
        out.update(full_layer(moe, checkpoint_names))
    return out


QUANTS = (
    "bf16",
    "fp8_block",
    "fp8_tensor_static",
    "fp8_tensor_dynamic",
    "ct_fp8_channel",
    "ct_fp8_tensor_static",
    "ct_nvfp4",
    "ct_wna16",
    "ct_wna16_group",
    "modelopt_fp4",
    "modelopt_fp8",
    "mxfp4",
)
FLAGS = {
    "none": {},
    "threshold": {"prefill_threshold": 512},
    "dynamic": {"dynamic_update": True},
    "threshold+dynamic": {"prefill_threshold": 512, "dynamic_update": True},
    "eplb": {"enable_eplb": True},
}
# (EP size, EP rank, GPU experts of the layer's mask); 8 experts, 4 local on EP 2.
LAYOUTS = {
    "ep1/partial": (1, 0, [1, 4, 6]),
    "ep1/all": (1, 0, list(range(8))),
    "ep2r0/partial": (2, 0, [1, 3]),
    "ep2r1/all_local": (2, 1, [0, 1, 2, 3]),
}
NEXT_STEP = {
    "--kt-gpu-prefill-token-threshold": "Drop --kt-gpu-prefill-token-threshold; prefill then runs on the hybrid CPU/GPU path.",
    "--enable-eplb": "Put every local expert on the GPU, or drop --enable-eplb",
}


def _cells():
    cells = {}
    for quant in QUANTS:
        for flag, fields in FLAGS.items():
            for layout, (ep_size, ep_rank, gpu_experts) in LAYOUTS.items():
                if flag == "eplb" and ep_size == 1:
                    continue  # EPLB needs --ep-size > 1
                cfg = dict(quant=quant, gpu_experts=gpu_experts, ep_size=ep_size, ep_rank=ep_rank)
                cfg.update(dict(prefill_threshold=0, dynamic_update=False, enable_eplb=False), **fields)
                cells[f"{quant}/{flag}/{layout}"] = cfg
    return cells


CELLS = _cells()


# The methods whose full-GPU prefill layer cannot load some checkpoint tensor: ModelOpt and
# compressed-tensors NVFP4, FP8 with static input scales, gpt-oss MXFP4's biases, INT4 with grouped
# activation order.
THRESHOLD_GAPS = (
    "fp8_tensor_static",
    "ct_fp8_tensor_static",
    "ct_nvfp4",
    "ct_wna16_group",
    "modelopt_fp4",
    "modelopt_fp8",
    "mxfp4",
)


def _wrong(name):
    """A threshold over one of THRESHOLD_GAPS, with or without the dynamic update; EPLB unless every
    local expert is on the GPU in slot order."""
    quant, flag, layout = name.split("/", 2)
    return (flag.startswith("threshold") and quant in THRESHOLD_GAPS) or (
        flag == "eplb" and layout != "ep2r1/all_local"
    )


WRONG = [name for name in CELLS if _wrong(name)]


def right(res, cfg):
    """Whether an accepted cell computes with loaded numbers in every slot (see the docstring)."""
    if "refused" in res:
        return False
    if cfg["prefill_threshold"] and ("load_error" in res or not all(res["full_params_loaded"].values())):
        return False
    if cfg["enable_eplb"]:
        return res["gpu_index_to_logical"] == list(range(res["num_local_experts"]))
    return True


@pytest.fixture(scope="module")
def grid():
    kt_layer.install_stand_ins().keep_cuda_copies_on_cpu()
    from sglang.srt.layers.quantization import fp8_utils, modelopt_quant
    from sglang.srt.layers.quantization.compressed_tensors.schemes import compressed_tensors_w4a4_nvfp4_moe as ct_nvfp4

    for mod in (modelopt_quant, ct_nvfp4, fp8_utils):
        mod.is_blackwell_supported = lambda: True
    return {name: run_case(cfg) for name, cfg in CELLS.items()}


def test_stock_computes_wrong_in_the_cells_named(grid):
    """Nothing is refused; the cells WRONG names compute with unloaded numbers, the rest right.
    The gaps the issue names: compressed-tensors NVFP4 under a threshold has its full layer taken
    for INT4, whose load raises; FP8 with static input scales never loads them."""
    assert [n for n, res in grid.items() if "refused" in res] == []
    assert [n for n, cfg in CELLS.items() if not right(grid[n], cfg)] == WRONG
    for layout in LAYOUTS:
        for flag in ("threshold", "threshold+dynamic"):
            ct_nvfp4 = grid[f"ct_nvfp4/{flag}/{layout}"]
            assert ct_nvfp4["load_error"].startswith("AttributeError: Unable to resolve INT4 quantization params")
            for quant in ("fp8_tensor_static", "ct_fp8_tensor_static", "modelopt_fp8"):
                loaded = grid[f"{quant}/{flag}/{layout}"]["full_params_loaded"]
                assert [n for n, ok in loaded.items() if not ok] == ["w13_input_scale", "w2_input_scale"]


def test_patched_refuses_the_cells_named(grid):
    """Exactly the cells WRONG names are refused, each in one line naming the flag and what to
    use instead; every other cell computes right with its own placement. Not over-refused: NVFP4
    with the dynamic update alone, EPLB with every local expert on the GPU."""
    assert [n for n, res in grid.items() if "refused" in res] == WRONG
    for name, cfg in CELLS.items():
        res = grid[name]
        if "refused" in res:
            line = res["refused"]
            flag = "--enable-eplb" if cfg["enable_eplb"] else "--kt-gpu-prefill-token-threshold"
            assert "\n" not in line and line.startswith(flag) and NEXT_STEP[flag] in line, (name, line)
        else:
            assert right(res, cfg), (name, res)
            assert res["gpu_index_to_logical"] == cfg["gpu_experts"], name
    for layout in LAYOUTS:
        for flag in ("threshold", "threshold+dynamic"):
            for quant in ("fp8_tensor_static", "ct_fp8_tensor_static", "modelopt_fp8"):
                assert "w13_input_scale, w2_input_scale" in grid[f"{quant}/{flag}/{layout}"]["refused"]
            assert "refused" in grid[f"ct_nvfp4/{flag}/{layout}"]
        for quant in ("modelopt_fp4", "ct_nvfp4"):
            assert "refused" not in grid[f"{quant}/dynamic/{layout}"]
    for quant in QUANTS:
        assert "refused" not in grid[f"{quant}/eplb/ep2r1/all_local"]
        assert "refused" in grid[f"{quant}/eplb/ep2r0/partial"]
