"""The Dynamo backend: ``torch.compile(model, backend="tdsl")``.

Registered by the ``torch_dynamo_backends`` entry point in pyproject.toml.  Each graph Dynamo
captures goes through ``aot_autograd`` with the table of ``tdsl.frontend.decomp`` (core
ATen, functionalized; with ``dynamic=True`` or ``mark_dynamic`` its sizes are SymInts of
Dynamo's own shape environment, so the only recompiles are Dynamo's guards), then the FX
import and ``tdsl.graph.compile_graph``.

Inference only: parameters and buffers are snapshotted at compile time into constants (like
Inductor's freezing).  In grad mode with inputs that require grad (training), the graph runs
eagerly -- the backend returns Dynamo's graph unchanged, with a report entry -- as it does for
a graph the import cannot take; an answer is never wrong.

``Backend(options)`` is the same backend keeping what it compiled (``.compiles``, one
``ModelReport`` per graph), e.g. to count Dynamo's recompiles.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ..errors import TDSLError
from .module import ModelReport


def backend(gm: torch.fx.GraphModule, example_inputs: list, options: Optional[dict] = None
            ) -> Callable:
    """The ``"tdsl"`` Dynamo backend (``options``: ``db``, ``num_threads``, ``layout``)."""
    return _compile(gm, example_inputs, options, None)


class Backend:
    """The backend as an object that records each graph it compiles (``.compiles``)."""

    def __init__(self, options: Optional[dict] = None) -> None:
        self.options = options
        self.compiles: list = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list,
                 options: Optional[dict] = None) -> Callable:
        return _compile(gm, example_inputs, options or self.options, self.compiles)


def _is_weight(node: torch.fx.Node, example: Any) -> bool:
    """A parameter or buffer of the module Dynamo traced (not a user input)."""
    if isinstance(example, torch.nn.Parameter):
        return True
    ga = node.meta.get("grapharg")
    src = getattr(ga, "source", None)
    name = getattr(src, "name", "") if src is not None else ""
    name = name() if callable(name) else str(name)
    return "._buffers[" in name or "._parameters[" in name


def _compile(gm: torch.fx.GraphModule, example_inputs: list, options: Optional[dict],
             log: Optional[list]) -> Callable:
    report = ModelReport()
    if log is not None:
        log.append(report)
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                       for x in example_inputs):
        report.eager.append("grad mode with inputs that require grad (training): tdsl "
                            "compiles inference only; run under torch.no_grad() or "
                            "torch.inference_mode()")
        return gm.forward
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weights = {i for i, (n, x) in enumerate(zip(placeholders, example_inputs))
               if isinstance(x, torch.Tensor) and _is_weight(n, x)}

    def fw_compiler(agm: torch.fx.GraphModule, fake_inputs: list) -> Callable:
        from torch._functorch.aot_autograd import make_boxed_func
        from torch._guards import TracingContext
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from . import opset_supports
        from .importer import import_fx
        from .module import compile_imported
        apl = [n for n in agm.graph.nodes if n.op == "placeholder"]
        try:
            if len(apl) != len(example_inputs):
                raise _Eager(f"aot_autograd changed the inputs ({len(example_inputs)} -> "
                             f"{len(apl)})")
            tc = TracingContext.try_get()
            meta = getattr(tc, "fw_metadata", None) if tc is not None else None
            mutated = {i for i, info in enumerate(getattr(meta, "input_info", []) or [])
                       if getattr(info, "mutates_data", False)
                       or getattr(info, "mutates_metadata", False)}
            constants = {i: example_inputs[i] for i in weights - mutated}
            with unset_fake_temporarily():    # constants and builds are real tensors
                imported = import_fx(agm, constants, opset_supports())
                compiled = compile_imported(imported, options)
        except (_Eager, TDSLError) as e:
            report.eager.append(f"{type(e).__name__}: {e}")
            return make_boxed_func(agm)
        report.imported, report.graph = compiled.report.imported, compiled.report.graph
        report.compile_s = compiled.report.compile_s
        fn = make_boxed_func(compiled)
        fn.report = report
        fn.graph = compiled.graph
        return fn

    from torch._dynamo.backends.common import aot_autograd

    from .decomp import aot_table
    return aot_autograd(fw_compiler=fw_compiler, decompositions=aot_table())(gm, example_inputs)


class _Eager(Exception):
    """Internal: run this graph eagerly."""
