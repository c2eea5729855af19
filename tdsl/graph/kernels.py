"""A fused group of graph nodes -> one compiled tdsl kernel.

``declare`` makes a placeholder per group input (0-d constants become immediates), runs
the ops' builders in order and returns the output tensor; ``build_kernel`` schedules it
with ``tdsl.ops.schedule`` (which fuses what it recognizes: an anchor's elementwise
epilogue, row groups, inlined injective stages) and compiles it with ``td.build``.

Symbolic sizes: a placeholder dimension that is a derived expression (``s0 * 128`` after a
reshape) cannot be bound from an argument's shape, so each distinct one is declared as a
fresh size variable of the kernel; plain size variables are shared as they are.

Identical groups (same compute graph up to names and size variables: ``structural_hash``)
build once per process (``KERNEL_CACHE``): a ResNet's repeated blocks compile one kernel.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import tdsl as td
from tdsl import ops
from tdsl.errors import TDSLError
from tdsl.expr import Const, Expr, Var
from tdsl.lru import LRU, env_entries
from tdsl.schedule import create_schedule
from tdsl.structural import structural_hash
from tdsl.tensor import Tensor
from tdsl.visitor import free_vars

from . import opset
from .ir import GraphError, Node, Value

#: Built kernels by structural hash of (placeholders, output) and target.
KERNEL_CACHE: "LRU[tuple, Any]" = LRU(lambda: env_entries("TDSL_GRAPH_KERNEL_CACHE", 512))


@dataclass(eq=False)
class Kernel:
    """One compiled kernel: its argument Values (inputs in order, then the output)."""

    name: str
    nodes: list                      # the graph nodes it computes, in order
    inputs: list                     # Values passed as arguments (no 0-d constants)
    output: Value
    module: Any = None
    key: tuple = ()
    cached: bool = False             # built earlier (same structure): no compile this time
    build_s: float = 0.0
    tensors: list = field(default_factory=list)   # placeholders + output (for tuning)
    note: str = ""                                # why the kernel is not as scheduled

    @property
    def ops(self) -> list[str]:
        out = []
        for n in self.nodes:
            out.append(n.op)
            out.extend(f"{f}(folded)" for f in n.attrs.get("folded", ()))
        return out


def _dim_vars(shapes: Sequence[tuple]) -> dict:
    """Derived (non-Var, non-constant) dimensions that the kernel could not bind (some
    variable of theirs is no plain dimension of any input) -> one fresh size variable
    each.  The others stay as they are, so that they still equal the same expressions
    computed inside the kernel (a reshape's ``n * 4``)."""
    plain = {id(d) for shape in shapes for d in shape if isinstance(d, Var)}
    fresh: dict[str, Var] = {}
    for shape in shapes:
        for d in shape:
            if isinstance(d, Expr) and not isinstance(d, (Var, Const)):
                if all(id(v) in plain for v in free_vars(d)):
                    continue
                key = str(d)
                if key not in fresh:
                    fresh[key] = td.var(f"d{len(fresh)}")
    return fresh


def declare(nodes: Sequence[Node], inputs: Sequence[Value], output: Value
            ) -> tuple[list[Tensor], Tensor]:
    """The group's placeholders (one per non-scalar input, in order) and output tensor."""
    fresh = _dim_vars([v.shape for v in inputs if not opset.is_scalar(v)])
    env: dict[int, Any] = {}
    phs: list[Tensor] = []
    for k, v in enumerate(inputs):
        if opset.is_scalar(v):
            env[id(v)] = opset.scalar_of(v)
            continue
        if v.ndim == 0:
            raise GraphError(f"graph: %{v.name} is a 0-d tensor that is not a constant; "
                             f"tdsl kernels take tensors of rank >= 1")
        shape = [fresh.get(str(d), d) if isinstance(d, Expr) else d for d in v.shape]
        ph = td.placeholder(shape, v.dtype, name=f"in{k}")
        env[id(v)] = ph
        phs.append(ph)
    for n in nodes:
        operands = []
        for v in n.inputs:
            if id(v) in env:
                operands.append(env[id(v)])
            elif opset.is_scalar(v):
                operands.append(opset.scalar_of(v))
            else:
                raise GraphError(f"graph: kernel input %{v.name} of {n!r} is not declared")
        env[id(n.outputs[0])] = opset.build(n.op, operands, n.attrs)
    out = env.get(id(output))
    if not isinstance(out, Tensor) or any(out is p for p in phs):
        raise GraphError(f"graph: kernel output %{output.name} is not computed by its nodes")
    if str(out.dtype) != output.dtype:
        out = ops.cast(out, output.dtype)
    return phs, out


def declare_kernel(name: str, nodes: Sequence[Node], inputs: Sequence[Value],
                   output: Value, target: Any = "llvm", cache: bool = True) -> Kernel:
    """The group's Kernel with its compute declared and its cache key; the module is set
    when a kernel of the same structure was built before (``compile_kernel`` builds it).
    ``cache=False``: never take a module from ``KERNEL_CACHE`` (a build under tuning
    records must not reuse a kernel built with the default schedule)."""
    args = [v for v in inputs if not opset.is_scalar(v)]
    phs, out = declare(nodes, inputs, output)
    key = (structural_hash([*phs, out]), str(target))
    k = Kernel(name, list(nodes), args, output, key=key, tensors=[*phs, out])
    mod = KERNEL_CACHE.get(key) if cache else None
    if mod is not None:
        k.module, k.cached = mod, True
    return k


def compile_kernel(k: Kernel, target: Any = "llvm", cache: bool = True) -> Kernel:
    """Schedule (``ops.schedule``) and build ``k`` (thread-safe: LLVM's code generation
    runs outside the GIL, so kernels may be built on several threads).  ``cache=False``:
    keep the module out of ``KERNEL_CACHE`` (it was built under tuning records)."""
    if k.module is not None:
        return k
    t0 = time.perf_counter()
    phs, out = k.tensors[:-1], k.tensors[-1]
    try:
        s = ops.schedule(out, target)
        k.module = td.build(s, [*phs, out], target=target, name=_c_name(k.name))
    except TDSLError as e:
        # a default schedule that does not apply to this mix: the plain one (injective
        # stages inlined, nothing else) is slower but always valid
        s = create_schedule([out.op])
        ops.inline_injective(s)
        k.module = td.build(s, [*phs, out], target=target, name=_c_name(k.name))
        k.note = f"default schedule failed ({type(e).__name__}: {e}); built unscheduled"
    k.build_s = time.perf_counter() - t0
    if cache:
        KERNEL_CACHE.put(k.key, k.module)
    return k


def build_kernel(name: str, nodes: Sequence[Node], inputs: Sequence[Value], output: Value,
                 target: Any = "llvm") -> Kernel:
    """Declare, schedule and build a group (or take it from ``KERNEL_CACHE``)."""
    return compile_kernel(declare_kernel(name, nodes, inputs, output, target), target)


def _c_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name) or "kernel"


def evaluate(node: Node, target: Any = "llvm") -> Optional[Any]:
    """Run one node whose inputs are all constants (static shapes) once; its output array."""
    import numpy as np
    out = node.outputs[0]
    if not out.is_static or any(not v.is_static for v in node.inputs):
        return None
    k = build_kernel(f"fold_{node.op}", [node], node.inputs, out, target)
    res = np.empty([int(d) for d in out.shape], dtype=out.dtype)
    k.module(*[v.const for v in k.inputs], res)
    return res
