"""``tvm.transform.PassContext``: tdsl's pipeline has no pass options, so ``opt_level`` and
the pass lists are accepted and ignored; ``config`` is read by what TVM reads it for
(``te.keep_schedule_record``: ``create_schedule``).  The innermost ``with`` context is
``PassContext.current()`` (a context variable: per thread and task)."""
from __future__ import annotations

import contextvars
from typing import Any

_CURRENT: "contextvars.ContextVar[tuple]" = contextvars.ContextVar("tdsl_compat_pass_ctx",
                                                                   default=())


class PassContext:
    """``with tvm.transform.PassContext(opt_level=3, config={...}): ...``."""

    def __init__(self, opt_level: int = 2, required_pass: Any = None, disabled_pass: Any = None,
                 instruments: Any = None, config: Any = None):
        self.opt_level = opt_level
        self.config = dict(config or {})
        self._tokens: list = []

    def __enter__(self) -> "PassContext":
        self._tokens.append(_CURRENT.set(_CURRENT.get() + (self,)))
        return self

    def __exit__(self, *exc: Any) -> None:
        _CURRENT.reset(self._tokens.pop())

    @staticmethod
    def current() -> "PassContext":
        """The innermost context entered, else a default one."""
        stack = _CURRENT.get()
        return stack[-1] if stack else PassContext()


__all__ = ["PassContext"]
