"""Probe (CPU): the real DeepGEMM runner's copy_list_to_gpu_no_ce
(``srt/layers/moe/moe_runner/deep_gemm.py`` of the sglang root first on PYTHONPATH) over
stand-ins for sgl-kernel's copy_to_gpu_no_ce that enforce a kernel's length rule.

Usage: python copy_list_probe.py '<json: rule name -> list of lengths, or "every">'
A rule's op raises RuntimeError("unexpected N") for a length it has no kernel for, as
every released copy.cu does, and otherwise applies the released kernel's checks and
copies; "every" has a kernel for every N >= 1 (the reference: stock's caller over it
gives stock's answer wherever stock was only missing a kernel). Per rule it prints the
outcome for every N in 1..513 (random full-range int32 values, fixed seed), the
lengths each call launched, and the outcome of tests/kernel/list_inputs.py's special
inputs. Stand-ins, for native code that cannot run on a CPU: the op itself, and
``torch.empty_like(..., device="cuda")`` allocating on the CPU (no CUDA device).
"""

import json
import random
import re
import sys
import types
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "kernel"))
import list_inputs  # noqa: E402

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# The runner's own unit test, which sglang 0003 and sglang-kt 0002 add alike: each test's outcome on
# the patched package, and on stock, which refuses every N its kernel lacks and hands the kernel the
# tensor torch converts from the list (the other inputs reach the kernel on both). The on-device test
# skips on a CPU.
IN_PATCH_TEST = "test/registered/unit/layers/moe/test_deep_gemm_copy_list.py"
_ON_STOCK = {
    "test_a_list_of_ints_is_not_converted_by_torch": "failed",
    "test_every_count_in_released_lengths": "failed",
    "test_other_inputs_reach_the_kernel_as_they_are": "passed",
    "test_values_as_torch_converts_them": "failed",
}
_ON_DEVICE = {"TestCopyListToGpuNoCeOnDevice::test_every_local_expert_count": "skipped"}
IN_PATCH_OUTCOMES = {
    "patched": {**{f"TestCopyListToGpuNoCe::{name}": "passed" for name in _ON_STOCK}, **_ON_DEVICE},
    "stock": {**{f"TestCopyListToGpuNoCe::{name}": outcome for name, outcome in _ON_STOCK.items()}, **_ON_DEVICE},
}
MAX_N = 513


def released_op(lengths, launches: list):
    """copy_to_gpu_no_ce as released: its dispatch on N first, then its checks."""

    def copy_to_gpu_no_ce(input, output):
        n = input.numel()
        if (lengths != "every" and n not in lengths) or n == 0:
            raise RuntimeError("unexpected N")
        checks = (
            (input.dim() == 1, "input must be 1-D"),
            (output.numel() == n, "output size"),
            (input.is_contiguous() and output.is_contiguous(), "input must be contiguous"),
            (input.dtype == torch.int32 and output.dtype == torch.int32, "input dtype must be int32"),
        )
        for ok, message in checks:
            if not ok:
                raise RuntimeError(message)
        launches.append(n)
        output.copy_(input)

    return copy_to_gpu_no_ce


def launches_ok(n: int, lengths, launches: list) -> bool:
    """n counts went out in the fewest launches the kernel's longest length allows, and
    without padding where that many launches of one length hold exactly n."""
    fewest = -(-n // max(lengths))
    exact = any(m * fewest == n for m in lengths)
    return len(launches) == fewest and sum(launches) >= n and (sum(launches) == n or not exact)


def outcome(fn, make) -> list:
    got = list(list_inputs.outcome(fn, make))
    if got[0] == "error":  # object addresses differ between processes
        got[2] = re.sub(r" at 0x[0-9a-f]+", " at 0x", got[2])
    return got


def expected(stock_rule: dict, stock_every: dict) -> list:
    """The reference for one input: stock's outcome over the same kernel; where stock was only missing
    a kernel for the length (`unexpected N` there, accepted with every length), the values."""
    if stock_rule["outcome"][:3] == ["error", "RuntimeError", "unexpected N"] and stock_every["outcome"][0] == "ok-cpu":
        return stock_every["outcome"]
    return stock_rule["outcome"]


def run_rule(caller, lengths) -> dict:
    launches: list = []
    elementwise = types.ModuleType("sgl_kernel.elementwise")
    elementwise.copy_to_gpu_no_ce = released_op(lengths, launches)
    package = types.ModuleType("sgl_kernel")
    package.elementwise = elementwise
    empty_like = torch.empty_like
    rng = random.Random(0)
    counts, special = {}, {}
    with (
        mock.patch.dict(sys.modules, {"sgl_kernel": package, "sgl_kernel.elementwise": elementwise}),
        mock.patch.object(torch, "empty_like", lambda t, device=None: empty_like(t)),
    ):
        # a caller that learns the kernel's lengths on its first call does so here
        list_inputs.outcome(caller, lambda: [0])
        launches.clear()
        for n in range(1, MAX_N + 1):
            values = [rng.randint(INT32_MIN, INT32_MAX) for _ in range(n)]
            launches.clear()
            got = list_inputs.outcome(caller, lambda v=values: list(v))
            if got[0] == "error":
                counts[n] = {"result": "refused", "error": got[2], "launches": launches[:]}
            else:
                right = got == ("ok-cpu", "torch.int32", (n,), values)
                counts[n] = {"result": "ok" if right else "wrong", "launches": launches[:]}
        for case, make in list_inputs.cases(torch).items():
            launches.clear()
            special[case] = {"outcome": outcome(caller, make), "launches": launches[:]}
    return {"counts": counts, "special": special}


def main() -> None:
    rules = json.loads(sys.argv[1])
    from sglang.srt.layers.moe.moe_runner import deep_gemm

    out = {"module": deep_gemm.__file__}
    for name, lengths in rules.items():
        out[name] = run_rule(deep_gemm.copy_list_to_gpu_no_ce, lengths)
    print(json.dumps(out, default=list))


if __name__ == "__main__":
    main()
