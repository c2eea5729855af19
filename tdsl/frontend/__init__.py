"""tdsl.frontend: PyTorch models as tdsl graphs.

* ``tdsl.compile(model, example_inputs, dynamic=None, options=None)`` (``api.compile``):
  ``torch.export`` -> core ATen -> ``tdsl.graph.Graph`` -> ``compile_graph``;
* ``torch.compile(model, backend="tdsl")`` (``dynamo.backend``, registered by the
  ``torch_dynamo_backends`` entry point): the same import of each graph Dynamo captures;
* ``import_fx`` (``importer``): the FX/core-ATen import itself, its converters in
  ``aten_ops``, symbolic sizes in ``symbols``.

Importing this package imports torch; ``import tdsl`` does not (``tdsl.compile`` is lazy).
"""
from __future__ import annotations

from typing import Callable, Optional

from .api import ExportedModel, compile
from .dynamo import Backend, backend
from .errors import FrontendError, ImportFailure
from .importer import ImportReport, import_fx
from .module import CompiledModel, ModelReport


def opset_supports() -> Optional[Callable]:
    """``tdsl.graph.opset.supports`` (the graph's word on whether it runs an op)."""
    from ..graph.opset import supports
    return supports


__all__ = ["Backend", "CompiledModel", "ExportedModel", "FrontendError", "ImportFailure",
           "ImportReport", "ModelReport", "backend", "compile", "import_fx"]
