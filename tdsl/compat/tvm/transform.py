"""``tvm.transform.PassContext``: accepted and ignored (tdsl's pipeline has no options)."""
from __future__ import annotations

from typing import Any


class PassContext:
    """``with tvm.transform.PassContext(opt_level=3): ...`` — a no-op context."""

    def __init__(self, opt_level: int = 2, required_pass: Any = None, disabled_pass: Any = None,
                 instruments: Any = None, config: Any = None):
        self.opt_level = opt_level
        self.config = dict(config or {})

    def __enter__(self) -> "PassContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    @staticmethod
    def current() -> "PassContext":
        return PassContext()


__all__ = ["PassContext"]
