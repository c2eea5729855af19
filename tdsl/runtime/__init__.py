"""Backend-neutral runtime: argument checking, the Module base class, timing,
thread-count configuration, and kernel signature metadata."""
from .args import ArgChecker, bind_arguments, written_params
from .module import Module, ProfileResult, measure
from .shape_eval import eval_shape_expr, format_shape_expr
from .threads import default_num_threads, pool_spin_ms, rest, set_pool_spin_ms

__all__ = ["ArgChecker", "bind_arguments", "written_params", "Module", "ProfileResult", "measure",
           "eval_shape_expr", "format_shape_expr", "default_num_threads", "pool_spin_ms",
           "set_pool_spin_ms", "rest"]
