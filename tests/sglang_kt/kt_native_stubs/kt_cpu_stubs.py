"""Make the sglang-kt MoE modules importable and constructible on a CPU-only machine.

Importing this module (first, before sglang) puts in place the only stand-ins the
KT weight-loader tests use; everything else is the real upstream code:

- ``sgl_kernel``: the sibling stub package (the real one is a CUDA extension);
  this directory must be on ``sys.path``, which the probes and the pytest plugin
  invocation (``-p kt_cpu_stubs``) arrange.
- ``torch.cuda.get_device_capability``: answers ``(9, 0)`` instead of failing with
  "Found no NVIDIA driver" (``srt/utils/common.py`` asks at import time, from
  ``quantization/fp8.py``).
- ``torch.cuda.Stream`` / ``torch.cuda.Event``: inert objects; ``KTEPWrapperMethod``
  creates a CPU-expert stream and an event on TP rank 0 in ``create_weights`` and
  they are not used while loading weights. ``torch.cuda.synchronize``: a no-op (its
  ``process_weights_after_loading`` synchronises before loading the CPU experts).
- ``kt_kernel.KTMoEWrapper`` as seen by ``kt_ep_wrapper`` (``CpuExpertEngineStandIn``,
  installed by ``use_cpu_expert_engine_stand_in``): the real kt-kernel 0.7.2 package
  is installed and imported (so ``KTRANSFORMERS_AVAILABLE`` is genuinely True and the
  ``frequency`` strategy uses its real ``generate_gpu_experts_masks``), but its CPU
  expert engine allocates pinned host memory in its constructor, which needs a CUDA
  driver ("Found no NVIDIA driver"). The GPU weight loader never calls it;
  ``process_weights_after_loading`` calls its ``load_weights``, which records its
  argument.

Also usable as a pytest plugin: ``python -m pytest -p kt_cpu_stubs ...``.
"""

import torch


def _device_capability(device=None):
    return (9, 0)


class _InertCudaObject:
    """Stands in for torch.cuda.Stream and torch.cuda.Event: created, never used."""

    def __init__(self, *args, **kwargs):
        pass


if not torch.cuda.is_available():
    torch.cuda.get_device_capability = _device_capability
    torch.cuda.Stream = _InertCudaObject
    torch.cuda.Event = _InertCudaObject
    torch.cuda.synchronize = lambda device=None: None

import sgl_kernel  # noqa: E402,F401  (the stub: fail here, not deep inside sglang)

assert getattr(sgl_kernel, "__file__", "").endswith("kt_native_stubs/sgl_kernel/__init__.py"), (
    f"expected the CPU stub of sgl_kernel, got {sgl_kernel!r}"
)


class CpuExpertEngineStandIn:
    """Stands in for kt_kernel.KTMoEWrapper (see above); the weight loader never calls it."""

    def __init__(self, **kwargs):
        self.loaded_maps = []
        # kt-kernel's engine copies the mask into a tensor of num_experts entries.
        self.num_experts = kwargs["num_experts"]
        # The engine's own copy of the layer's GPU-expert mask (a dynamic expert
        # update rewrites it in place).
        self.gpu_experts_mask = kwargs["gpu_experts_mask"].clone()

    def load_weights(self, physical_to_logical_map_cpu):
        self.loaded_maps.append(physical_to_logical_map_cpu.tolist())


def keep_cuda_copies_on_cpu():
    """``Tensor.cuda()`` returns the tensor itself (used for the NVFP4 parameters,
    whose ``create_weights`` moves a swizzled block-scale copy to the GPU)."""
    torch.Tensor.cuda = lambda self, *args, **kwargs: self


def use_cpu_expert_engine_stand_in(kt_ep_wrapper_module):
    kt_ep_wrapper_module.KTMoEWrapper = CpuExpertEngineStandIn
