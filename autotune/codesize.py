"""How much code a lowered candidate makes: an estimate of its compile time, known
before anything is compiled.

The LLVM backend emits one copy of a loop's body per iteration of an ``unrolled`` loop
(up to ``codegen.UNROLL_LIMIT``), so a candidate whose unrolled loops nest deep emits a
body hundreds of times, and its build time (Python code generation, then LLVM's
passes) grows with that.  ``emitted_nodes`` counts the IR nodes the code generator
visits: every statement and expression node, once per copy.  A task refuses candidates
over ``task.MAX_EMITTED_NODES`` before building them, and the builder starts the longest
builds first (``LocalBuilder``), so its processes end a batch together instead of one
compiling a big candidate alone at the end.
"""
from __future__ import annotations

from typing import Any

from tdsl.backends.llvm.codegen import UNROLL_LIMIT   # longer unrolled loops: left to LLVM
from tdsl.expr import Const
from tdsl.stmt import For, ForKind, PrimFunc, Stmt
from tdsl.visitor import children


def emitted_nodes(func: "PrimFunc | Stmt") -> int:
    """IR nodes the code generator emits for ``func``, unrolled loops counted once per
    iteration (an estimate of its compile time)."""
    body = func.body if isinstance(func, PrimFunc) else func
    memo: dict[int, int] = {}

    def size(node: Any) -> int:
        key = id(node)
        got = memo.get(key)
        if got is not None:
            return got
        n = 1
        kids = list(children(node))
        if isinstance(node, For):
            inner = size(node.body)
            ext = node.extent.value if isinstance(node.extent, Const) else None
            copies = ext if node.kind is ForKind.UNROLLED and ext is not None and \
                0 < ext <= UNROLL_LIMIT else 1
            n += copies * inner + sum(size(k) for k in kids if k is not node.body)
        else:
            n += sum(size(k) for k in kids)
        memo[key] = n
        return n
    return size(body)
