"""Lowering: a schedule to the loop IR (bound inference, loop nests, passes)."""
from .lower import lower

__all__ = ["lower"]
