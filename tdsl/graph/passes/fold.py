"""Constant folding and batch-norm folding (inference: weights are constants).

* ``fold_constants``: a node whose inputs are all constants is evaluated once, at compile
  time (weight transposes, reshapes, casts, ...), with the op's NumPy evaluator; the node
  is removed and its output becomes a constant.
* ``fold_batch_norm``: a ``batch_norm`` with constant statistics is folded into the
  preceding ``conv2d`` (per output channel, ``tdsl.ops.fold_batch_norm``) or ``dense``
  (per output feature) when it is that op's only reader; otherwise it becomes a per-channel
  ``mul`` by a constant scale and an ``add`` of a constant shift.
"""
from __future__ import annotations

import numpy as np

from tdsl import ops

from .. import opset
from ..ir import Graph, Node, Value, constant
from .rewrite import output_ids, replace_uses


def _np_batch_norm(xs: list, attrs: dict) -> np.ndarray:
    x, g, b, m, v = xs
    scale, shift = bn_scale_shift(g, b, m, v, attrs.get("eps", 1e-5))
    shape = [1] * x.ndim
    shape[attrs.get("axis", 1) % x.ndim] = -1
    return (x * scale.reshape(shape) + shift.reshape(shape)).astype(x.dtype)


def bn_scale_shift(g: np.ndarray, b: np.ndarray, m: np.ndarray, v: np.ndarray,
                   eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Inference batch norm as ``x * scale + shift`` (computed in float64)."""
    g64, b64, m64, v64 = (np.asarray(a, np.float64) for a in (g, b, m, v))
    scale = g64 / np.sqrt(v64 + eps)
    return scale.astype(g.dtype), (b64 - m64 * scale).astype(g.dtype)


def _evaluate(node: Node) -> "np.ndarray | None":
    if node.op == "batch_norm":
        return _np_batch_norm([v.const for v in node.inputs], node.attrs)
    d = opset.OPS.get(node.op)
    if d is None:
        return None
    if d.np_eval is None:   # no NumPy form (conv2d, softmax, ...): one tdsl kernel run
        from ..kernels import evaluate
        return evaluate(node)
    with np.errstate(all="ignore"):
        return np.asarray(d.np_eval([v.const for v in node.inputs], node.attrs))


def fold_constants(graph: Graph) -> int:
    """Evaluate nodes whose inputs are all constants; returns how many were folded."""
    folded = 0
    keep = []
    for n in graph.nodes:
        if (n.op != "torch" and len(n.outputs) == 1 and n.inputs
                and all(v.is_const for v in n.inputs)):
            out = n.outputs[0]
            val = _evaluate(n)
            if val is not None and tuple(val.shape) == tuple(out.shape):
                c = constant(val.astype(out.dtype, copy=False), name=out.name)
                replace_uses(graph, out, c)
                folded += 1
                continue
        keep.append(n)
    graph.nodes = keep
    return folded


def fold_batch_norm(graph: Graph) -> int:
    """Fold each constant-statistics batch_norm (see the module docstring); returns how many
    were folded into a conv2d or dense."""
    users = graph.users()
    outs = output_ids(graph)
    into = 0
    new_nodes: list[Node] = []
    for n in graph.nodes:
        if n.op != "batch_norm" or not all(v.is_const for v in n.inputs[1:]):
            new_nodes.append(n)
            continue
        x = n.inputs[0]
        g, b, m, v = (p.const for p in n.inputs[1:])
        eps = n.attrs.get("eps", 1e-5)
        axis = n.attrs.get("axis", 1) % x.ndim
        p = x.producer
        alone = p is not None and len(users.get(id(x), [])) == 1 and id(x) not in outs
        if alone and p.op in ("conv2d", "dense") and all(w.is_const for w in p.inputs[1:]) \
                and axis == (1 if p.op == "conv2d" else x.ndim - 1):
            w = p.inputs[1].const
            bias = p.inputs[2].const if len(p.inputs) > 2 else None
            if p.op == "conv2d":
                w2, b2 = ops.fold_batch_norm(w, bias, g, b, m, v, eps,
                                             kernel_layout=p.attrs.get("kernel_layout", "OIHW"))
            else:
                scale, shift = bn_scale_shift(g, b, m, v, eps)
                s64 = np.asarray(g, np.float64) / np.sqrt(np.asarray(v, np.float64) + eps)
                w2 = (w.astype(np.float64) * s64[:, None]).astype(w.dtype)
                b0 = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float64)
                b2 = ((b0 - m) * s64 + b).astype(w.dtype)
            out = n.outputs[0]
            p.inputs = [p.inputs[0], constant(w2, p.inputs[1].name + "_bn"),
                        constant(b2, (p.inputs[2].name if len(p.inputs) > 2 else out.name)
                                 + "_bn_bias")]
            p.outputs = [out]
            out.producer = p
            p.attrs["folded"] = tuple(p.attrs.get("folded", ())) + ("batch_norm",)
            into += 1
            continue
        scale, shift = bn_scale_shift(g, b, m, v, eps)
        shape = (-1,) + (1,) * (x.ndim - 1 - axis)
        sc = constant(scale.reshape(shape), n.inputs[1].name + "_scale")
        sh = constant(shift.reshape(shape), n.inputs[2].name + "_shift")
        mid = Value(x.shape, x.dtype, name=n.outputs[0].name + "_scaled")
        new_nodes.append(Node("mul", [x, sc], {"from": "batch_norm"}, [mid]))
        new_nodes.append(Node("add", [mid, sh], {"from": "batch_norm"}, list(n.outputs)))
    graph.nodes = new_nodes
    return into
