#!/usr/bin/env python3
"""sglang's shared SM90 MegaMoE path on DeepGEMM's real kernel at EP = 1, rows in passes.

Runs ``run_mega_routed_experts`` -> ``run_sm90_mega_routed`` of sglang 0.5.23 as build/trees
holds it (mega_moe.py, mega_moe_sm90.py and environ.py loaded by file path, byte for byte)
on DeepGEMM's ``mega_moe_pre_dispatch_sm90`` and ``fp8_mega_moe`` (sgl-deep-gemm
0.1.5.post1, the last build for torch 2.11), over a world of one NCCL rank whose
symmetric buffer is DeepGEMM's own. N rows run as 1, 2 and 4 passes, cap = N / passes
(SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK, read by sglang's own envs); the
one-pass run (cap = N) is what stock runs.

Per (N, cap): kernel launches per call; the output against the one-pass output, and every
output against a float reference from the same FP8 expert weights; CUDA-event µs per call
(warm-up, median over repeats), eager and as a captured CUDA graph replayed (its output
against eager); a graph runs one pass, so over the cap its capture must fail as stock's does. Per N, one pass: the first N/2 rows alone against the whole batch (DeepGEMM
picks its kernel configuration from each call's rows, so stock's rows already depend on
their batch); with --stock-src, the pre-image files' one pass in a second process (output
hash, µs). The JIT kernels are compiled first, one subprocess per (cap, rows) in parallel
(DeepGEMM caches them by file), keeping the configurations DeepGEMM prints.

sglang 0.5.23 itself needs torch 2.14; these are the only sglang modules loaded for real.
Every other ``sglang.*`` module is a stand-in (STANDINS below says which and why); a
name no stand-in defines imports as a placeholder that raises when called, and the
result records every placeholder imported and called (none may be called).

  python benchmarks/mega_moe_sm90_bench.py --src build/trees/sglang/python --out DIR
  python benchmarks/mega_moe_sm90_bench.py --cpu-check   # the same code on a CPU reference kernel
  python benchmarks/mega_moe_sm90_bench.py --markdown DIR/mega_moe_sm90_bench.json
scripts/mega_moe_gpu.sh makes the one device call.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as _dt
import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CAP_ENV = "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK"
# The post-image files run for real, by module name (paths relative to --src, sglang's python/).
REAL = {
    "sglang.srt.environ": "sglang/srt/environ.py",
    "sglang.srt.layers.moe.mega_moe": "sglang/srt/layers/moe/mega_moe.py",
    "sglang.srt.layers.moe.mega_moe_sm90": "sglang/srt/layers/moe/mega_moe_sm90.py",
}
# The stand-ins with behaviour, and why each real module cannot load (all pull in
# sglang's model, server-args or distributed stack, which needs torch 2.14).
STANDINS = {
    "sglang.srt.utils": "is_hip (torch.version.hip), is_sm100_supported (capability 10.x), print_warning_once "
    "(logged once per message, as sglang's lru_cache'd one); the package imports sglang's whole utility stack",
    "sglang.srt.models.deepseek_common.utils": "_device_sm = major * 10 + minor, what sglang's get_device_sm "
    "returns; the module imports the DeepSeek model code",
    "sglang.srt.runtime_context": "get_parallel(): EP = 1 without attention DP (attn_dp_enabled False, "
    "moe_ep_group.device_group the NCCL world of one, cpu_group a gloo world of one); the real one needs "
    "msgspec and the server-args tree",
    "sglang.srt.model_executor.runner": "get_is_capture_mode(): True while this harness captures a CUDA "
    "graph, as sglang's model_capture_mode sets it; the package imports every graph runner",
    "sglang.srt.layers.dp_attention": "get_dp_global_num_tokens() -> None (no attention DP); the module "
    "imports sglang's distributed state",
}
DEEP_GEMM_ADAPTER = (
    "get_symm_buffer_for_mega_moe: sglang 0.5.23 passes num_shared_experts= (sgl-deep-gemm 0.2.3.post2's "
    "signature); 0.1.5.post1 has no such argument. 0.2.3.post2's SM90 branch does not pass it on, so the "
    "adapter drops it and refuses a non-zero value. Every other name is DeepGEMM's own; the adapter also "
    "counts mega_moe_pre_dispatch_sm90 and fp8_mega_moe calls."
)


# --------------------------------------------------------------------------- stand-ins


class StandInState:
    capture_mode = False
    parallel = None
    warnings: list[str] = []
    placeholders_imported: set[str] = set()
    placeholders_called: list[str] = []
    launches = {"mega_moe_pre_dispatch_sm90": 0, "fp8_mega_moe": 0}
    device_sm = 0


def _placeholder(qualname: str):
    StandInState.placeholders_imported.add(qualname)

    def call(*args, **kwargs):
        StandInState.placeholders_called.append(qualname)
        raise RuntimeError(f"stand-in {qualname} called: not on the SM90 EP = 1 path; give it a stand-in")

    call.__qualname__ = call.__name__ = qualname
    return call


class _StandInModule(types.ModuleType):
    """A stand-in package: its own attributes, a raising placeholder for any other name."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


