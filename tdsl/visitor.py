"""Generic traversal of expressions and statements.

Every node lists its child fields in ``_fields``; these helpers walk and rebuild
nodes through that list, so passes only handle the nodes they care about.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

from .expr import Expr, Var

_SLOTS: dict[type, tuple[str, ...]] = {}


def _all_slots(cls: type) -> tuple[str, ...]:
    slots = _SLOTS.get(cls)
    if slots is None:
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for s in getattr(klass, "__slots__", ()):
                if s not in names:
                    names.append(s)
        slots = _SLOTS[cls] = tuple(names)
    return slots


def _is_node(x: Any) -> bool:
    return hasattr(type(x), "_fields")


def children(node: Any) -> Iterator[Any]:
    """The child nodes of ``node``, in field order (tuples flattened, None skipped)."""
    for f in type(node)._fields:
        v = getattr(node, f)
        if isinstance(v, tuple):
            for x in v:
                if _is_node(x):
                    yield x
        elif v is not None and _is_node(v):
            yield v


def replace_fields(node: Any, **changes: Any) -> Any:
    """A shallow copy of ``node`` with some fields replaced."""
    cls = type(node)
    new = object.__new__(cls)
    for s in _all_slots(cls):
        object.__setattr__(new, s, changes[s] if s in changes else getattr(node, s))
    return new


def map_children(node: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuild ``node`` with ``fn`` applied to each child; returns ``node`` if none changed."""
    changes = {}
    for f in type(node)._fields:
        v = getattr(node, f)
        if isinstance(v, tuple):
            nv = tuple(fn(x) if _is_node(x) else x for x in v)
            if any(a is not b for a, b in zip(nv, v)):
                changes[f] = nv
        elif v is not None and _is_node(v):
            nv = fn(v)
            if nv is not v:
                changes[f] = nv
    return replace_fields(node, **changes) if changes else node


def post_order_visit(node: Any, fn: Callable[[Any], None]) -> None:
    """Call ``fn`` on every node below and including ``node``, children first.

    Iterative (an explicit stack), so arbitrarily deep expressions need no recursion.
    """
    stack: list[tuple[Any, bool]] = [(node, False)]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            fn(n)
            continue
        stack.append((n, True))
        stack.extend((c, False) for c in reversed(list(children(n))))


def transform(node: Any, pre: "Callable[[Any], Any] | None" = None,
              post: "Callable[[Any], Any] | None" = None) -> Any:
    """Rewrite a tree.

    ``pre(node)`` may return a replacement (not visited further) or None to
    recurse; ``post(node)`` gets the node after its children were rewritten and
    returns the final node (or None to keep it).  Nodes are visited in the order
    of a recursive depth-first walk, but with an explicit stack: deep
    expressions need no recursion.
    """
    done: list[Any] = []                         # rewritten nodes, in visit order
    work: list[tuple[Any, int]] = [(node, -1)]   # (node, -1): enter; (node, k): rebuild
    while work:
        n, k = work.pop()
        if k < 0:
            if pre is not None:
                r = pre(n)
                if r is not None:
                    done.append(r)
                    continue
            kids = list(children(n))
            work.append((n, len(kids)))
            work.extend((c, -1) for c in reversed(kids))
            continue
        start = len(done) - k
        new_kids = iter(done[start:])
        del done[start:]
        n = map_children(n, lambda _c: next(new_kids)) if k else n
        if post is not None:
            r = post(n)
            if r is not None:
                n = r
        done.append(n)
    return done[0]


def substitute(node: Any, vmap: Mapping[Var, Expr]) -> Any:
    """Replace variables by expressions (identity-keyed)."""
    if not vmap:
        return node

    def pre(n: Any) -> Any:
        if isinstance(n, Var):
            return vmap.get(n, n)
        return None
    return transform(node, pre=pre)


def free_vars(node: Any) -> set[Var]:
    """Variables used in ``node`` (loop variables of inner loops included)."""
    out: set[Var] = set()

    def fn(n: Any) -> None:
        if isinstance(n, Var):
            out.add(n)
    post_order_visit(node, fn)
    return out


def uses_var(node: Any, var_set: "set[Var] | frozenset[Var]") -> bool:
    """True if any variable of ``var_set`` occurs in ``node``."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            if n in var_set:
                return True
            continue
        stack.extend(children(n))
    return False


def is_expr(x: Any) -> bool:
    return isinstance(x, Expr)
