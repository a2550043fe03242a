"""A reference MoE standing in for DeepGEMM MegaMoE around sglang's real
``run_mega_routed_experts`` (layers/moe/mega_moe.py, the path every MegaMoE model
without its own copy runs) and ``KimiK3MoE._forward_mega_experts``.

Replaced, because they are native CUDA code that cannot run on a CPU: the
``deep_gemm`` module (``get_symm_buffer_for_mega_moe``, ``fp8_fp4_mega_moe``) and
the JIT kernel ``sglang.kernels.ops.moe.dsv4.mega_moe_pre_dispatch``. Like the
real ones, the stand-ins share a symmetric buffer of ``cap`` rows per rank: the
pre-dispatch refuses more rows than it holds, and the fused kernel computes
``sum_k w_k * expert_{id_k}(x)`` for the rows the pre-dispatch wrote. With a
``torch.distributed`` group the kernel is an expert-parallel exchange: every
call all-gathers the ranks' buffers, each rank applies its own experts to every
rank's rows, and an all-reduce returns each rank its rows' sums, so a rank that
enters it a different number of times than its peers waits for them.

Everything else is sglang's own code: the K3 module is ``KimiK3MoE`` made with
``__new__`` and given only the attributes ``_forward_mega_experts`` reads, the
shared path's experts a namespace with the attributes ``run_mega_routed_experts``
reads.
"""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import torch

HIDDEN = 16
INTERMEDIATE = 8
NUM_EXPERTS = 8
TOP_K = 2


