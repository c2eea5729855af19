"""Schedule primitives: rewrites of a computation's loop nests (imported as tdsl.schedule)."""
from .schedule import Schedule, create_schedule
from .stage import AttachType, IterAttr, Stage
from .trace import Step, Trace

__all__ = ["Schedule", "Stage", "create_schedule", "Trace", "Step", "AttachType", "IterAttr"]
