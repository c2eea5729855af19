"""``topi.x86``: ``schedule_*(outs)`` for x86 (``tdsl.ops.schedule``)."""
from ._schedules import NAMES, export

export(globals(), "llvm")
__all__ = list(NAMES)