def expert_weights(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    l1 = torch.randn(NUM_EXPERTS, HIDDEN, INTERMEDIATE, generator=gen, dtype=torch.float64)
    l2 = torch.randn(NUM_EXPERTS, INTERMEDIATE, HIDDEN, generator=gen, dtype=torch.float64)
    return l1, l2


def reference_moe(x, ids, weights, l1, l2, experts=range(NUM_EXPERTS)) -> torch.Tensor:
    """sum over k of weights[:, k] * expert_{ids[:, k]}(x), for the given experts only."""
    x = x.to(torch.float64)
    out = torch.zeros(x.shape[0], HIDDEN, dtype=torch.float64)
    for e in experts:
        hit = ids == e
        rows = hit.any(dim=1).nonzero().flatten()
        if rows.numel() == 0:
            continue
        w = (weights.to(torch.float64) * hit)[rows].sum(dim=1, keepdim=True)
        out[rows] += w * (torch.relu(x[rows] @ l1[e]) @ l2[e])
    return out


class StandIn:
    """Installs the stand-ins; counts the fused kernel's launches."""

    def __init__(self, cap: int, group=None):
        self.cap = cap
        self.group = group
        self.l1, self.l2 = expert_weights()
        self.launches = []
        self.buf = SimpleNamespace(
            x=torch.zeros(cap, HIDDEN, dtype=torch.float64),
            x_sf=None,
            topk_idx=torch.zeros(cap, TOP_K, dtype=torch.int64),
            topk_weights=torch.zeros(cap, TOP_K, dtype=torch.float64),
            rows=0,
        )

    def install(self):
        from sglang.kernels.ops.moe import dsv4
        from sglang.srt.layers.moe import mega_moe

        mega_moe._MEGA_MOE_SYMM_BUFFER.clear()  # sglang's cache of symmetric buffers

        deep_gemm = ModuleType("deep_gemm")
        deep_gemm.get_num_sms = lambda: 132
        deep_gemm.set_num_sms = lambda n: None
        deep_gemm.get_symm_buffer_for_mega_moe = lambda *a, **k: self.buf
        deep_gemm.fp8_fp4_mega_moe = self.fused_kernel
        sys.modules["deep_gemm"] = deep_gemm
        dsv4.mega_moe_pre_dispatch = self.pre_dispatch
        mega_moe.mega_moe_pre_dispatch = self.pre_dispatch

    def pre_dispatch(self, x, topk_ids, topk_weights, buf_x, buf_x_sf, buf_idx, buf_w, **kwargs):
        rows = x.shape[0]
        if rows > buf_x.shape[0]:
            raise RuntimeError(f"pre-dispatch: {rows} rows overflow the {buf_x.shape[0]}-row symmetric buffer")
        buf_x[:rows] = x.to(torch.float64)
        buf_idx[:rows] = topk_ids.to(torch.int64)
        buf_w[:rows] = topk_weights.to(torch.float64)
        self.buf.rows = rows

    def fused_kernel(self, y, l1, l2, buf, **kwargs):
        rows = buf.rows
        self.launches.append(rows)
        if self.group is None:
            out = reference_moe(buf.x[:rows], buf.topk_idx[:rows], buf.topk_weights[:rows], self.l1, self.l2)
        else:
            out = self._expert_parallel(rows)
        y[:rows] = out.to(y.dtype)

    def replay(self, launches: list[int]) -> None:
        """What replaying a CUDA graph does: the captured launches again, each with the rows
        it captured (the buffer holds whatever the last launch left), no Python of the layer."""
        for rows in launches:
            self.buf.rows = rows
            self._expert_parallel(rows)

    def _expert_parallel(self, rows: int) -> torch.Tensor:
        dist = torch.distributed
        world, rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        shared = torch.cat([self.buf.x, self.buf.topk_idx.double(), self.buf.topk_weights], dim=1)
        shared = torch.cat([shared, torch.full((self.cap, 1), float(rows), dtype=torch.float64)], dim=1)
        gathered = [torch.empty_like(shared) for _ in range(world)]
        dist.all_gather(gathered, shared, group=self.group)
        per_rank = NUM_EXPERTS // world
        mine = range(rank * per_rank, (rank + 1) * per_rank)
        partial = torch.zeros(world, self.cap, HIDDEN, dtype=torch.float64)
        for r, g in enumerate(gathered):
            n = int(g[0, -1].item()) if self.cap else 0
            x, ids = g[:n, :HIDDEN], g[:n, HIDDEN : HIDDEN + TOP_K].long()
            w = g[:n, HIDDEN + TOP_K : HIDDEN + 2 * TOP_K]
            partial[r, :n] = reference_moe(x, ids, w, self.l1, self.l2, mine)
        dist.all_reduce(partial, group=self.group)
        return partial[rank, :rows]


def k3_moe(
    num_experts: int = NUM_EXPERTS,
    intermediate: int = INTERMEDIATE,
    hidden: int = HIDDEN,
    fuse_scaling: bool = False,
    routed_scaling: float = 2.5,
):
    """sglang's KimiK3MoE with the attributes _forward_mega_experts reads."""
    from sglang.srt.models.kimi_k3 import KimiK3MoE

    moe = KimiK3MoE.__new__(KimiK3MoE)
    torch.nn.Module.__init__(moe)
    moe.experts = SimpleNamespace(
        num_experts=num_experts,
        mega_l1_weights=object(),
        mega_l2_weights=object(),
        should_fuse_routed_scaling_factor_in_topk=fuse_scaling,
        _mega_moe_nvfp4=False,
        _mega_moe_w4a4=False,
    )
    moe._mega_top_k = TOP_K
    moe._mega_intermediate_size = intermediate
    moe.moe_hidden_size = hidden
    moe.routed_scaling_factor = routed_scaling
    return moe


def batch(rows: int, seed: int):
    """Rows of routed input and their routing (sglang's top-k output), from a seed."""
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, HIDDEN, generator=gen).to(torch.bfloat16)
    ids = torch.argsort(torch.rand(rows, NUM_EXPERTS, generator=gen), dim=1)[:, :TOP_K]
    weights = torch.rand(rows, TOP_K, generator=gen)
    return x, StandardTopKOutput(topk_weights=weights, topk_ids=ids, router_logits=None)


def expected(x, topk, scale: float) -> torch.Tensor:
    l1, l2 = expert_weights()
    return reference_moe(x, topk.topk_ids, topk.topk_weights.to(torch.float32), l1, l2) * scale


def shared_forward(x, topk, routed_scaling: float = 2.5) -> torch.Tensor:
    """sglang's shared run_mega_routed_experts over this rank's rows."""
    from sglang.srt.layers.moe.mega_moe import run_mega_routed_experts

    experts = SimpleNamespace(
        num_experts=NUM_EXPERTS,
        mega_l1_weights=object(),
        mega_l2_weights=object(),
        _mega_moe_nvfp4=False,
        _mega_moe_w4a4=False,
    )
    return run_mega_routed_experts(
        experts,
        x,
        topk.topk_ids,
        topk.topk_weights,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        top_k=TOP_K,
        num_tokens=x.shape[0],
        routed_scaling_factor=routed_scaling,
    )
