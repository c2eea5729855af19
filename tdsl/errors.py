"""Error types raised by tdsl on purpose.

User errors (bad schedules, shapes, arguments) derive from ``TDSLError`` and the
matching built-in, so ``except ValueError`` keeps working for code that predates
tdsl.  ``TDSLError`` itself is a ``RuntimeError``, as TVM's ``TVMError`` is, so TVM code
that catches ``RuntimeError`` (or ``pytest.raises(RuntimeError)``) sees tdsl's errors.  ``InternalError`` is a compiler bug: it says so, and is not the user's fault.
"""
from __future__ import annotations


class TDSLError(RuntimeError):
    """Base class of every error tdsl raises on purpose."""


class DTypeError(TDSLError, TypeError):
    """Mixing dtypes without a cast, or an unsupported dtype."""


class ArgumentError(TDSLError, TypeError):
    """A call with an unknown keyword argument (a misspelling is never silently ignored)."""


class ShapeError(TDSLError, ValueError):
    """A shape, index count, stride or symbolic binding that does not fit."""


class ScheduleError(TDSLError, ValueError):
    """An illegal schedule primitive call.

    The message names the primitive, the stage, the loop and the reason.
    """

    def __init__(self, primitive: str, stage: str | None, reason: str, loop: str | None = None):
        self.primitive = primitive
        self.stage = stage
        self.loop = loop
        self.reason = reason
        where = f"stage '{stage}'" if stage else "schedule"
        if loop:
            where += f", loop '{loop}'"
        super().__init__(f"{primitive}: {where}: {reason}")


class LoweringError(TDSLError, ValueError):
    """A schedule that is legal step by step but cannot be lowered as a whole."""


class BuildError(TDSLError, RuntimeError):
    """Code generation or native compilation failed."""


class TuningError(TDSLError, RuntimeError):
    """Autotuning failed: malformed records, no valid candidate, bad task."""


class InternalError(TDSLError, AssertionError):
    """A tdsl bug, not a user error: please report it with the message."""

    def __init__(self, message: str):
        super().__init__(f"internal compiler error (a tdsl bug, please report): {message}")