@functools.lru_cache(None)
def _print_warning_once(msg: str) -> None:
    StandInState.warnings.append(msg)
    logging.getLogger("sglang.srt.utils").warning(msg)


def _standin_attrs(name: str) -> dict:
    if name == "sglang.srt.utils":
        return {
            "is_hip": lambda: torch.version.hip is not None,
            "is_sm100_supported": lambda device=None: StandInState.device_sm // 10 == 10,
            "print_warning_once": _print_warning_once,
        }
    if name == "sglang.srt.models.deepseek_common.utils":
        return {"_device_sm": StandInState.device_sm}
    if name == "sglang.srt.runtime_context":
        return {"get_parallel": lambda: StandInState.parallel}
    if name == "sglang.srt.model_executor.runner":
        return {"get_is_capture_mode": lambda: StandInState.capture_mode}
    if name == "sglang.srt.layers.dp_attention":
        return {"get_dp_global_num_tokens": lambda: None}
    return {}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, src: Path):
        self.src = src

    def find_spec(self, name, path=None, target=None):
        if name != "sglang" and not name.startswith("sglang."):
            return None
        if name in REAL:
            return importlib.util.spec_from_file_location(name, self.src / REAL[name])
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__dict__.update(_standin_attrs(spec.name))
        return module

    def exec_module(self, module):
        pass


class _Parallel(types.SimpleNamespace):
    """sglang's ParallelContext at EP = 1 without attention DP; any other field raises."""

    def __getattr__(self, name):
        raise AttributeError(f"stand-in ParallelContext has no {name!r}: give the stand-in that field")


class DeepGemmAdapter(types.ModuleType):
    """sgl-deep-gemm 0.1.5.post1 under the names sglang 0.5.23 calls (DEEP_GEMM_ADAPTER)."""

    def __init__(self, real):
        super().__init__("deep_gemm")
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def get_symm_buffer_for_mega_moe(self, *args, num_shared_experts=0, **kwargs):
        if num_shared_experts:
            raise ValueError(f"sgl-deep-gemm 0.1.5.post1 has no in-kernel shared experts ({num_shared_experts})")
        return self._real.get_symm_buffer_for_mega_moe(*args, **kwargs)

    def mega_moe_pre_dispatch_sm90(self, *args, **kwargs):
        StandInState.launches["mega_moe_pre_dispatch_sm90"] += 1
        return self._real.mega_moe_pre_dispatch_sm90(*args, **kwargs)

    def fp8_mega_moe(self, *args, **kwargs):
        StandInState.launches["fp8_mega_moe"] += 1
        return self._real.fp8_mega_moe(*args, **kwargs)


def load_sglang(src: Path, deep_gemm, device_sm: int):
    """Import the real post-image mega_moe (and mega_moe_sm90) over the stand-ins."""
    for name, rel in REAL.items():
        if not (src / rel).is_file():
            raise SystemExit(f"mega_moe_sm90_bench: {src / rel} is missing ({name}); run `make trees` or pass --src")
    StandInState.device_sm = device_sm
    sys.modules["deep_gemm"] = DeepGemmAdapter(deep_gemm)
    sys.meta_path.insert(0, _Finder(src))
    return importlib.import_module("sglang.srt.layers.moe.mega_moe")


# --------------------------------------------------------------------------- CPU reference kernel


