"""Probe (CPU): the real DeepGEMM runner's copy_list_to_gpu_no_ce
(``srt/layers/moe/moe_runner/deep_gemm.py`` of the sglang root first on PYTHONPATH) over
stand-ins for sgl-kernel's copy_to_gpu_no_ce with a kernel's lengths.

Usage: python copy_list_probe.py '<json: rule name -> list of lengths, or "every">'
A rule's op raises RuntimeError("unexpected N") for a length it has no kernel for, as every
released copy.cu does, and otherwise applies the released kernel's checks and copies; "every"
has a kernel for every N >= 1 (stock's caller over it gives stock's answer wherever stock was
only missing a kernel). Per rule it prints the outcome and the lengths launched for every N in
1..513 (random full-range int32 values, fixed seed), and the outcome of
tests/kernel/list_inputs.py's special inputs. Stand-ins, for native code that cannot run on a
CPU: the op itself, and ``torch.empty_like(..., device="cuda")`` allocating on the CPU.

Also the checks the sglang and sglang-kt suites make of the probe's output.
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
MAX_N = 513
# The runner's own unit test, which sglang 0003 and sglang-kt 0002 add alike, and each test's
# outcome on the patched package and on stock (which refuses the lengths its kernel lacks). The
# on-device test skips on a CPU.
IN_PATCH_TEST = "test/registered/unit/layers/moe/test_deep_gemm_copy_list.py"
_STOCK_FAILS = ("test_concurrent_calls", "test_every_count_in_released_lengths", "test_other_inputs_as_stock")
_ON_DEVICE = {"TestCopyListToGpuNoCeOnDevice::test_every_local_expert_count": "skipped"}
IN_PATCH_OUTCOMES = {
    label: {**{f"TestCopyListToGpuNoCe::{name}": outcome for name in _STOCK_FAILS}, **_ON_DEVICE}
    for label, outcome in (("patched", "passed"), ("stock", "failed"))
}


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


def outcome(fn, make) -> list:
    got = list(list_inputs.outcome(fn, make))
    if got[0] == "error":  # object addresses differ between processes
        got[2] = re.sub(r" at 0x[0-9a-f]+", " at 0x", got[2])
    return got


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


def check_patched(patched: dict, lengths: list[int]) -> None:
    """Every N right, in stock's one launch where the kernel has N, else in zero-padded pieces of 64."""
    want = {n: [n] if n in lengths else [64] * -(-n // 64) for n in range(1, MAX_N + 1)}
    wrong = {n: c for n, c in patched["counts"].items() if c != {"result": "ok", "launches": want[int(n)]}}
    assert wrong == {}


def check_stock(stock: dict, lengths: list[int]) -> None:
    """Stock refuses every length its kernel lacks."""
    counts = stock["counts"]
    for n in (16, 17, 100, 513):
        assert counts[str(n)] == {"result": "refused", "error": "unexpected N", "launches": []}, n
    assert sorted(int(n) for n, c in counts.items() if c["result"] == "ok") == lengths


def check_as_stock(patched: dict, stock: dict, stock_every: dict) -> None:
    """Each special input gets stock's outcome over the same kernel; where stock was only missing a
    kernel for the length (`unexpected N` there, accepted with every length), stock's values."""

    def want(case: str) -> list:
        got, every = stock["special"][case]["outcome"], stock_every["special"][case]["outcome"]
        return every if got[:3] == ["error", "RuntimeError", "unexpected N"] and every[0] == "ok-cpu" else got

    differ = {
        case: (row["outcome"], want(case)) for case, row in patched["special"].items() if row["outcome"] != want(case)
    }
    assert differ == {}
    assert len(patched["special"]) >= 60


if __name__ == "__main__":
    main()
