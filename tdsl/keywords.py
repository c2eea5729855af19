"""Unknown keyword arguments are errors that name the valid keywords.

Python already rejects an unknown keyword of a function without ``**kwargs``, with a bare
``TypeError``; ``@check_keywords`` turns that into an ``ArgumentError`` (a ``TDSLError``
and a ``TypeError``) that names the function, the unknown keyword, the closest valid one
and the full list.  Public entry points use it instead of ``**kwargs`` catch-alls, which let
``time_evaluator(nubmer=100)`` run once without a word.
"""
from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable, Iterable, TypeVar

from .errors import ArgumentError

F = TypeVar("F", bound=Callable[..., Any])


def unknown_keyword_error(where: str, unknown: Iterable[str], valid: Iterable[str]
                          ) -> ArgumentError:
    """The error for keywords ``unknown`` given to ``where``, which takes ``valid``."""
    valid = list(valid)
    parts = []
    for k in unknown:
        close = difflib.get_close_matches(k, valid, n=1)
        parts.append(f"'{k}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    s = "s" if len(parts) > 1 else ""
    return ArgumentError(f"{where}: unknown keyword argument{s} {', '.join(parts)}; valid "
                         f"keywords: {', '.join(valid) if valid else 'none'}")


def check_keywords(fn: F) -> F:
    """Decorate ``fn`` so that an unknown keyword raises ``unknown_keyword_error``.

    The check is one set lookup per keyword given; ``fn`` itself must not take
    ``**kwargs`` (there would be nothing to check against).
    """
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        raise TypeError(f"check_keywords: {fn.__qualname__} takes **kwargs")
    valid = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
             and p.name != "self"]
    valid_set = frozenset(valid)
    where = fn.__qualname__.split(".")[-2] if fn.__name__ == "__init__" else fn.__name__

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs and not valid_set.issuperset(kwargs):
            raise unknown_keyword_error(where, [k for k in kwargs if k not in valid_set], valid)
        return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
