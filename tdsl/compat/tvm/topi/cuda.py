"""``topi.cuda``: ``schedule_*(outs)`` for cuda (``tdsl.ops.schedule``)."""
from ._schedules import NAMES, export

export(globals(), "cuda")
__all__ = list(NAMES)
