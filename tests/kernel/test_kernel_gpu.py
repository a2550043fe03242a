"""GPU tests of sgl-kernel 0001's post-image copy.cu, through a test-only torch extension build.

Skipped with a reason when no CUDA GPU is visible (CI); scripts/gpu_kernel.sh runs them on
the device machine. copy_ext.py compiles each copy.cu byte for byte as build/trees holds it
(the post-image at HEAD of sgl-kernel, its pre-image at `upstream`, and the KT fork's
copy.cu, which is that pre-image without its N = 32 kernel) beside a registration with sgl-kernel's own schema and dispatch key.

- The patched upstream test file (sgl-kernel/tests/test_copy.py at HEAD) runs against the
  post-image. Stand-in: no sgl-kernel wheel is installed there, so a tiny `sgl_kernel`
  package binds `sgl_kernel.elementwise.copy_to_gpu_no_ce` to the build, as sgl-kernel's
  own Python wrapper does. Nothing else is stubbed.
- Every N in 1..512 against torch's copy; which kernel each N launches (profiler); N = 0
  and 513 refused.
- The unpatched pre-images fail at N = 16 with `unexpected N` (sgl-kernel's works at
  32/64/72 only, the KT fork's at 64/72 only): the bug is real before the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import copy_ext  # noqa: E402
import kernel_patch as kp  # noqa: E402

from helpers import check_pytest_run, run_pytest  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA GPU visible: GPU tests run on the device machine (scripts/gpu_kernel.sh)",
)
INT32 = torch.iinfo(torch.int32)

SHIM_INIT = """import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ["COPY_EXT_DIR"])
import copy_ext

_op = copy_ext.build("post", Path(os.environ["COPY_EXT_SOURCE"]).read_bytes(), Path(os.environ["COPY_EXT_BUILD"]))
"""
SHIM_ELEMENTWISE = """import copy_ext
from sgl_kernel import _op

copy_to_gpu_no_ce = copy_ext.as_sgl_kernel(_op)
"""


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    env = os.environ.get("COPY_EXT_BUILD")
    path = Path(env) if env else tmp_path_factory.mktemp("copy_ext")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def post(build_dir):
    return copy_ext.build("post", kp.image("new", kp.COPY_CU), build_dir)


@pytest.fixture(scope="session")
def preimages(build_dir):
    return {
        "stock": copy_ext.build("stock", kp.image("old", kp.COPY_CU), build_dir),
        "kt": copy_ext.build("kt", copy_ext.kt_copy_cu(kp.image("old", kp.COPY_CU)), build_dir),
    }


def _random(n: int) -> torch.Tensor:
    return torch.randint(INT32.min, INT32.max, (n,), dtype=torch.int32)


def test_upstream_test_file_passes(post, build_dir, tmp_path):
    work = kp.write_tree(tmp_path / "tree", "new")
    shim = tmp_path / "shim" / "sgl_kernel"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(SHIM_INIT)
    (shim / "elementwise.py").write_text(SHIM_ELEMENTWISE)
    source = tmp_path / "copy.cu"
    source.write_bytes(kp.image("new", kp.COPY_CU))
    env = {
        "COPY_EXT_DIR": str(Path(copy_ext.__file__).parent),
        "COPY_EXT_SOURCE": str(source),
        "COPY_EXT_BUILD": str(build_dir),
    }
    run = run_pytest([shim.parent], work / kp.TEST_COPY, tmp_path, extra_env=env)
    assert run.outcomes, run.output[-2000:]
    check_pytest_run(run, dict.fromkeys(run.outcomes, "passed"))


def test_every_length_matches_torch_copy(post):
    for n in range(1, 513):
        src = _random(n)
        dst = torch.full((n,), -1, dtype=torch.int32, device="cuda")
        post(src, dst)
        assert torch.equal(dst.cpu(), src), n


@pytest.mark.parametrize("n", [0, 513, 4096])
def test_lengths_outside_the_bound_are_refused(post, n):
    src = torch.zeros(n, dtype=torch.int32)
    dst = torch.empty(n, dtype=torch.int32, device="cuda")
    with pytest.raises(RuntimeError, match="N = 0|exceeds the maximum of 512|input is empty"):
        post(src, dst)


def test_each_length_launches_its_kernel(post):
    from torch.profiler import ProfilerActivity, profile

    launched = {}
    for n in (1, 16, 17, 32, 33, 64, 65, 72, 73, 512):
        src = _random(n)
        dst = torch.empty(n, dtype=torch.int32, device="cuda")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            post(src, dst)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type.name == "CUDA" and "copy_to_gpu_no_ce" in e.name]
        assert len(names) == 1, (n, names)
        launched[n] = "fallback" if "fallback" in names[0] else "exact"
    exact = {16, 32, 64, 72}
    assert launched == {n: "exact" if n in exact else "fallback" for n in launched}


@pytest.mark.parametrize("name, lengths", [("stock", (32, 64, 72)), ("kt", (64, 72))])
def test_preimage_has_a_few_lengths_only(preimages, name, lengths):
    op = preimages[name]
    for n in (16, 17, 32, 64, 72, 100):
        src = _random(n)
        dst = torch.empty(n, dtype=torch.int32, device="cuda")
        if n in lengths:
            op(src, dst)
            assert torch.equal(dst.cpu(), src), (name, n)
        else:
            with pytest.raises(RuntimeError, match="unexpected N"):
                op(src, dst)
