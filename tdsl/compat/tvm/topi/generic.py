"""``topi.generic``: ``schedule_*(outs)`` for generic (``tdsl.ops.schedule``)."""
from ._schedules import NAMES, export

export(globals(), None)
__all__ = list(NAMES)
