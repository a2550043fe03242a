"""Probe: build the UNPATCHED copy.cu (argv[2], the tree's pre-image) with the flags the
extension is built with (sgl_kernel_ext._build.prepare) next to the test-only
preimage_registration.cc, and call torch.ops.sgl_kernel_ext_preimage.copy_to_gpu_no_ce
at N=64 and N=16. Runs in its own process, apart from the loaded extension, which
defines the same C++ symbols. Prints one JSON line.
argv: build_dir preimage_copy_cu"""

import json
import sys
from pathlib import Path

import torch
import torch.utils.cpp_extension as cpp_extension

from sgl_kernel_ext._build import prepare  # PYTHONPATH: the extension's source tree first

build_dir, src = Path(sys.argv[1]), Path(sys.argv[2])
cxx, nvcc, include_dirs = prepare()
cpp_extension.load(
    name="sgl_kernel_ext_preimage",
    sources=[str(src), str(Path(__file__).with_name("preimage_registration.cc"))],
    extra_cflags=cxx,
    extra_cuda_cflags=nvcc,
    extra_include_paths=include_dirs,
    build_directory=str(build_dir),
    is_python_module=False,
)
op = torch.ops.sgl_kernel_ext_preimage.copy_to_gpu_no_ce
result = {}
for n in (64, 16):
    x = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32)
    y = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    try:
        op(x, y)
        torch.cuda.synchronize()
        result[str(n)] = {"ok": y.cpu().tolist() == x.tolist()}
    except RuntimeError as exc:
        result[str(n)] = {"error": str(exc).splitlines()[0]}
print(json.dumps(result))
