"""Checks and rewrites of a PrimFunc before LLVM code generation."""
from __future__ import annotations

from typing import Any

from tdsl.errors import BuildError
from tdsl.stmt import AllReduce, Barrier, For, ForKind, IntrinCall, PrimFunc
from tdsl.visitor import post_order_visit, transform


def _lower_intrin_calls(node: Any) -> Any:
    def pre(n: Any) -> Any:
        if isinstance(n, IntrinCall):
            implement = getattr(n.intrin, "implementation", None)
            if implement is not None:
                return _lower_intrin_calls(implement("llvm", n))
            fallback = getattr(n.intrin, "lower_fallback", None)
            if fallback is None:
                raise BuildError(f"tensor intrinsic {n.intrin!r} has no implementation for "
                                 f"the LLVM backend and no fallback")
            return _lower_intrin_calls(fallback(n))
        return None
    return transform(node, pre=pre)


def prepare(func: PrimFunc) -> PrimFunc:
    """``func`` with tensor intrinsics replaced by their fallback code, after checking
    that nothing GPU-only (thread bindings, barriers) is left."""
    if len({id(p) for p in func.params}) != len(func.params):
        raise BuildError(f"'{func.name}': the same buffer is passed twice as a parameter")

    def check(n: Any) -> None:
        if isinstance(n, AllReduce):
            raise BuildError(f"a reduction across GPU threads ({n.combiner.name} over "
                             f"{', '.join(t.value for t in n.tags)}: a reduction loop bound to a "
                             f"thread axis) reached an LLVM (CPU) build; it is for GPU targets: "
                             f"build for 'cuda', or leave the reduction loop unbound for 'llvm'")
        if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING:
            raise BuildError(f"loop '{n.var.name}' is bound to {n.thread_tag}: bind() is for "
                             f"GPU targets; build for 'cuda', or do not bind loops for 'llvm'")
        if isinstance(n, Barrier):
            raise BuildError("a Barrier (__syncthreads) reached an LLVM (CPU) build: "
                             "barriers and bind() are for GPU targets")
    body = _lower_intrin_calls(func.body)
    post_order_visit(body, check)
    if body is func.body:
        return func
    return PrimFunc(func.name, func.params, body, func.size_vars, func.bindings, func.attrs)
