"""tdsl: a tensor-program compiler for Python.

Declare *what* to compute with ``compute``/``reduce_axis``, say *how* with a
schedule (``create_schedule``) or let ``tdsl.autotune`` find it, then ``build``
for ``"llvm"`` (CPU) or ``"cuda"``.
"""
from ._source_tree import install as _install_source_tree

_install_source_tree(__path__[0])    # a checkout on PYTHONPATH without an install

from .dtype import DType  # noqa: E402
from .errors import (ArgumentError, BuildError, DTypeError, InternalError, LoweringError, ScheduleError,
                     ShapeError, TDSLError, TuningError)
from .expr import Expr, Var, SizeVar, const
from .intrin import (abs, all, any, cast, ceil, cos, erf, exp, exp2, floor, if_then_else,
                     isnan, log, log2, log10, maximum, minimum, pow, power, round, rsqrt,
                     sigmoid, sin, sqrt, tanh, trunc)
from .reduction import comm_reducer, max, max_value, min, min_value, sum
from .stmt import Buffer, ForKind, PrimFunc, StorageScope, ThreadTag
from .target import Target, as_target
from .tensor import (ComputeOp, IterVar, PlaceholderOp, Range, Tensor, compute, placeholder,
                     reduce_axis, size_var, thread_axis, var)

__version__ = "0.1.0"   # the only place the version is written (pyproject reads it)

from .scan_op import scan  # noqa: E402
from .extern_op import call_extern, call_packed, extern, get_global_func, register_func  # noqa: E402
from .lowering import lower  # noqa: E402
from .build_module import build, load_module  # noqa: E402
from tdsl.schedule import Schedule, Stage, create_schedule  # noqa: E402
from tdsl.schedule.tensorize import TensorIntrin, decl_tensor_intrin  # noqa: E402


#: subpackages and modules reachable as ``tdsl.<name>`` after a plain ``import tdsl``, imported
#: on first use so that ``import tdsl`` stays fast (and never imports torch or xgboost).
_LAZY_MODULES = ("interpreter", "autotune", "ops", "integrations", "backends", "runtime",
                 "testing")


def __getattr__(name: str):
    """Lazy attributes: ``tdsl.to_torch``, ``tdsl.compile`` (a PyTorch model as tdsl kernels,
    ``tdsl.frontend.api.compile``) and the modules in ``_LAZY_MODULES``."""
    if name == "to_torch":
        from tdsl.integrations.torch import to_torch
        return to_torch
    if name == "compile":
        from tdsl.frontend.api import compile
        return compile
    if name in _LAZY_MODULES:
        import importlib
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise        # the module exists but one of its imports is missing
    raise AttributeError(f"module 'tdsl' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY_MODULES) | {"to_torch", "compile"})