class CpuDeepGemm(types.SimpleNamespace):
    """--cpu-check only: DeepGEMM's SM90 API (0.1.5.post1 signatures) over the float reference,
    reading the interleaved L1 weights the way the kernel does."""

    @staticmethod
    def get_num_sms():
        return 132

    @staticmethod
    def get_symm_buffer_for_mega_moe(group, num_experts, cap, num_topk, hidden, intermediate_hidden, **kwargs):
        cap = -(-cap // 384) * 384
        return types.SimpleNamespace(
            group=group,
            num_experts=num_experts,
            num_max_tokens_per_rank=cap,
            num_topk=num_topk,
            x=torch.empty(cap, hidden),
            x_sf=torch.empty(cap, hidden // 128),
            topk_idx=torch.empty(cap, num_topk, dtype=torch.int64),
            topk_weights=torch.empty(cap, num_topk),
        )

    @staticmethod
    def mega_moe_pre_dispatch_sm90(
        x, ids, weights, buf_x, buf_x_sf, buf_ids, buf_w, num_tokens, group_size, routed_scaling_factor
    ):
        assert x.shape[0] == num_tokens <= buf_x.shape[0]
        buf_x[:num_tokens] = x.float()
        buf_ids[:num_tokens] = ids
        buf_w[:num_tokens] = weights * routed_scaling_factor

    @staticmethod
    def fp8_mega_moe(y, l1, l2, buf, recipe, activation, activation_clamp, fast_math):
        n = y.shape[0]
        (w13, s13), (w2, s2) = l1, l2
        e, n1, h = w13.shape
        w13 = w13.view(e, n1 // 16, 2, 8, h).transpose(1, 2).reshape(e, n1, h)  # undo the gran-8 interleave
        weights = Weights(w13, s13, w2, s2)
        y.copy_(reference(buf.x[:n], buf.topk_idx[:n], buf.topk_weights[:n], weights, 1.0, activation_clamp))


# --------------------------------------------------------------------------- weights and reference


class Weights(types.SimpleNamespace):
    def __init__(self, w13, s13, w2, s2):
        super().__init__(w13=w13, s13=s13, w2=w2, s2=s2)

    @staticmethod
    def dequant(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        n, k = w.shape
        return w.float() * s.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]


def quantize_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 E4M3 weights with one float scale per 128 x 128 block (DeepSeek-style weight_scale_inv)."""
    e, n, k = w.shape
    blocks = w.view(e, n // 128, 128, k // 128, 128)
    scale = blocks.abs().amax(dim=(2, 4)).clamp(min=1e-8) / 448.0
    q = (blocks / scale[:, :, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.view(e, n, k), scale


def make_weights(num_experts, hidden, intermediate, device, seed) -> Weights:
    gen = torch.Generator(device=device).manual_seed(seed)
    parts = {"w13": [], "s13": [], "w2": [], "s2": []}
    for start in range(0, num_experts, 16):
        count = min(16, num_experts - start)
        for name, n, k in (("13", 2 * intermediate, hidden), ("2", hidden, intermediate)):
            w = torch.randn(count, n, k, generator=gen, device=device) / math.sqrt(k)
            # Blocks of different magnitudes, so a scale read from the wrong block shows.
            w *= (
                torch.empty(count, n // 128, 1, k // 128, 1, device=device)
                .uniform_(0.25, 4.0, generator=gen)
                .expand(count, n // 128, 128, k // 128, 128)
                .reshape(count, n, k)
            )
            q, s = quantize_blocks(w)
            parts["w" + name].append(q)
            parts["s" + name].append(s)
    return Weights(*(torch.cat(parts[key]) for key in ("w13", "s13", "w2", "s2")))


def reference(x, topk_ids, topk_weights, weights: Weights, scaling: float, clamp) -> torch.Tensor:
    """Float MoE over the dequantized FP8 experts: sum_k w_k * W2 (silu(g) * u), [g | u] = W13 x."""
    x = x.float()
    y = torch.zeros_like(x)
    inter = weights.w13.shape[1] // 2
    for e in topk_ids.unique().tolist():
        rows, slot = (topk_ids == e).nonzero(as_tuple=True)
        h = x[rows] @ Weights.dequant(weights.w13[e], weights.s13[e]).T
        g, u = h[:, :inter], h[:, inter:]
        if clamp is not None:
            g, u = g.clamp(max=clamp), u.clamp(-clamp, clamp)
        out = (torch.nn.functional.silu(g) * u) @ Weights.dequant(weights.w2[e], weights.s2[e]).T
        y.index_add_(0, rows, out * topk_weights[rows, slot, None].float())
    return y * scaling


def make_experts(weights: Weights):
    """The fields sglang's FusedMoE holds that the SM90 MegaMoE path reads."""
    param = functools.partial(torch.nn.Parameter, requires_grad=False)
    return types.SimpleNamespace(
        num_experts=weights.w13.shape[0],
        _mega_moe_nvfp4=False,
        _mega_moe_w4a4=False,
        w13_weight=param(weights.w13.clone()),
        w13_weight_scale_inv=param(weights.s13.clone()),
        w2_weight=param(weights.w2.clone()),
        w2_weight_scale_inv=param(weights.s2.clone()),
    )


def make_inputs(rows, hidden, num_experts, top_k, device, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, hidden, generator=gen, device=device).to(torch.bfloat16)
    topk_ids = torch.rand(rows, num_experts, generator=gen, device=device).topk(top_k, dim=1).indices.to(torch.int32)
    topk_weights = torch.randn(rows, top_k, generator=gen, device=device).softmax(dim=1)
    return x, topk_ids, topk_weights


def errors(y: torch.Tensor, ref: torch.Tensor) -> dict:
    y, ref = y.float(), ref.float()
    diff = (y - ref).abs()
    max_ref = ref.abs().max().item()
    big = ref.abs() >= 0.01 * max_ref
    return {
        "max_abs": diff.max().item(),
        "max_ref": max_ref,
        "max_abs_over_max_ref": diff.max().item() / max(max_ref, 1e-30),
        "max_rel_where_ref_ge_1pct_of_max": (diff[big] / ref.abs()[big]).max().item() if big.any() else 0.0,
        "rel_l2": (diff.norm() / ref.norm().clamp(min=1e-30)).item(),
        "bitwise_equal": bool(torch.equal(y, ref)),
        "elements_differing": int((y != ref).sum().item()),
    }


# --------------------------------------------------------------------------- the runs


class Bench:
    def __init__(self, args, mega_moe, device):
        self.args, self.mm, self.device = args, mega_moe, device
        self.weights = make_weights(args.experts, args.hidden, args.intermediate, device, args.seed)
        self.experts = make_experts(self.weights)
        self.experts_raw = self.weights  # the build below interleaves the experts' copy
        sm90 = sys.modules["sglang.srt.layers.moe.mega_moe_sm90"]
        sm90.build_sm90_mega_moe_experts_weights(self.experts)
        self.ready = mega_moe.is_mega_moe_experts_ready(self.experts)

    def call(self, x, topk_ids, topk_weights, cap):
        os.environ[CAP_ENV] = str(cap)
        return self.mm.run_mega_routed_experts(
            self.experts,
            x,
            topk_ids,
            topk_weights,
            hidden_size=self.args.hidden,
            intermediate_size=self.args.intermediate,
            top_k=self.args.top_k,
            num_tokens=x.shape[0],
            activation_clamp=self.args.activation_clamp,
            routed_scaling_factor=self.args.routed_scaling_factor,
        )

    def launches(self, fn) -> tuple[object, dict]:
        before = dict(StandInState.launches)
        out = fn()
        return out, {k: StandInState.launches[k] - before[k] for k in before}

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def time_us(self, fn) -> dict:
        for _ in range(self.args.warmup):
            fn()
        self.sync()
        times = []
        for _ in range(self.args.repeats):
            if self.device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
        return {
            "median_us": statistics.median(times),
            "min_us": min(times),
            "max_us": max(times),
            "repeats": len(times),
        }

    def graph(self, x, topk_ids, topk_weights, cap, eager_out) -> dict:
        result: dict = {}
        try:
            os.environ[CAP_ENV] = str(cap)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.call(x, topk_ids, topk_weights, cap)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            StandInState.capture_mode = True
            try:
                before = dict(StandInState.launches)
                with torch.cuda.graph(graph):
                    out = self.call(x, topk_ids, topk_weights, cap)
                result["captured_launches"] = {k: StandInState.launches[k] - before[k] for k in before}
            finally:
                StandInState.capture_mode = False
            out.zero_()
            graph.replay()
            torch.cuda.synchronize()
            result["replay_vs_eager"] = errors(out, eager_out)
            result["timing"] = self.time_us(graph.replay)
            del graph
        except Exception as exc:  # recorded: the eager numbers stand without it
            result["error"] = f"{type(exc).__name__}: {exc}"
        return result

    def run_config(self, rows, passes, inputs, one_pass, ref) -> dict:
        cap = rows // passes
        x, topk_ids, topk_weights = inputs
        entry: dict = {"rows": rows, "cap": cap, "passes_expected": math.ceil(rows / cap)}
        t0 = time.perf_counter()
        out, launches = self.launches(lambda: self.call(x, topk_ids, topk_weights, cap))
        self.sync()
        entry["first_call_s"] = time.perf_counter() - t0
        entry["launches_per_call"] = launches
        entry["shape"] = list(out.shape)
        out = out.clone()
        entry["out_sha1"] = hashlib.sha1(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()
        if one_pass is not None:
            entry["vs_one_pass"] = errors(out, one_pass)
        if ref is not None:
            entry["vs_float_reference"] = errors(out, ref)
        if passes == 1 and rows > 1 and not self.args.jit_only:
            # Stock's own row-to-batch dependence: the first half of the rows alone, one pass, same cap.
            half = rows // 2
            y_half = self.call(x[:half], topk_ids[:half], topk_weights[:half], cap)
            entry["half_batch_vs_whole"] = {"rows": half, **errors(y_half, out[:half])}
        entry["eager"] = self.time_us(lambda: self.call(x, topk_ids, topk_weights, cap))
        entry["eager"]["us_per_row"] = entry["eager"]["median_us"] / rows
        if self.device == "cuda" and not self.args.no_graph:
            entry["graph"] = self.graph(x, topk_ids, topk_weights, cap, out)
            if "timing" in entry["graph"]:
                entry["graph"]["timing"]["us_per_row"] = entry["graph"]["timing"]["median_us"] / rows
        return entry, out


def check(entry, one_pass_ref: dict | None, args) -> list[str]:
    """Passes: as many kernel calls; within the FP8 error of one pass (DeepGEMM picks its kernel
    configuration from the rows of each call, so rows in other passes may round differently); as
    accurate against the float reference as one pass; replay equal to eager, bit for bit."""
    problems = []
    where = f"N={entry['rows']} cap={entry['cap']}"
    if entry["launches_per_call"]["fp8_mega_moe"] != entry["passes_expected"]:
        problems.append(f"{where}: {entry['launches_per_call']} launches")
    if "vs_one_pass" in entry and entry["vs_one_pass"]["max_abs_over_max_ref"] > args.tol_passes:
        problems.append(f"{where}: passes differ from one pass {entry['vs_one_pass']}")
    ref = entry.get("vs_float_reference")
    if ref is not None and ref["rel_l2"] > args.tol_ref:
        problems.append(f"{where}: against the float reference {ref}")
    if (
        ref is not None
        and one_pass_ref is not None
        and ref["rel_l2"] > (1 + args.tol_ref_ratio) * one_pass_ref["rel_l2"]
    ):
        problems.append(f"{where}: less accurate than one pass ({ref['rel_l2']} vs {one_pass_ref['rel_l2']})")
    graph = entry.get("graph", {})
    if "replay_vs_eager" in graph and not graph["replay_vs_eager"]["bitwise_equal"]:
        problems.append(f"N={entry['rows']} cap={entry['cap']}: graph replay differs from eager")
    # A captured graph runs one pass: over the cap its capture fails, as stock's does.
    over_cap = entry["cap"] < entry["rows"]
    if "error" in graph and not (over_cap and "exceeds cap" in graph["error"]):
        problems.append(f"N={entry['rows']} cap={entry['cap']}: graph {graph['error']}")
    if over_cap and graph and "error" not in graph:
        problems.append(f"N={entry['rows']} cap={entry['cap']}: a graph over the cap was captured")
    return problems


def init_world(device: str):
    import torch.distributed as dist

    store = tempfile.NamedTemporaryFile(prefix="mega_moe_world_", delete=False).name
    os.unlink(store)
    if device == "cuda":
        torch.cuda.set_device(0)
        dist.init_process_group(
            "nccl", init_method=f"file://{store}", rank=0, world_size=1, device_id=torch.device("cuda", 0)
        )
    else:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    cpu_group = dist.new_group(backend="gloo")
    StandInState.parallel = _Parallel(
        attn_dp_enabled=False,
        attn_tp_size=1,
        moe_ep_group=types.SimpleNamespace(device_group=dist.group.WORLD, cpu_group=cpu_group),
    )


def versions(deep_gemm) -> dict:
    info = {
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "host": platform.node(),
    }
    if torch.cuda.is_available():
        prop = torch.cuda.get_device_properties(0)
        info.update(gpu=prop.name, sms=prop.multi_processor_count, capability=list(torch.cuda.get_device_capability()))
    info["deep_gemm"] = getattr(deep_gemm, "__version__", type(deep_gemm).__name__)
    for cmd in (
        ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm", "--format=csv,noheader"],
        ["nvcc", "--version"],
    ):
        try:
            info[cmd[0]] = (
                subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[-1]
            )
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    return info


def sources(src: Path) -> dict:
    def blob(data: bytes) -> str:  # git's blob id, as `git ls-tree` names the file
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    return {rel: blob((src / rel).read_bytes()) for rel in REAL.values()}


def grid(args) -> list[tuple[int, int]]:
    return [(rows, passes) for rows in args.rows for passes in args.passes if rows % passes == 0]


def warm_jit(args) -> dict:
    """Compile each cap's kernels in its own process, in parallel (DeepGEMM's JIT cache is shared)."""
    pairs = {(rows // passes, rows // passes) for rows, passes in grid(args)}
    pairs |= {(rows, rows // 2) for rows in args.rows if 1 in args.passes and rows > 1}  # the half batch
    base = [sys.executable, __file__, "--src", str(args.src), "--jit-only", "--no-graph"]
    base += ["--hidden", str(args.hidden), "--intermediate", str(args.intermediate)]
    base += ["--experts", str(args.experts), "--top-k", str(args.top_k), "--warmup", "0", "--repeats", "1"]
    base += ["--routed-scaling-factor", str(args.routed_scaling_factor)]
    if args.activation_clamp is not None:
        base += ["--activation-clamp", str(args.activation_clamp)]

    env = {**os.environ, "DG_PRINT_CONFIGS": "1"}  # DeepGEMM prints the kernel configuration it picks

    def one(pair):
        cap, rows = pair
        t0 = time.perf_counter()
        cmd = [*base, "--rows", str(rows), "--passes", "1", "--jit-cap", str(cap)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.deadline_s, env=env)
        except subprocess.TimeoutExpired as exc:
            return f"{cap}:{rows}", {"rc": "timeout", "s": time.perf_counter() - t0, "tail": str(exc.stdout)[-3000:]}
        text = proc.stdout + proc.stderr
        configs = sorted({line.strip() for line in text.splitlines() if "Config(" in line})
        warm = {"rc": proc.returncode, "s": time.perf_counter() - t0, "kernel_configs": configs}
        return f"{cap}:{rows}", {**warm, "tail": text[-3000:] if proc.returncode else ""}

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jit_workers) as pool:
        return dict(pool.map(one, sorted(pairs)))


def run_stock(args, configs, problems) -> dict:
    """The pre-image's one pass per N (stock), same weights and inputs (same seeds), beside the patched one."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, __file__, "--src", str(args.stock_src), "--out", out, "--passes", "1", "--no-jit-warm"]
        for key in ("rows", "hidden", "intermediate", "experts", "top_k", "warmup", "repeats", "seed"):
            value = getattr(args, key)
            cmd += [f"--{key.replace('_', '-')}", ",".join(map(str, value)) if isinstance(value, list) else str(value)]
        cmd += ["--routed-scaling-factor", str(args.routed_scaling_factor)]
        if args.activation_clamp is not None:
            cmd += ["--activation-clamp", str(args.activation_clamp)]
        cmd += ["--no-graph"] if args.no_graph else []
        cmd += ["--cpu-check"] if args.cpu_check else []
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(args.deadline_s, 60))
        path = Path(out) / "mega_moe_sm90_bench.json"
        if not path.is_file():
            problems.append(f"stock: rc {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}")
            return {"rc": proc.returncode}
        stock = json.loads(path.read_text())
    patched = {c["rows"]: c for c in configs if c.get("cap") == c.get("rows") and "error" not in c}
    for c in stock["configs"]:
        mine = patched.get(c["rows"])
        if mine is None or "error" in c:
            continue
        c["same_output_as_patched"] = c["out_sha1"] == mine["out_sha1"]
        if not c["same_output_as_patched"]:
            problems.append(f"N={c['rows']}: the patched one pass differs from stock's")
    return {"sources_git_blob": stock["sources_git_blob"], "configs": stock["configs"], "problems": stock["problems"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", type=Path, default=ROOT / "build/trees/sglang/python", help="sglang's python/ folder")
    p.add_argument("--out", type=Path, help="folder for mega_moe_sm90_bench.json and .md")
    p.add_argument("--rows", type=lambda s: [int(v) for v in s.split(",")], default=[256, 1024, 4096])
    p.add_argument("--passes", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 4])
    # Default: one MoE layer of Qwen3-30B-A3B-FP8 (128 experts, top-8, block-128 FP8), a model
    # one SM90 GPU serves at EP = 1.
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--routed-scaling-factor", type=float, default=1.0)
    p.add_argument("--activation-clamp", type=float, default=None)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    # One pass's own error against the float reference is about 0.045 of max |y| (FP8 activations).
    p.add_argument("--tol-passes", type=float, default=0.05, help="max |passes - one pass| / max |one pass|")
    p.add_argument("--tol-ref", type=float, default=0.1, help="rel. L2 error against the float reference")
    p.add_argument("--tol-ref-ratio", type=float, default=0.1, help="passes' rel. L2 error over one pass's, minus 1")
    p.add_argument("--deadline-s", type=float, default=420, help="skip the configs left after this many seconds")
    p.add_argument("--jit-workers", type=int, default=8)
    p.add_argument(
        "--stock-src", type=Path, help="the same files at the pre-image: one pass per N, in a second process"
    )
    p.add_argument("--no-graph", action="store_true")
    p.add_argument("--no-jit-warm", action="store_true")
    p.add_argument("--jit-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--jit-cap", type=int, help=argparse.SUPPRESS)
    p.add_argument("--cpu-check", action="store_true", help="run on CPU over a float reference kernel")
    p.add_argument("--markdown", type=Path, help="rewrite the Markdown of a result JSON")
    p.add_argument("--print-real", action="store_true", help="print the files loaded for real (for the carry)")
    args = p.parse_args(argv)
    if args.print_real:
        print("\n".join(REAL.values()))
        return 0
    if args.markdown:
        data = json.loads(args.markdown.read_text())
        args.markdown.with_suffix(".md").write_text(markdown(data))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    t_start = time.perf_counter()
    device = "cpu" if args.cpu_check else "cuda"
    if args.cpu_check:
        deep_gemm, device_sm = CpuDeepGemm(), 90
    else:
        import deep_gemm

        major, minor = torch.cuda.get_device_capability()
        device_sm = major * 10 + minor
    result: dict = {"versions": versions(deep_gemm), "args": {k: str(v) for k, v in vars(args).items()}}
    result["sources_git_blob"] = sources(args.src)
    result["standins"] = STANDINS
    result["deep_gemm_adapter"] = DEEP_GEMM_ADAPTER
    if device == "cuda" and not args.jit_only and not args.no_jit_warm:
        t0 = time.perf_counter()
        result["jit_warm"] = warm_jit(args)
        result["jit_warm_s"] = time.perf_counter() - t0
        for pair, warm in result["jit_warm"].items():
            print(
                f"jit warm cap:rows={pair}: rc {warm['rc']} in {warm['s']:.1f} s {warm.get('kernel_configs')}",
                flush=True,
            )
            if warm["rc"]:
                print(warm["tail"], flush=True)
    mm = load_sglang(args.src, deep_gemm, device_sm)
    init_world(device)
    bench = Bench(args, mm, device)
    result["experts_ready"] = bench.ready
    configs, problems = [], []
    for rows in args.rows:
        inputs = make_inputs(rows, args.hidden, args.experts, args.top_k, device, args.seed + rows)
        if args.jit_only:
            os.environ[CAP_ENV] = str(args.jit_cap or rows)
            bench.call(*inputs, args.jit_cap or rows)
            bench.sync()
            continue
        ref = reference(*inputs, bench.experts_raw, args.routed_scaling_factor, args.activation_clamp)
        one_pass = one_pass_ref = None
        for passes in sorted(p for p in args.passes if rows % p == 0):
            if time.perf_counter() - t_start > args.deadline_s:
                problems.append(f"N={rows} passes={passes}: skipped, past --deadline-s")
                continue
            try:
                entry, out = bench.run_config(rows, passes, inputs, one_pass, ref)
            except Exception as exc:
                entry = {"rows": rows, "cap": rows // passes, "error": f"{type(exc).__name__}: {exc}"}
                problems.append(f"N={rows} cap={rows // passes}: {entry['error']}")
                configs.append(entry)
                print(json.dumps(entry), flush=True)
                continue
            problems += check(entry, one_pass_ref, args)
            if one_pass is None:
                one_pass, one_pass_ref = out, entry["vs_float_reference"]
            configs.append(entry)
            print(json.dumps(entry), flush=True)
    if args.stock_src and not args.jit_only:
        if time.perf_counter() - t_start > args.deadline_s:
            problems.append("stock: skipped, past --deadline-s")
        else:
            result["stock"] = run_stock(args, configs, problems)
    result.update(
        configs=configs,
        problems=problems,
        warnings=StandInState.warnings,
        placeholders_imported=sorted(StandInState.placeholders_imported),
        placeholders_called=StandInState.placeholders_called,
        total_s=time.perf_counter() - t_start,
    )
    if StandInState.placeholders_called:
        problems.append(f"stand-in placeholders called: {StandInState.placeholders_called}")
    if not bench.ready:
        problems.append("is_mega_moe_experts_ready() is False over this DeepGEMM build")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "mega_moe_sm90_bench.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "mega_moe_sm90_bench.md").write_text(markdown(result))
    if args.jit_only:
        return 0
    print(markdown(result))
    for line in problems:
        print("PROBLEM:", line, flush=True)
    torch.distributed.destroy_process_group()
    return 1 if problems else 0


def _fmt(value, spec=".3g"):
    return "-" if value is None else format(value, spec)


def markdown(result: dict) -> str:
    v, a = result["versions"], result["args"]
    lines = [
        "# sglang's SM90 MegaMoE path in passes, DeepGEMM's kernel, EP = 1",
        "",
        f"{v.get('gpu', 'CPU')} ({v.get('nvidia-smi', '')}), torch {v['torch']} (CUDA {v['torch_cuda']}), "
        f"Python {v['python']}, DeepGEMM {v['deep_gemm']}, {v.get('nvcc', '')}; {v['date_utc']}.",
        f"Layer: hidden {a['hidden']}, intermediate {a['intermediate']}, {a['experts']} experts, top-{a['top_k']}, "
        f"routed scaling {a['routed_scaling_factor']}; FP8 E4M3 weights with 128 x 128 block scales; "
        f"CUDA events, {a['warmup']} warm-up calls, median of {a['repeats']}.",
        "",
        "| N | cap | passes (launches) | eager µs | eager µs/row | graph µs | graph µs/row | vs one pass: max abs / max ref | "
        "bitwise | graph = eager | vs float ref: rel L2, max abs / max ref | first N/2 rows alone vs whole: "
        "max abs / max ref, bitwise |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for c in result["configs"]:
        if "error" in c:
            lines.append(f"| {c['rows']} | {c['cap']} | error: {c['error'][:200]} | | | | | | | | | |")
            continue
        g = c.get("graph", {})
        gt = g.get("timing", {})
        vs1, ref = c.get("vs_one_pass"), c.get("vs_float_reference")
        ref_cell = "" if ref is None else f"{ref['rel_l2']:.3g}, {ref['max_abs_over_max_ref']:.3g}"
        half = c.get("half_batch_vs_whole")
        half_cell = "" if half is None else f"{half['max_abs_over_max_ref']:.3g}, {half['bitwise_equal']}"
        lines.append(
            f"| {c['rows']} | {c['cap']} | {c['passes_expected']} ({c['launches_per_call']['fp8_mega_moe']}) | "
            f"{_fmt(c['eager']['median_us'], '.1f')} | {_fmt(c['eager']['us_per_row'], '.4f')} | "
            f"{_fmt(gt.get('median_us'), '.1f')} | {_fmt(gt.get('us_per_row'), '.4f')} | "
            f"{_fmt(vs1 and vs1['max_abs_over_max_ref'])} | {'-' if vs1 is None else vs1['bitwise_equal']} | "
            f"{g['replay_vs_eager']['bitwise_equal'] if 'replay_vs_eager' in g else g.get('error', '-')} | "
            f"{ref_cell} | {half_cell} |"
        )
    stock = result.get("stock", {}).get("configs", [])
    if stock:
        lines += [
            "",
            "Stock (the pre-image files, one pass, a second process; same weights and inputs):",
            "",
            "| N | eager µs | eager µs/row | graph µs | graph µs/row | output = patched one pass |",
            "| ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for c in stock:
            if "error" in c:
                lines.append(f"| {c['rows']} | error: {c['error'][:200]} | | | | |")
                continue
            gt = c.get("graph", {}).get("timing", {})
            lines.append(
                f"| {c['rows']} | {_fmt(c['eager']['median_us'], '.1f')} | {_fmt(c['eager']['us_per_row'], '.4f')} | "
                f"{_fmt(gt.get('median_us'), '.1f')} | {_fmt(gt.get('us_per_row'), '.4f')} | "
                f"{c.get('same_output_as_patched', '-')} |"
            )
    lines += ["", f"Problems: {result['problems'] or 'none'}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
