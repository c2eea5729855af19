"""One GPU thread per global store: predicate stores that every thread of an axis repeats.

A statement of a kernel that no loop bound to ``threadIdx.x`` encloses runs in every
``threadIdx.x`` thread the kernel launches (another stage of the kernel binds it): a row
group's per-row output (``mean``, ``argmax``) stored after the row's lanes reduced it, or
the scalar stored after a reduction whose loops are all bound.  Every such thread stores
the same value to the same global element: a write-write race that a GPU resolves only
because the values agree, and redundant memory traffic.  This pass wraps each such store
(the largest subtree holding only such stores) in a loop of extent 1 bound to each missing
axis, which runs it on the first thread of that axis only (docs/ir.md: a loop of extent 1
does not set the launch size).  Block axes are treated the same way where nothing else
in the kernel reads what is stored.

Only global stores are predicated (a shared or local buffer written outside a thread loop
is each thread's, or the block's, own copy that the threads read afterwards), and only
where no other thread reads what they store but behind a barrier (and no other block at
all): otherwise the threads that no longer store it would read it before it is written.
"""
from __future__ import annotations

from typing import Any

from ..expr import BufferLoad, Const, Var
from ..stmt import (AllReduce, Barrier, BufferStore, For, ForKind, IntrinCall, SeqStmt, Stmt,
                    StorageScope, ThreadTag)
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


def _accesses(s: Any) -> "tuple[dict[int, int], dict[int, int]]":
    """How many times each buffer (by id) is read, and written, under ``s``."""
    reads: dict[int, int] = {}
    writes: dict[int, int] = {}

    def add(d: dict, buf: Any) -> None:
        d[id(buf)] = d.get(id(buf), 0) + 1

    def fn(n: Any) -> None:
        if isinstance(n, BufferLoad):
            add(reads, n.buffer)
        elif isinstance(n, BufferStore):
            add(writes, n.buffer)
        elif isinstance(n, IntrinCall):   # an update reads its outputs too
            for r in n.inputs + n.outputs:
                add(reads, r.buffer)
            for r in n.outputs:
                add(writes, r.buffer)
    post_order_visit(s, fn)
    return reads, writes


def _global_stores(s: Stmt) -> "set[int] | None":
    """The buffers (ids) ``s`` writes if it writes global buffers only, binds no hardware
    axis and has no collective (it can run on one thread instead of all); else None."""
    ok = True
    written: set[int] = set()

    def fn(n: Any) -> None:
        nonlocal ok
        if isinstance(n, (Barrier, AllReduce, IntrinCall)) or _hardware_tag(n) is not None:
            ok = False
        elif isinstance(n, BufferStore):
            written.add(id(n.buffer))
            if n.buffer.scope is not StorageScope.GLOBAL:
                ok = False
    post_order_visit(s, fn)
    return written if ok and written else None


def _wrap(s: Stmt, missing: "list[ThreadTag]") -> Stmt:
    for tag in missing:
        s = For(Var(f"{tag.value}.first"), Const(0, "int64"), Const(1, "int64"),
                ForKind.THREAD_BINDING, s, thread_tag=tag)
    return s


class _Kernel:
    """The pass over one kernel: ``launched`` axes, the accesses to each buffer in it."""

    def __init__(self, root: For):
        self.launched = _launched(root)
        self.reads, self.writes = _accesses(root)

    def axes(self, s: Stmt, missing: "list[ThreadTag]", later: "dict[int, int] | None"
             ) -> "list[ThreadTag]":
        """The axes of ``missing`` that ``s`` may run on the first index of only: it stores
        to global buffers only, all the kernel's stores to them, and the kernel reads them
        only in ``s`` or (thread axes only) in ``later``, the reads behind a barrier after it
        (a barrier orders the threads of a block, not blocks)."""
        written = _global_stores(s)
        if written is None:
            return []
        reads, writes = _accesses(s)
        if any(self.writes.get(b, 0) != writes.get(b, 0) for b in written):
            return []
        if all(self.reads.get(b, 0) == reads.get(b, 0) for b in written):
            return missing
        later = later or {}
        if all(self.reads.get(b, 0) == reads.get(b, 0) + later.get(b, 0) for b in written):
            return [t for t in missing if t.is_thread]
        return []

    def visit(self, s: Any, bound: frozenset, later: "dict[int, int] | None" = None) -> Any:
        """``s`` rewritten; ``later``: the reads in the statements that follow ``s`` behind
        a barrier."""
        tag = _hardware_tag(s)
        if tag is not None:
            return map_children(s, lambda c: self.visit(c, bound | {tag}) if isinstance(c, Stmt) else c)
        missing = sorted(self.launched - bound, key=lambda t: t.value)
        if not missing:
            return s
        if isinstance(s, SeqStmt):
            return self.seq(s, bound, missing)
        axes = self.axes(s, missing, later) if isinstance(s, Stmt) else []
        if axes:
            return _wrap(s, axes)
        if not any(isinstance(c, Stmt) for c in children(s)):
            return s
        return map_children(s, lambda c: self.visit(c, bound) if isinstance(c, Stmt) else c)

    def seq(self, s: SeqStmt, bound: frozenset, missing: "list[ThreadTag]") -> Stmt:
        """Wrap the longest runs of statements that can run on one thread together (a
        reduction's init and its update loop store the same element)."""
        items, out, i = list(s.stmts), [], 0
        while i < len(items):
            for j in range(len(items), i, -1):
                run = items[i] if j == i + 1 else SeqStmt(items[i:j])
                later = None
                if j < len(items) and isinstance(items[j], Barrier):
                    later = {}
                    for rest in items[j + 1:]:
                        for b, c in _accesses(rest)[0].items():
                            later[b] = later.get(b, 0) + c
                axes = self.axes(run, missing, later)
                if axes:
                    out.append(_wrap(run, axes))
                    i = j
                    break
            else:
                out.append(self.visit(items[i], bound))
                i += 1
        return s if len(out) == len(items) and all(a is b for a, b in zip(out, items)) \
            else SeqStmt(out)


def predicate_redundant_stores(stmt: Stmt) -> Stmt:
    """``stmt`` with each global store that several threads or blocks of its kernel would
    repeat run by the first of them only (see module doc)."""
    if _hardware_tag(stmt) is not None:   # the root of a kernel
        return _Kernel(stmt).visit(stmt, frozenset())
    if not any(isinstance(c, Stmt) for c in children(stmt)):
        return stmt
    return map_children(stmt, lambda c: predicate_redundant_stores(c) if isinstance(c, Stmt) else c)
