"""Special inputs for the list entry points, and the outcome of one call.

sglang's caller turns its argument into a CPU tensor with
``torch.tensor(values, dtype=torch.int32)``; what that accepts, refuses or truncates is
stock's answer. Each case is a factory, so that a stateful input (a generator, a list
that an element's ``__index__`` shrinks while it is read) is fresh for every call.
Used on a CPU machine (tests/kernel/probe_list_inputs.py, the reading and the
refusals) and on a GPU (tests/kernel/test_kernel_gpu.py, every entry point).
"""

from __future__ import annotations

import array
import enum
import fractions
from collections.abc import Callable

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class _ListWithGetitem(list):
    def __getitem__(self, i):
        return 99


class _PlainList(list):
    pass


class _PlainTuple(tuple):
    pass


class _MyInt(int):
    pass


class _Color(enum.IntEnum):
    RED = 3


class _Index:
    def __index__(self):
        return 7


class _IntOnly:
    def __int__(self):
        return 7


class _Shrinker:
    """An element whose __index__ cuts the list it is in to two items."""

    def __init__(self):
        self.target: list = []

    def __index__(self):
        del self.target[2:]
        return 7


def _shrinking_list() -> list:
    s = _Shrinker()
    values = [1, s, 3, 4]
    s.target = values
    return values


def cases(torch, np=None) -> dict[str, Callable[[], object]]:
    """name -> factory of the input; numpy cases only where numpy is given."""
    c: dict[str, Callable[[], object]] = {
        "list_1": lambda: [5],
        "list_16": lambda: list(range(16)),
        "list_17_negative": lambda: [-i * 1000 for i in range(17)],
        "list_72_counts": lambda: [(i * 37) % 8192 for i in range(72)],
        "list_512_full_range": lambda: [INT32_MIN + i * 8388607 for i in range(512)],
        "list_int32_bounds": lambda: [INT32_MIN, INT32_MAX, 0, -1],
        "tuple_32": lambda: tuple(range(32)),
        "empty_list": lambda: [],
        "empty_tuple": lambda: (),
        "list_513": lambda: [1] * 513,
        "list_4096": lambda: list(range(4096)),
        "int32_max_plus_1": lambda: [0, INT32_MAX + 1],
        "int32_min_minus_1": lambda: [INT32_MIN - 1, 0],
        "int_2_40": lambda: [2**40],
        "int_2_63": lambda: [2**63],
        "int_2_64": lambda: [2**64],
        "int_minus_2_64": lambda: [-(2**64)],
        "floats": lambda: [1.7, 2.0, -1.5],
        "float_nan": lambda: [float("nan")],
        "float_inf": lambda: [float("inf")],
        "float_1e20": lambda: [1e20],
        "mixed_int_float": lambda: [1, 2.5],
        "bools": lambda: [True, False, True],
        "mixed_int_bool": lambda: [1, True],
        "int_subclass": lambda: [_MyInt(4), _MyInt(5)],
        "int_enum": lambda: [_Color.RED, 1],
        "index_objects": lambda: [_Index(), 2],
        "int_only_objects": lambda: [_IntOnly()],
        "shrinking_list": _shrinking_list,
        "fraction": lambda: [fractions.Fraction(7, 2)],
        "complex": lambda: [1 + 2j],
        "none_element": lambda: [1, None],
        "str_element": lambda: [1, "2"],
        "nested_2x2": lambda: [[1, 2], [3, 4]],
        "nested_ragged": lambda: [[1], [2, 3]],
        "nested_singletons": lambda: [[1], [2]],
        "scalar_int": lambda: 5,
        "none": lambda: None,
        "str": lambda: "123",
        "bytes": lambda: b"\x01\x02",
        "bytearray": lambda: bytearray(b"\x01\x02"),
        "range": lambda: range(5),
        "empty_range": lambda: range(0),
        "generator": lambda: (i for i in range(3)),
        "iterator": lambda: iter([1, 2, 3]),
        "set": lambda: {1, 2, 3},
        "dict": lambda: {1: 2, 3: 4},
        "list_subclass_getitem": lambda: _ListWithGetitem([1, 2, 3]),
        "list_subclass_plain": lambda: _PlainList([1, 2, 3]),
        "tuple_subclass": lambda: _PlainTuple((1, 2, 3)),
        "array_i": lambda: array.array("i", [1, 2, 3]),
        "tensor_1d_int32": lambda: torch.tensor([1, 2, 3], dtype=torch.int32),
        "tensor_1d_int64": lambda: torch.tensor([1, 2, 2**40]),
        "tensor_1d_float": lambda: torch.tensor([1.5, 2.5]),
        "tensor_2d": lambda: torch.zeros(2, 2, dtype=torch.int32),
        "tensor_0d_int": lambda: torch.tensor(5),
        "tensor_0d_float": lambda: torch.tensor(5.7),
        "list_of_0d_tensors": lambda: [torch.tensor(1), torch.tensor(2)],
        "list_of_0d_float_tensors": lambda: [torch.tensor(1.5)],
        "list_of_1d_tensors": lambda: [torch.tensor([1]), torch.tensor([2])],
    }
    if np is not None:
        c.update(
            {
                "numpy_int32": lambda: np.array([1, 2, 3], dtype=np.int32),
                "numpy_int64": lambda: np.array([1, 2, 2**40], dtype=np.int64),
                "numpy_float": lambda: np.array([1.5, 2.5]),
                "numpy_scalars": lambda: [np.int64(3), np.int32(4)],
                "numpy_uint8": lambda: np.array([250, 3], dtype=np.uint8),
            }
        )
    return c


def outcome(fn, make) -> tuple:
    """("ok", values) for an int32 CUDA tensor (CPU tensors: ("ok-cpu", values)), else
    ("error", exception type name, first line of the message)."""
    try:
        result = fn(make())
    except Exception as exc:  # noqa: BLE001 (the type is the outcome)
        return ("error", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    import torch

    if not isinstance(result, torch.Tensor):
        return ("not-a-tensor", type(result).__name__)
    kind = "ok" if result.device.type == "cuda" else "ok-cpu"
    return (kind, str(result.dtype), tuple(result.shape), result.cpu().tolist())


def differential(entry_points: dict, all_cases: dict) -> dict:
    """For every case and entry point (name -> (fn, reference)): both outcomes, and
    whether they agree (same values, or the same error type and message)."""
    rows = {}
    for case, make in all_cases.items():
        row = {}
        for name, (fn, reference) in entry_points.items():
            got, want = outcome(fn, make), outcome(reference, make)
            row[name] = {"got": got, "want": want, "same": got == want}
        rows[case] = row
    return rows


SUMMARY_KEYS = ("cases", "same", "wrong_value", "accepts_refused", "refuses_accepted", "system_error")


def summary(rows: dict) -> dict:
    """Counts per entry point: agreeing, differing, wrong values (both accepted, different
    values), accepted where the reference refuses, refused where it accepts, SystemError."""
    out: dict = {}
    for row in rows.values():
        for name, r in row.items():
            s = out.setdefault(name, dict.fromkeys(SUMMARY_KEYS, 0))
            got, want = r["got"], r["want"]
            s["cases"] += 1
            s["same"] += r["same"]
            ok_got, ok_want = got[0].startswith("ok"), want[0].startswith("ok")
            s["wrong_value"] += ok_got and ok_want and got != want
            s["accepts_refused"] += ok_got and not ok_want
            s["refuses_accepted"] += ok_want and not ok_got
            s["system_error"] += got[0] == "error" and got[1] == "SystemError"
    return out
