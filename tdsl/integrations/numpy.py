"""A built module's inputs and outputs, and calling it with its inputs only.

A tdsl kernel takes every buffer as an argument, inputs and outputs alike, in the order given to
``td.build(s, [A, B, C])``.  The outputs are the parameters the kernel writes.  This module
tells them apart and allocates the outputs from the inputs' shapes::

    from tdsl.integrations import numpy as tnp
    tnp.signature(f)          # [ParamInfo(A, input, (n, 256), float32), ..., ParamInfo(C, output, ...)]
    c = tnp.call(f, a, b)     # allocates C (shape from a.shape, b.shape), runs f(a, b, c), returns c
    g = tnp.allocating(f)     # g(a, b) -> c; g(a, b, c) still writes into c

Every symbolic size of an output's shape must be readable from an input: ``n`` is, when some
input dimension *is* ``n``; an output whose shape depends on a size that only outputs have
cannot be allocated (pass it yourself).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ShapeError
from ..expr import Add, Const, Expr, FloorDiv, FloorMod, Max, Min, Mul, Sub, Var
from ..runtime.args import written_params
from ..runtime.shape_eval import format_shape_expr
from ..stmt import PrimFunc


@dataclass(frozen=True)
class ParamInfo:
    """One argument of a built module."""

    index: int            #: position in the full argument list
    name: str             #: the buffer's (tensor's) name
    role: str             #: "input" or "output" (an output is a parameter the kernel writes)
    shape: tuple          #: the shape as text: ints, and symbolic sizes like "n" or "2*n"
    dtype: str            #: "float32", ...

    def __str__(self) -> str:
        dims = ", ".join(self.shape)
        return f"{self.index}: {self.name} [{self.role}] ({dims}) {self.dtype}"


def _func(f: Any) -> PrimFunc:
    func = getattr(f, "func", f)
    if not isinstance(func, PrimFunc):
        raise TypeError(f"expected a built tdsl module (td.build(...)) or a PrimFunc, got "
                        f"{type(f).__name__}")
    return func


def output_indices(f: Any) -> tuple[int, ...]:
    """Positions of the outputs (the parameters the kernel writes) in the argument list."""
    return tuple(sorted(written_params(_func(f))))


def input_indices(f: Any) -> tuple[int, ...]:
    """Positions of the inputs (the parameters the kernel only reads)."""
    outs = set(output_indices(f))
    return tuple(i for i in range(len(_func(f).params)) if i not in outs)


def signature(f: Any) -> list[ParamInfo]:
    """Every argument of ``f`` with its role (input/output), shape and dtype."""
    func = _func(f)
    outs = set(output_indices(func))
    return [ParamInfo(i, p.name, "output" if i in outs else "input",
                      tuple(format_shape_expr(s) for s in p.shape), str(p.dtype))
            for i, p in enumerate(func.params)]


# ---- shapes --------------------------------------------------------------------------------
def eval_shape(expr: Expr, env: dict, smin: Callable = min, smax: Callable = max) -> Any:
    """``expr`` with ``env`` substituted, using only ``+ - * // %`` and ``smin``/``smax``, so
    the values may be ints or symbolic integers (``torch.SymInt`` under ``torch.compile``)."""
    if isinstance(expr, Const):
        return int(expr.value)
    if isinstance(expr, Var):
        return env[expr]
    t = type(expr)
    if t in (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max):
        a = eval_shape(expr.a, env, smin, smax)
        b = eval_shape(expr.b, env, smin, smax)
        if t is Add:
            return a + b
        if t is Sub:
            return a - b
        if t is Mul:
            return a * b
        if t is FloorDiv:
            return a // b
        if t is FloorMod:
            return a % b
        return smin(a, b) if t is Min else smax(a, b)
    raise ShapeError(f"cannot evaluate shape expression node {t.__name__}")


def size_sources(f: Any) -> dict:
    """For each symbolic size, the first (input position, dim) whose extent is that size.

    Raises ``ShapeError`` for a size that no input dimension gives (then the outputs cannot be
    allocated from the inputs alone)."""
    func = _func(f)
    ins = input_indices(func)
    src: dict = {}
    for pos, i in enumerate(ins):
        for d, e in enumerate(func.params[i].shape):
            if isinstance(e, Var) and e not in src:
                src[e] = (pos, d)
    missing = [v.name for v in func.size_vars if v not in src]
    if missing:
        raise ShapeError(f"'{func.name}': symbolic size(s) {missing} are not the extent of any "
                         f"input dimension, so the outputs cannot be allocated from the inputs; "
                         f"pass every argument, outputs included")
    return src


def output_shapes(f: Any, input_shapes: Sequence[Sequence[Any]],
                  smin: Callable = min, smax: Callable = max) -> list[tuple]:
    """The shapes of ``f``'s outputs given its inputs' shapes (in input order)."""
    func = _func(f)
    ins = input_indices(func)
    if len(input_shapes) != len(ins):
        raise ShapeError(f"'{func.name}' has {len(ins)} input(s) "
                         f"({', '.join(func.params[i].name for i in ins)}), got "
                         f"{len(input_shapes)}")
    for pos, i in enumerate(ins):
        p = func.params[i]
        if len(input_shapes[pos]) != p.ndim:
            raise ShapeError(f"input {pos} ('{p.name}') of '{func.name}' has "
                             f"{len(input_shapes[pos])} dimension(s), expected {p.ndim}")
    env = {v: input_shapes[pos][d] for v, (pos, d) in size_sources(func).items()}
    return [tuple(eval_shape(e, env, smin, smax) for e in func.params[i].shape)
            for i in output_indices(func)]


# ---- calling -------------------------------------------------------------------------------
def allocate_outputs(f: Any, *inputs: Any) -> list[np.ndarray]:
    """Fresh (uninitialized) NumPy arrays for ``f``'s outputs, shaped from ``inputs``."""
    func = _func(f)
    shapes = output_shapes(func, [np.shape(a) for a in inputs])
    return [np.empty(shape, func.params[i].dtype.numpy)
            for shape, i in zip(shapes, output_indices(func))]


def _merge(func: PrimFunc, inputs: Sequence[Any], outputs: Sequence[Any]) -> list[Any]:
    args: list[Any] = [None] * len(func.params)
    for i, a in zip(input_indices(func), inputs):
        args[i] = a
    for i, a in zip(output_indices(func), outputs):
        args[i] = a
    return args


def call(f: Any, *inputs: Any) -> Any:
    """Run ``f`` on its inputs with freshly allocated outputs; return the output (a tuple of
    them when ``f`` has several).  The inputs are checked by ``f`` as in any call."""
    func = _func(f)
    outs = allocate_outputs(func, *inputs)
    f(*_merge(func, inputs, outs))
    return outs[0] if len(outs) == 1 else tuple(outs)


def allocating(f: Any) -> Callable[..., Any]:
    """``f`` made callable with its inputs only (outputs allocated and returned); a call with
    every argument still writes into the given outputs and returns None, like ``f``."""
    func = _func(f)
    n_all = len(func.params)

    def run(*arrays: Any) -> Any:
        if len(arrays) == n_all:
            return f(*arrays)
        return call(f, *arrays)

    run.__name__ = func.name
    run.__doc__ = (f"'{func.name}' with outputs allocated; arguments:\n"
                   + "\n".join(f"  {p}" for p in signature(func)))
    run.module = f  # type: ignore[attr-defined]
    return run
