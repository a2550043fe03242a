"""One EPLB rebalance at run time on 2 EP ranks (processes forked after one import of sglang-kt,
joined over torch.distributed gloo), through the fork's real ``ExpertLocationUpdater`` and a KT
(or, as the control, a plain) ``FusedMoE``. Not collected by the suite: test_kt_expert_maps.py
runs it with the stock or the patched package first on PYTHONPATH.

Each rank builds the layer with kt_layer.py (real FusedMoE, real KTEPWrapperMethod,
explicit GPU-expert mask, trivial expert-location metadata from the real
``ExpertLocationMetadata``), loads every expert, runs the layer's real
``process_weights_after_loading`` (the CPU-expert engine records the map it loads with), lists
the tensors EPLB moves as the fork's models do (``filter_moe_weight_param_global_expert``), and
asks the real updater to move to the map the real ``ExpertLocationMetadata.init_by_eplb``
computes from seeded counts.
"""

import kt_layer
import torch
from gloo_ranks import run_ranks

WORLD = 2
E = 8
LAYER = 1
NUM_LAYERS = 4
COUNTS_SEED = 97
GLOO_TIMEOUT = 120
BASE = dict(num_routed_experts=E, strategy="explicit")
# KT layers with as many GPU slots as local experts (the updater moves them as physical rows) and
# with more (it moves nothing), the plain layer as the control, and KT with every local expert on
# the GPU in slot order.
CASES = [
    dict(BASE, gpu_experts=[1, 2, 5, 6]),
    dict(BASE, gpu_experts=[1, 3, 4, 6, 7]),
    dict(BASE, kt=False),
    dict(BASE, gpu_experts=[0, 1, 2, 3]),
]


def rebalanced_metadata(server_args, routed):
    from sglang.srt.eplb import expert_location

    expert_location.ModelConfigForExpertLocation.from_model_config = staticmethod(
        lambda model_config: expert_location.ModelConfigForExpertLocation(
            num_layers=NUM_LAYERS, num_logical_experts=routed
        )
    )
    gen = torch.Generator().manual_seed(COUNTS_SEED)
    counts = torch.randint(0, 1000, (1, NUM_LAYERS, routed), generator=gen)
    return expert_location.ExpertLocationMetadata.init_by_eplb(server_args, None, counts)


def rebalance(rank, cfg):
    """One case on this rank: build, load, rebalance; what every slot then holds."""
    from sglang.srt.eplb.expert_location import get_global_expert_location_metadata
    from sglang.srt.eplb.expert_location_updater import ExpertLocationUpdater
    from sglang.srt.layers.moe.utils import filter_moe_weight_param_global_expert

    routed = cfg["num_routed_experts"]
    kt_layer.set_process_groups(1, 0, WORLD, rank)
    server_args = kt_layer.make_server_args(dict(cfg, ep_size=WORLD), NUM_LAYERS, 1, None)
    kt_layer.install_server_args(server_args)
    if cfg.get("kt", True):
        kt_layer.install_explicit_masks(NUM_LAYERS, routed, cfg["gpu_experts"])
    kt_layer.install_trivial_metadata(server_args, routed, NUM_LAYERS, WORLD)
    moe = kt_layer.build_moe(dict(cfg, path="trivial"), LAYER)
    kt_layer.fill_sentinel(moe, kt_layer.SENTINEL)
    kt_layer.load_experts(moe, cfg, LAYER)
    moe.quant_method.process_weights_after_loading(moe)
    moved = [
        name
        for name, x in moe.named_parameters()
        if filter_moe_weight_param_global_expert(name, x, moe.num_local_experts)
    ]
    ExpertLocationUpdater().update(
        {LAYER: [getattr(moe, name) for name in moved]},
        rebalanced_metadata(server_args, routed),
        update_layer_ids=[LAYER],
        nnodes=1,
        rank=rank,
    )
    kt = moe.quant_method if cfg.get("kt", True) else None
    return dict(
        num_local_experts=moe.num_local_experts,
        moved=moved,
        physical_to_logical=get_global_expert_location_metadata().physical_to_logical_map_cpu[LAYER].tolist(),
        gpu_index_to_logical=None if kt is None else [int(i) for i in kt.gpu_index_to_logical],
        cpu_engine_maps=None if kt is None or kt.wrapper is None else kt.wrapper.loaded_maps,
        **kt_layer.decode_slots(moe.w13_weight.data, moe.w2_weight.data),
    )


def test_rebalance_leaves_kt_slots_on_the_old_map():
    """With a CPU expert or a slot that is no local expert in order, a rebalance leaves GPU slots
    and CPU experts on the old map. With every local expert on the GPU, slot k = local expert k,
    the slots follow the new map as the plain layer's do."""
    kt_layer.install_stand_ins()
    import sglang.srt.layers.moe.fused_moe_triton.layer  # noqa: F401  (imported once, before the fork)

    def work(rank, out):
        out["cases"] = [rebalance(rank, cfg) for cfg in CASES]

    result = run_ranks(work, WORLD, GLOO_TIMEOUT, deadline=2 * GLOO_TIMEOUT + 30)
    assert result["hung"] == [], result
    for rank, res in result["ranks"].items():
        assert res["error"] is None, (rank, res.get("traceback"))
    wrong_gpu = wrong_cpu = 0
    for rank in range(WORLD):
        kt_same, kt_more, plain, kt_all_local = result["ranks"][rank]["cases"]
        assert [kt_layer.held(s) for s in kt_all_local["slots"]] == [kt_layer.held(s) for s in plain["slots"]]
        assert kt_all_local["moved"] == ["w13_weight", "w2_weight"]
        p2l = plain["physical_to_logical"]
        assert p2l != list(range(E)) and kt_same["physical_to_logical"] == p2l
        # The control: the plain layer's slots follow the new map.
        assert [kt_layer.held(s) for s in plain["slots"]] == p2l[4 * rank : 4 * rank + 4]
        assert kt_same["moved"] == ["w13_weight", "w2_weight"] and kt_more["moved"] == []
        for case, res in zip(CASES[:2], (kt_same, kt_more)):
            wrong_gpu += kt_layer.wrong_weight_slots(res, dict(case, ep_size=2, ep_rank=rank))
            # The CPU engine keeps the map it loaded with.
            assert res["cpu_engine_maps"] == [list(range(E))]
            local_cpu = [q for q in range(4 * rank, 4 * rank + 4) if q % 4 not in case["gpu_experts"]]
            wrong_cpu += sum(p2l[q] != q for q in local_cpu)
    assert wrong_gpu > 0 and wrong_cpu > 0
