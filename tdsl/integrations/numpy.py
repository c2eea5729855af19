"""A built module's inputs and outputs, and calling it with its inputs only.

A tdsl kernel takes every buffer as an argument, inputs and outputs alike, in the order given to
``td.build(s, [A, B, C])``.  The outputs are the parameters the kernel writes.  This module
tells them apart and allocates the outputs from the inputs' shapes::

    from tdsl.integrations import numpy as tnp
    for p in tnp.signature(f):
        print(p)              # 0: A [input] (n, 256) float32 ... 2: C [output] (n, 128) float32
    c = tnp.call(f, a, b)     # allocates C (shape from a and b), runs f(a, b, C), returns C
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
from ..expr import Var
from ..runtime.args import written_params
from ..runtime.shape_eval import eval_shape_expr, format_shape_expr
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


class Plan:
    """What allocating outputs for one function needs, computed once: the input and output
    positions, where each symbolic size is read from, the outputs' shapes and dtypes."""

    def __init__(self, func: PrimFunc):
        self.func = func
        written = written_params(func)
        self.outputs = tuple(sorted(written))
        self.inputs = tuple(i for i in range(len(func.params)) if i not in written)
        src: dict = {}
        for pos, i in enumerate(self.inputs):
            for d, e in enumerate(func.params[i].shape):
                if isinstance(e, Var) and e not in src:
                    src[e] = (pos, d)
        self.sources = src
        self.missing = [v.name for v in func.size_vars if v not in src]
        self.out_shapes = [func.params[i].shape for i in self.outputs]
        self.out_dtypes = [func.params[i].dtype for i in self.outputs]

    def check_allocatable(self) -> None:
        if self.missing:
            raise ShapeError(f"'{self.func.name}': symbolic size(s) {self.missing} are not the "
                             f"extent of any input dimension, so the outputs cannot be allocated "
                             f"from the inputs; pass every argument, outputs included")

    def shapes(self, input_shapes: Sequence[Sequence[Any]], smin: Callable = min,
               smax: Callable = max) -> list[tuple]:
        func = self.func
        if len(input_shapes) != len(self.inputs):
            raise ShapeError(f"'{func.name}' has {len(self.inputs)} input(s) "
                             f"({', '.join(func.params[i].name for i in self.inputs)}), got "
                             f"{len(input_shapes)}")
        for pos, i in enumerate(self.inputs):
            p = func.params[i]
            if len(input_shapes[pos]) != p.ndim:
                raise ShapeError(f"input {pos} ('{p.name}') of '{func.name}' has "
                                 f"{len(input_shapes[pos])} dimension(s), expected {p.ndim}")
        self.check_allocatable()
        env = {v: input_shapes[pos][d] for v, (pos, d) in self.sources.items()}
        try:
            return [tuple(eval_shape_expr(e, env, smin, smax) for e in shape)
                    for shape in self.out_shapes]
        except ZeroDivisionError:
            raise ShapeError(f"'{func.name}': an output shape divides by a size that is 0 for "
                             f"inputs of shapes {[tuple(s) for s in input_shapes]}") from None

    def merge(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> list[Any]:
        """The full argument list from the inputs and the outputs."""
        args: list[Any] = [None] * len(self.func.params)
        for i, a in zip(self.inputs, inputs):
            args[i] = a
        for i, a in zip(self.outputs, outputs):
            args[i] = a
        return args


_PLANS: "dict[int, tuple[PrimFunc, Plan]]" = {}
_MAX_PLANS = 128


def plan(f: Any) -> Plan:
    """The (cached) ``Plan`` of a module or PrimFunc."""
    func = _func(f)
    hit = _PLANS.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    p = Plan(func)
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.pop(next(iter(_PLANS)))
    _PLANS[id(func)] = (func, p)
    return p


def output_indices(f: Any) -> tuple[int, ...]:
    """Positions of the outputs (the parameters the kernel writes) in the argument list."""
    return plan(f).outputs


def input_indices(f: Any) -> tuple[int, ...]:
    """Positions of the inputs (the parameters the kernel only reads)."""
    return plan(f).inputs


def signature(f: Any) -> list[ParamInfo]:
    """Every argument of ``f`` with its role (input/output), shape and dtype."""
    func = _func(f)
    outs = set(plan(func).outputs)
    return [ParamInfo(i, p.name, "output" if i in outs else "input",
                      tuple(format_shape_expr(s) for s in p.shape), str(p.dtype))
            for i, p in enumerate(func.params)]


# ---- shapes --------------------------------------------------------------------------------
def size_sources(f: Any) -> dict:
    """For each symbolic size, the first (input position, dim) whose extent is that size.

    Raises ``ShapeError`` for a size that no input dimension gives (then the outputs cannot be
    allocated from the inputs alone)."""
    p = plan(f)
    p.check_allocatable()
    return dict(p.sources)


def output_shapes(f: Any, input_shapes: Sequence[Sequence[Any]],
                  smin: Callable = min, smax: Callable = max) -> list[tuple]:
    """The shapes of ``f``'s outputs given its inputs' shapes (in input order)."""
    return plan(f).shapes(input_shapes, smin, smax)


# ---- calling -------------------------------------------------------------------------------
def allocate_outputs(f: Any, *inputs: Any) -> list[np.ndarray]:
    """Fresh (uninitialized) NumPy arrays for ``f``'s outputs, shaped from ``inputs``."""
    p = plan(f)
    shapes = p.shapes([np.shape(a) for a in inputs])
    return [np.empty(shape, dt.numpy) for shape, dt in zip(shapes, p.out_dtypes)]


def call(f: Any, *inputs: Any) -> Any:
    """Run ``f`` on its inputs with freshly allocated outputs; return the output (a tuple of
    them when ``f`` has several).  The inputs are checked by ``f`` as in any call."""
    p = plan(f)
    outs = allocate_outputs(f, *inputs)
    f(*p.merge(inputs, outs))
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
