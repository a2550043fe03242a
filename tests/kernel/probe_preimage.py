"""Probe: build the UNPATCHED copy.cu (the tree's pre-image, rebuilt from the
patch by `sgl-overlay fetch`) the same way as the extension, in its own op
namespace, and call it at N=64 and N=16. Prints one JSON line.
argv: build_dir preimage_copy_cu"""

import json
import sys
from pathlib import Path

import kernel_patch as kp
import torch

import sgl_kernel_ext  # PYTHONPATH: the extension's source tree first

build_dir, src = Path(sys.argv[1]), Path(sys.argv[2])
assert kp.file_blob(src) == kp.PINNED_PREIMAGES[kp.COPY_CU]
ns = sgl_kernel_ext.load_jit(
    build_directory=str(build_dir),
    namespace="sgl_kernel_ext_preimage",
    sources=[str(src), str(sgl_kernel_ext.source_dir() / "registration.cc")],
    extra_cflags=["-DSGL_KERNEL_EXT_PREIMAGE"],
)
op = getattr(torch.ops, ns).copy_to_gpu_no_ce
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
