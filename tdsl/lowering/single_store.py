"""One GPU thread per global store: predicate stores that every thread of an axis repeats.

A statement of a kernel that no loop bound to ``threadIdx.x`` encloses runs in every
``threadIdx.x`` thread the kernel launches (another stage of the kernel binds it): a row
group's per-row output (``mean``, ``argmax``) stored after the row's lanes reduced it, or
the scalar stored after a reduction whose loops are all bound.  Every such thread stores
the same value to the same global element: a write-write race that a GPU resolves only
because the values agree, and redundant memory traffic.  This pass wraps each such store
(the largest subtree holding only such stores) in a loop of extent 1 bound to each missing
axis, which runs it on the first thread of that axis only (docs/ir.md: a loop of extent 1
does not set the launch size).  Block axes are treated the same way.

Only global stores are predicated: a shared or local buffer written outside a thread loop
is each thread's (or the block's) own copy that the threads read afterwards.
"""
from __future__ import annotations

from typing import Any

from ..expr import Const, Var
from ..stmt import (AllReduce, Barrier, BufferStore, For, ForKind, IntrinCall, Stmt, StorageScope,
                    ThreadTag)
from ..visitor import children, map_children, post_order_visit

__all__ = ["predicate_redundant_stores", "is_first_thread_loop"]


def _hardware_tag(n: Any) -> "ThreadTag | None":
    if isinstance(n, For) and n.kind is ForKind.THREAD_BINDING and n.thread_tag is not None:
        tag = ThreadTag(n.thread_tag)
        return None if tag is ThreadTag.VTHREAD else tag
    return None


def is_first_thread_loop(n: Any) -> bool:
    """A hardware-bound loop of constant extent 1: it runs on index 0 of its axis only and
    does not set the launch size (other loops binding the axis do)."""
    return _hardware_tag(n) is not None and isinstance(n.extent, Const) and n.extent.value == 1


def _launched(kernel: For) -> set:
    """The hardware axes a kernel launches with (possibly) more than one index."""
    tags: set = set()

    def fn(n: Any) -> None:
        tag = _hardware_tag(n)
        if tag is not None and not is_first_thread_loop(n):
            tags.add(tag)
    post_order_visit(kernel, fn)
    return tags


def _only_global_stores(s: Stmt) -> bool:
    """``s`` writes global buffers only, binds no hardware axis and has no collective: it
    can run on one thread instead of all of them."""
    ok = True
    stores = 0

    def fn(n: Any) -> None:
        nonlocal ok, stores
        if isinstance(n, (Barrier, AllReduce, IntrinCall)) or _hardware_tag(n) is not None:
            ok = False
        elif isinstance(n, BufferStore):
            stores += 1
            if n.buffer.scope is not StorageScope.GLOBAL:
                ok = False
    post_order_visit(s, fn)
    return ok and stores > 0


def _wrap(s: Stmt, missing: "list[ThreadTag]") -> Stmt:
    for tag in missing:
        s = For(Var(f"{tag.value}.first"), Const(0, "int64"), Const(1, "int64"),
                ForKind.THREAD_BINDING, s, thread_tag=tag)
    return s


def _visit(s: Any, launched: set, bound: frozenset) -> Any:
    tag = _hardware_tag(s)
    if tag is not None:
        return map_children(s, lambda c: _visit(c, launched, bound | {tag})
                            if isinstance(c, Stmt) else c)
    missing = sorted(launched - bound, key=lambda t: t.value)
    if not missing:
        return s
    if isinstance(s, Stmt) and _only_global_stores(s):
        return _wrap(s, missing)
    if not any(isinstance(c, Stmt) for c in children(s)):
        return s
    return map_children(s, lambda c: _visit(c, launched, bound) if isinstance(c, Stmt) else c)


def predicate_redundant_stores(stmt: Stmt) -> Stmt:
    """``stmt`` with each global store that several threads or blocks of its kernel would
    repeat run by the first of them only (see module doc)."""
    if _hardware_tag(stmt) is not None:   # the root of a kernel
        return _visit(stmt, _launched(stmt), frozenset())
    if not any(isinstance(c, Stmt) for c in children(stmt)):
        return stmt
    return map_children(stmt, lambda c: predicate_redundant_stores(c) if isinstance(c, Stmt) else c)
