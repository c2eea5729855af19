"""``tdsl.compile(model, example_inputs, dynamic=None, options=None)``: a PyTorch model as
tdsl kernels, without Dynamo.

The route: ``torch.export.export`` (under ``torch.no_grad``) -> ``run_decompositions`` with
the table of ``tdsl.frontend.decomp`` (core ATen, attention and silu kept whole) -> the FX
import (``tdsl.frontend.importer``) -> ``tdsl.graph.compile_graph``.

Parameters and buffers are **snapshotted at compile time** into graph constants (inference,
like Inductor's freezing): they are folded and pre-packed once, and later changes to the
model's weights do not reach the compiled model (compile again).  Run the model in ``eval()``
mode: a model that updates its buffers (BatchNorm in training mode) is refused.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

import torch

from .errors import FrontendError
from .importer import import_fx
from .module import CompiledModel, compile_imported


def compile(model: Any, example_inputs: Any, dynamic: Any = None,
            options: Optional[dict] = None) -> "ExportedModel":
    """Compile ``model`` (an ``nn.Module`` or a function of tensors) for inputs like
    ``example_inputs`` (a tensor or a tuple of them).

    ``dynamic`` makes dimensions symbolic, so one compile serves every size there: for one
    input a dict ``{dim: name}`` (``{0: "batch"}``), else a list/tuple with one such dict (or
    None) per input; equal names are the same size.  ``torch.export.Dim`` objects may stand
    for names, and a dict ``{arg name: spec}`` is passed to ``torch.export`` as it is.
    ``options``: ``db`` (a tuning database for ``compile_graph``), ``num_threads``,
    ``target``, ``layout`` (the convolutions' data layout: "auto", "NCHW" or "NHWC").
    Returns a callable taking and returning torch tensors, with ``.graph`` and ``.report``.
    """
    from . import opset_supports
    from .decomp import export_table
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise FrontendError(f"tdsl.compile: example_inputs must be a tensor or a tuple of "
                            f"tensors, got {type(example_inputs).__name__}")
    example_inputs = tuple(example_inputs)
    module = model if isinstance(model, torch.nn.Module) else _FunctionModule(model)
    dynamic_shapes, names = _dynamic_shapes(dynamic, example_inputs)
    if isinstance(module, _FunctionModule) and isinstance(dynamic_shapes, tuple):
        dynamic_shapes = (dynamic_shapes,)      # forward(*args): one entry, the args tuple
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # torch's own run_decompositions deep-copies a pytree spec that warns about its
            # own deprecated API (torch 2.10+): nothing a user of tdsl can act on
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            ep = torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)
            ep = ep.run_decompositions(export_table())
    except Exception as e:    # torch.export's own errors: a model it cannot trace
        raise FrontendError(f"tdsl.compile: torch.export failed: {type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''}") from e
    sig = ep.graph_signature
    from torch.export.graph_signature import InputKind, OutputKind
    if any(o.kind != OutputKind.USER_OUTPUT for o in sig.output_specs):
        raise FrontendError("tdsl.compile: the model updates its buffers or inputs (a "
                            "BatchNorm in training mode?); call model.eval() first")
    constants, user_pos = {}, []
    for pos, spec in enumerate(sig.input_specs):
        if spec.kind == InputKind.USER_INPUT:
            user_pos.append(pos)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            constants[pos] = ep.state_dict[spec.target] if spec.target in ep.state_dict \
                else ep.constants[spec.target]
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            constants[pos] = ep.constants[spec.target]
        else:
            raise FrontendError(f"tdsl.compile: input kind {spec.kind} is not supported")
    fx_names = {(user_pos[i], d): n for (i, d), n in names.items() if i < len(user_pos)}
    imported = import_fx(ep.graph_module, constants, opset_supports(), fx_names)
    compiled = compile_imported(imported, options)
    return ExportedModel(compiled, ep.call_spec.out_spec, user_pos)


class ExportedModel:
    """``tdsl.compile``'s result: call it like the model (torch tensors in and out)."""

    def __init__(self, compiled: CompiledModel, out_spec: Any, user_pos: list) -> None:
        self.compiled = compiled
        self._out_spec = out_spec
        self._user_pos = user_pos
        self._n = len(compiled.imported.input_index)

    @property
    def graph(self) -> Any:
        return self.compiled.graph

    @property
    def report(self) -> Any:
        return self.compiled.report

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = torch.utils._pytree.tree_leaves(self.compiled(*self._fx_args(args, kwargs)))
        return torch.utils._pytree.tree_unflatten(flat, self._out_spec)

    def profile(self, *args: Any, repeat: int = 10, warmup: int = 2,
                clock: str = "wall") -> Any:
        """Where a call on ``args`` (the model's positional inputs) spends its time: each
        kernel and PyTorch fallback timed on its own, medians of ``repeat`` calls after
        ``warmup`` (``print`` it: a table, slowest first).  ``clock``: "wall", or "cpu" for
        the calling thread's CPU time (``num_threads=1`` on a shared machine)."""
        return self.compiled.profile(*self._fx_args(args, {}), repeat=repeat, warmup=warmup,
                                     clock=clock)

    def _fx_args(self, args: tuple, kwargs: dict) -> list:
        """The exported program's arguments (parameters left None) of a call's inputs."""
        leaves, _ = torch.utils._pytree.tree_flatten((args, kwargs))
        if len(leaves) != len(self._user_pos):
            raise FrontendError(f"compiled model: expected {len(self._user_pos)} inputs, "
                                f"got {len(leaves)}")
        fx_args: list = [None] * self._n
        for pos, t in zip(self._user_pos, leaves):
            fx_args[pos] = t
        return fx_args


class _FunctionModule(torch.nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        if not callable(fn):
            raise FrontendError(f"tdsl.compile: model must be an nn.Module or a function, "
                                f"got {type(fn).__name__}")
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _dynamic_shapes(dynamic: Any, inputs: tuple) -> tuple:
    """``dynamic`` as torch.export's ``dynamic_shapes``, and (input, dim) -> name."""
    if dynamic is None:
        return None, {}
    if isinstance(dynamic, dict) and all(isinstance(k, str) for k in dynamic):
        return dynamic, {}
    per_input = [dynamic] if isinstance(dynamic, dict) else list(dynamic)
    if len(per_input) != len(inputs):
        raise FrontendError(f"tdsl.compile: dynamic has {len(per_input)} entries for "
                            f"{len(inputs)} inputs")
    dims: dict = {}
    names: dict = {}
    specs = []
    for i, spec in enumerate(per_input):
        if spec is None:
            specs.append(None)
            continue
        if not isinstance(spec, dict):
            raise FrontendError(f"tdsl.compile: dynamic[{i}] must be a dict {{dim: name}}")
        out = {}
        for d, name in spec.items():
            if not isinstance(d, int) or not -inputs[i].ndim <= d < inputs[i].ndim:
                raise FrontendError(f"tdsl.compile: input {i} has no dimension {d}")
            d = d % inputs[i].ndim
            if isinstance(name, str):
                if not name.isidentifier():
                    raise FrontendError(f"tdsl.compile: dimension name {name!r} is not an "
                                        f"identifier")
                dims.setdefault(name, torch.export.Dim(name))
                out[d] = dims[name]
                names[(i, d)] = name
            else:
                out[d] = name
                if getattr(name, "__name__", None):
                    names[(i, d)] = name.__name__
        specs.append(out)
    return tuple(specs), names
