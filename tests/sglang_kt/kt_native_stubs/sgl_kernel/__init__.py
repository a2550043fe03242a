"""CPU-test stand-in for the native ``sgl_kernel`` package (CUDA ops only).

The real package (shipped inside the sglang-kt and kt-kernel wheels) loads a CUDA
``common_ops`` extension and cannot be imported on a machine without a GPU. The
modules under test only import names from it at module level; nothing here is
called on the weight-loading path. Every attribute is a callable that raises when
called, and every submodule (``sgl_kernel.elementwise``, ``sgl_kernel.kvcacheio``,
...) is such a stub too, except ``sgl_kernel.scalar_type``: sglang already handles
its absence with its own fallback (``srt/layers/quantization/utils.get_scalar_types``).
"""

import importlib.abc
import importlib.machinery
import sys
import types


def _missing(qualname):
    def op(*args, **kwargs):
        raise RuntimeError(f"{qualname} is a CPU-test stub of a CUDA op")

    op.__name__ = qualname.rsplit(".", 1)[-1]
    op.__qualname__ = qualname
    return op


def _module_getattr(modname):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing(f"{modname}.{name}")

    return __getattr__


__getattr__ = _module_getattr(__name__)


class _StubSubmodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    _absent = {"sgl_kernel.scalar_type"}

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("sgl_kernel.") or fullname in self._absent:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_StubSubmodules())
