"""tdsl.ops: ready-made operators (compute declarations) with default schedules.

Operators are functions of tensors that return tensors, named as TVM's topi and PyTorch
users expect::

    import tdsl as td
    from tdsl import ops

    x = td.placeholder((td.var("n"), 256), name="x")
    w = td.placeholder((128, 256), name="w")
    b = td.placeholder((128,), name="b")
    y = ops.dense(x, w, b, activation="relu")      # one kernel: matmul + bias + relu
    s = ops.schedule(y, "llvm")
    f = td.build(s, [x, w, b, y], target="llvm")

Every stage an operator declares carries an ``OpKind`` tag (see ``tdsl.ops.tags``);
``ops.schedule`` dispatches on it through constant mappings.
"""
from .attention import attention
from .elemwise import (ACTIVATIONS, abs, add, broadcast_to, cast, ceil, clip, cos, divide, elemwise,
                       equal, erf, exp, floor, floor_divide, gelu, greater, greater_equal, identity,
                       leaky_relu, less, less_equal, log, logical_and, logical_not, logical_or,
                       maximum, minimum, mod, multiply, negative, not_equal, power, relu, round,
                       rsqrt, sigmoid, silu, sin, sqrt, subtract, tanh, where)
from .nn import (avg_pool2d, batch_matmul, batch_norm, conv2d, dense, fold_batch_norm, layer_norm,
                 layernorm, log_softmax, matmul, max_pool2d, pool2d, rms_norm, rmsnorm, softmax)
from .reduction import argmax, argmin, max, mean, min, prod_ as prod, reduce, sum
from .schedules import TARGET_SCHEDULES, inline_injective, schedule
from .tags import OpKind, Pattern, kind_of, pattern_of
from .transform import concatenate, expand_dims, flatten, pad, reshape, squeeze, transpose

__all__ = [
    # elementwise / broadcasting
    "add", "subtract", "multiply", "divide", "floor_divide", "mod", "power", "maximum", "minimum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
    "logical_or", "logical_not", "where", "negative", "abs", "exp", "log", "sqrt", "rsqrt", "tanh",
    "sigmoid", "erf", "floor", "ceil", "round", "sin", "cos", "relu", "leaky_relu", "gelu", "silu",
    "clip", "cast", "identity", "broadcast_to", "elemwise", "ACTIVATIONS",
    # layout
    "transpose", "reshape", "flatten", "expand_dims", "squeeze", "pad", "concatenate",
    # reductions
    "sum", "mean", "max", "min", "prod", "argmax", "argmin", "reduce",
    # nn
    "attention",
    "matmul", "batch_matmul", "dense", "conv2d", "pool2d", "max_pool2d", "avg_pool2d", "softmax",
    "log_softmax", "layernorm", "layer_norm", "rmsnorm", "rms_norm", "batch_norm",
    "fold_batch_norm",
    # scheduling
    "schedule", "inline_injective", "TARGET_SCHEDULES", "OpKind", "Pattern", "kind_of", "pattern_of",
]
