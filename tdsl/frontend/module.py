"""A compiled model: the imported graph built by ``tdsl.graph.compile_graph``, called with
torch tensors.

``CompiledModel(imported, ...)`` takes the FX graph's inputs in placeholder order (constants
and SymInt placeholders are skipped: symbolic sizes are bound from the input tensors'
shapes), hands contiguous CPU tensors to the kernels without a copy (``Tensor.numpy()``) and
wraps the results with ``torch.from_numpy`` (no copy either).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ..errors import DTypeError, ShapeError, TDSLError
from .importer import Imported, ImportReport


@dataclass
class ModelReport:
    """What compiling a model did: the import's mapped ops and fallbacks, the graph's own
    report (kernels, fused ops), and for the Dynamo backend the graphs run eagerly and why."""

    imported: Optional[ImportReport] = None
    graph: Any = None
    eager: list = field(default_factory=list)      # reasons a graph runs eagerly
    compile_s: float = 0.0

    @property
    def fallbacks(self) -> dict:
        """ATen op name -> how many calls run in PyTorch."""
        return dict(self.imported.fallbacks) if self.imported else {}

    def __str__(self) -> str:
        lines = []
        if self.eager:
            lines += [f"runs eagerly: {r}" for r in self.eager]
        if self.imported is not None:
            lines.append(str(self.imported))
        if self.graph is not None:
            lines.append(str(self.graph))
        lines.append(f"compile: {self.compile_s:.2f} s")
        return "\n".join(lines)


class CompiledModel:
    """Calls a compiled graph with torch tensors; ``.graph`` is the kernel-level graph,
    ``.report`` a ``ModelReport``."""

    def __init__(self, imported: Imported, compiled: Any, report: ModelReport) -> None:
        self.imported = imported
        self.compiled = compiled
        self.report = report
        g = imported.graph
        self._n_fx = len(imported.input_index)
        self._take = [(pos, k) for pos, k in enumerate(imported.input_index) if k is not None]
        self._dtypes = [_torch_dtype(v.dtype) for v in g.inputs]
        self._checks: list = []     # (input k, dim, int) static sizes
        self._syms: list = []       # (input k, dim, symbol) first source of each symbol
        self._same: list = []       # (input k, dim, symbol) other dims the symbol must equal
        first: dict = {}
        for k, v in enumerate(g.inputs):
            for d, s in enumerate(v.shape):
                if isinstance(s, (int, np.integer)):
                    self._checks.append((k, d, int(s)))
        sym_of = {id(var): sym for sym, var in imported.symbols.vars.items()}
        for k, v in enumerate(g.inputs):
            for d, s in enumerate(v.shape):
                sym = sym_of.get(id(s))
                if sym is not None:
                    if sym in first:
                        self._same.append((k, d, sym))
                    else:
                        first[sym] = (k, d)
                        self._syms.append((k, d, sym))
        self._needs_binding = any(o[0] == "sym" for o in imported.outputs)

    @property
    def graph(self) -> Any:
        """The kernel-level graph (``print`` shows each kernel and the fallbacks)."""
        return getattr(self.compiled, "graph", self.imported.graph)

    def __call__(self, *args: Any) -> Any:
        tensors, arrays = self._arrays(args)
        outs = self.compiled(*arrays)
        return self._outputs(outs, tensors, arrays)

    def profile(self, *args: Any, repeat: int = 10, warmup: int = 2,
                clock: str = "wall") -> Any:
        """Per-kernel times of a call on ``args`` (``tdsl.graph.profile.GraphProfile``:
        ``print`` it for a table, slowest first); see ``CompiledGraph.profile``."""
        if not hasattr(self.compiled, "profile"):
            raise TDSLError("compiled model: this build has no kernel graph to profile")
        return self.compiled.profile(*self._arrays(args)[1], repeat=repeat, warmup=warmup,
                                     clock=clock)

    def _arrays(self, args: Sequence[Any]) -> tuple[list, list]:
        """The graph's input tensors of a call's arguments, and their checked arrays."""
        if len(args) != self._n_fx:
            raise ShapeError(f"compiled model: expected {self._n_fx} arguments, "
                             f"got {len(args)}")
        tensors = [args[pos] for pos, _ in self._take]
        arrays = [self._array(k, t) for k, t in enumerate(tensors)]
        self._check(arrays)
        return tensors, arrays

    def _array(self, k: int, t: Any) -> np.ndarray:
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"compiled model: input {k} is a {type(t).__name__}, "
                             f"not a torch tensor")
        if t.dtype != self._dtypes[k] or t.device.type != "cpu":
            raise DTypeError(f"compiled model: input {k} is {t.dtype} on {t.device}; "
                             f"compiled for {self._dtypes[k]} on the CPU")
        if t.requires_grad:
            t = t.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        return t.numpy()

    def _check(self, arrays: Sequence[np.ndarray]) -> None:
        g = self.imported.graph
        for k, a in enumerate(arrays):
            if a.ndim != g.inputs[k].ndim:
                raise ShapeError(f"compiled model: input {k} has rank {a.ndim}, compiled "
                                 f"for {g.inputs[k].ndim}")
        for k, d, n in self._checks:
            if arrays[k].shape[d] != n:
                raise ShapeError(f"compiled model: input {k} has size {arrays[k].shape[d]} "
                                 f"in dimension {d}; compiled for {n} (make it dynamic to "
                                 f"vary it)")
        if self._same:
            bound = {sym: arrays[k].shape[d] for k, d, sym in self._syms}
            for k, d, sym in self._same:
                if arrays[k].shape[d] != bound[sym]:
                    raise ShapeError(f"compiled model: input {k} dimension {d} must equal "
                                     f"{bound[sym]} (the same symbolic size {sym})")

    def _outputs(self, outs: Sequence[Any], tensors: list, arrays: list) -> Any:
        g = self.imported.graph
        binding = ({sym: arrays[k].shape[d] for k, d, sym in self._syms}
                   if self._needs_binding else {})
        leaves = []
        for kind, x in self.imported.outputs:
            if kind == "graph":
                o = outs[x]
                leaves.append(o if isinstance(o, torch.Tensor) else torch.from_numpy(o))
            elif kind == "alias":
                idx = next((i for i, v in enumerate(g.inputs) if v is x), None)
                leaves.append(tensors[idx] if idx is not None
                              else torch.from_numpy(np.array(x.const, copy=True)))
            elif kind == "sym":
                leaves.append(int(x.xreplace(binding)))
            else:
                leaves.append(x)
        return torch.utils._pytree.tree_unflatten(leaves, self.imported.out_spec)


def _torch_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise DTypeError(f"compiled model: dtype {name} has no torch counterpart")
    return dt


def _layout(opts: dict) -> dict:
    """The ``layout`` option ("auto", "NCHW", "NHWC": ``tdsl.graph.passes.layout``) for
    ``compile_graph``, when given."""
    return {"layout": opts["layout"]} if opts.get("layout") is not None else {}


def compile_imported(imported: Imported, options: Optional[dict]) -> CompiledModel:
    """Build an imported graph with ``tdsl.graph.compile_graph``."""
    import time

    from ..graph import compile_graph
    opts = dict(options or {})
    t0 = time.perf_counter()
    cg = compile_graph(imported.graph, target=opts.get("target", "llvm"), db=opts.get("db"),
                       num_threads=opts.get("num_threads"), **_layout(opts))
    report = ModelReport(imported=imported.report, graph=getattr(cg, "report", None),
                         compile_s=time.perf_counter() - t0)
    return CompiledModel(imported, cg, report)
