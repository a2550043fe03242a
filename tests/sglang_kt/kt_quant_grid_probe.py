"""Probe: one real KT ``FusedMoE`` per case over the fork's quantisation methods that
can back a KT GPU expert, built with the case's KT flags, placement and EP rank; what
its full-GPU prefill layer would load, and whether the layer refuses the combination.

Each case: ``quant`` (a key of QUANT_CONFIGS), ``gpu_experts``, ``ep_size``,
``ep_rank``, ``prefill_threshold``, ``dynamic_update``. The layer is built by the real
``FusedMoE`` with the real quantisation config (through the fork's quant-method
registry, so the real ``KTEPWrapperMethod`` wraps the real GPU method), every
checkpoint parameter is filled with its expert's number (row e of a parameter with
one row per expert slot holds ``gpu_index_to_logical[e]``), and the real
``KTEPWrapperMethod.process_weights_after_loading`` runs. Where the layer is accepted
with a prefill threshold, the real ``SharedFullContext`` builds its full layer (its
host buffers and the KT engine's transfer not: they need the CPU-expert engine); the
probe writes into that layer exactly the tensors the context's load transfers
(``weight_names``) and whatever its INT4 load sets itself, every other parameter
marked unwritten (NaN, or -1 for integers), and reports, per checkpoint parameter,
the experts its rows then hold.

Stand-ins beyond kt_remap_probe's: ``is_blackwell_supported`` -> True (NVFP4);
``Tensor.cuda()`` stays on the CPU. The wrapped method's own
``process_weights_after_loading`` is replaced by a pass-through where it calls a GPU
kernel or the device (per-tensor FP8 requantisation: ``sgl_per_tensor_quant_fp8``;
INT4 Marlin repack; MXFP4 triton swizzle; NVFP4 block-scale swizzle); where those
branches keep ``w13_weight`` the full-GPU path is reachable, which is what the check
reads (a branch that deletes it is test_fused_moe_kt_weight_loader's case).

argv: a JSON list of cases. Prints one JSON list of results on its last line.
"""

import json
import sys

import kt_remap_probe as probe
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

    ctx = probe.shared_full_context(moe)
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
    probe.set_process_groups(1, 0, cfg["ep_size"], cfg["ep_rank"])
    server_args = probe.make_server_args(
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
    probe.install_server_args(server_args)
    probe.install_explicit_masks(NUM_LAYERS, routed, cfg["gpu_experts"])
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


def main():
    sys.path.insert(0, str(probe.STUBS))
    import kt_cpu_stubs  # noqa: F401  (must precede sglang)

    kt_cpu_stubs.keep_cuda_copies_on_cpu()
    from sglang.srt.layers.quantization import fp8_utils, modelopt_quant
    from sglang.srt.layers.quantization.compressed_tensors.schemes import compressed_tensors_w4a4_nvfp4_moe as ct_nvfp4

    for mod in (modelopt_quant, ct_nvfp4, fp8_utils):
        mod.is_blackwell_supported = lambda: True
    print(json.dumps([run_case(cfg) for cfg in json.loads(sys.argv[1])]))


if __name__ == "__main__":
    main()
