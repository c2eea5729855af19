"""Errors of the PyTorch import."""
from __future__ import annotations

from ..errors import TDSLError


class FrontendError(TDSLError):
    """The PyTorch import was given something it cannot take (a bad argument, a model
    torch.export cannot trace, ...)."""


class ImportFailure(FrontendError):
    """A whole graph cannot be imported (e.g. a symbolic size tdsl cannot express); the
    Dynamo backend then runs that graph eagerly and says why in its report."""


class Unsupported(Exception):
    """Internal: one FX node has no graph mapping (it becomes a ``torch`` fallback node)."""
