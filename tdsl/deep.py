"""Deeply nested expressions: run tdsl's recursive passes with a deep enough stack.

The compiler's passes (lowering, simplification, printing, hashing, code generation)
walk expression trees recursively, a few Python frames per level.  A body such as
``sum(A[i, j] for j in range(400))`` is a 400-deep chain of additions, past Python's
default limit of 1000 frames.  Rather than rewriting every visitor, the entry points
(``lower``, ``build``, the interpreter's compiler, the printer, structural hashing)
are wrapped in ``deep_recursion``: the call runs in a worker thread with a large
stack and a raised recursion limit, restored when the last such call ends.

``MAX_EXPR_DEPTH`` is the documented limit: ``td.compute`` refuses deeper bodies with
a ``TDSLError``, and a ``RecursionError`` that still escapes a wrapped pass (an
expression grown deeper by inlining, say) is reported as a ``TDSLError`` too.
"""
from __future__ import annotations

import contextvars
import functools
import sys
import threading
from typing import Any, Callable, Iterable, TypeVar

from .errors import TDSLError

#: The deepest expression nesting tdsl accepts (a chain of this many operators).
MAX_EXPR_DEPTH = 10_000

# Python frames allowed inside a wrapped call, and the worker thread's stack: measured
# at about 0.5 KiB of C stack per frame (recursion through generators, map, repr) on
# CPython 3.11, so the limit (about 130 MiB of frames) is reached long before the
# stack overflows.
_RECURSION_LIMIT = 250_000
_STACK_BYTES = 512 * 1024 * 1024

F = TypeVar("F", bound=Callable[..., Any])

_local = threading.local()
_lock = threading.Lock()
_raised = [0, 0]  # [wrapped calls now running, the recursion limit before the first]


def deep_recursion(fn: F) -> F:
    """Run ``fn`` where expressions up to ``MAX_EXPR_DEPTH`` deep can be walked recursively.

    Calls made while one is already running (on its worker thread) run directly.
    """
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "deep", False):
            return fn(*args, **kwargs)
        return _run_deep(fn, args, kwargs)
    return wrapper  # type: ignore[return-value]


def retry_deep(fn: F) -> F:
    """Like ``deep_recursion``, but first call ``fn`` directly and only rerun it on a worker
    thread if it runs out of recursion: for cheap, pure passes (printing, hashing) that
    catch no exceptions, so shallow inputs pay no thread start."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "deep", False):
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except RecursionError:
            pass
        return _run_deep(fn, args, kwargs)
    return wrapper  # type: ignore[return-value]


def _run_deep(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    result: list[Any] = []
    error: list[BaseException] = []
    ctx = contextvars.copy_context()

    def work() -> None:
        _local.deep = True
        try:
            result.append(ctx.run(fn, *args, **kwargs))
        except RecursionError as e:
            error.append(_too_deep(fn, e))
        except BaseException as e:  # re-raised in the caller's thread
            error.append(e)

    with _lock:
        if _raised[0] == 0:
            _raised[1] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_raised[1], _RECURSION_LIMIT))
        _raised[0] += 1
        # the stack size applies to threads started while it is set
        old_size = threading.stack_size(_STACK_BYTES)
        try:
            worker = threading.Thread(target=work, name=f"tdsl-deep-{fn.__name__}", daemon=True)
            worker.start()
        except BaseException:
            _raised[0] -= 1
            if _raised[0] == 0:
                sys.setrecursionlimit(_raised[1])
            raise
        finally:
            threading.stack_size(old_size)
    try:
        worker.join()
    finally:
        with _lock:
            _raised[0] -= 1
            if _raised[0] == 0:
                sys.setrecursionlimit(_raised[1])
    if error:
        raise error[0].with_traceback(error[0].__traceback__)
    return result[0]


def _too_deep(fn: Callable[..., Any], e: RecursionError) -> TDSLError:
    err = TDSLError(f"{fn.__name__}: an expression is nested too deeply to compile (tdsl supports "
                    f"up to {MAX_EXPR_DEPTH} levels, see tdsl.deep.MAX_EXPR_DEPTH); compute "
                    f"long chains in stages or as a reduction (td.sum over a reduce_axis)")
    err.__cause__ = None
    return err


def expr_depth(roots: Iterable[Any]) -> int:
    """The nesting depth of the deepest of ``roots`` (a leaf has depth 1), without recursion.

    Shared subexpressions are measured once (by identity), so DAGs cost their size.
    """
    from .visitor import children
    depth: dict[int, int] = {}
    keep: list[Any] = []
    best = 0
    for root in roots:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            if id(node) in depth:
                continue
            kids = list(children(node))
            if done:
                depth[id(node)] = 1 + max((depth[id(c)] for c in kids), default=0)
                keep.append(node)
                continue
            stack.append((node, True))
            stack.extend((c, False) for c in kids if id(c) not in depth)
        best = max(best, depth[id(root)])
    return best


def check_depth(what: str, roots: Iterable[Any]) -> None:
    """Refuse expressions deeper than ``MAX_EXPR_DEPTH`` with a ``TDSLError`` naming ``what``."""
    depth = expr_depth(roots)
    if depth > MAX_EXPR_DEPTH:
        raise TDSLError(f"{what}: the expression is nested {depth} levels deep; tdsl supports up "
                        f"to {MAX_EXPR_DEPTH} (tdsl.deep.MAX_EXPR_DEPTH); split it into stages or "
                        f"write long sums as a reduction (td.sum over a reduce_axis)")
