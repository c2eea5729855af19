"""Backend-neutral runtime: argument checking, the Module base class, timing,
thread-count configuration, and kernel signature metadata."""
from .args import ArgChecker, bind_arguments, written_params
from .module import Module, ProfileResult, measure
from .shape_eval import eval_shape_expr, format_shape_expr
from .threads import default_num_threads, pool_spin_ms, rest, set_pool_spin_ms


def release_workspace() -> None:
    """Free the heap temporaries CPU kernels keep between calls (at most 8 blocks in a
    process, the most recently used; see ``tdsl.backends.llvm.workspace``)."""
    from tdsl.backends.llvm.workspace import release_workspace as release
    release()


__all__ = ["ArgChecker", "bind_arguments", "written_params", "Module", "ProfileResult", "measure",
           "eval_shape_expr", "format_shape_expr", "default_num_threads", "pool_spin_ms",
           "set_pool_spin_ms", "rest", "release_workspace"]
