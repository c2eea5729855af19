"""Dead code elimination and common subexpression elimination."""
from __future__ import annotations

import zlib
from typing import Any, Optional

import numpy as np

from ..ir import Graph, Node, Value
from .rewrite import replace_uses


def eliminate_dead_code(graph: Graph) -> int:
    """Remove nodes none of whose outputs reaches a graph output; returns how many."""
    live = {id(v) for v in graph.outputs}
    keep: list[Node] = []
    for n in reversed(graph.nodes):
        if any(id(v) in live for v in n.outputs):
            keep.append(n)
            live.update(id(v) for v in n.inputs)
    removed = len(graph.nodes) - len(keep)
    graph.nodes = keep[::-1]
    return removed


def _freeze(a: Any) -> Any:
    if isinstance(a, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in a.items()))
    if isinstance(a, (list, tuple)):
        return tuple(_freeze(x) for x in a)
    if isinstance(a, (int, float, str, bool, type(None))):
        return a
    return repr(a)


#: Elements of a constant (evenly spaced) that its checksum reads.
DIGEST_SAMPLE = 4096


class ConstDigests:
    """A checksum of each constant's data, computed once per array (by identity; the
    array is held, so its id is not reused) and only for constants that have a rival of
    the same dtype and shape: the CSE passes run several times over the same weights,
    which can be hundreds of megabytes.  The checksum reads ``DIGEST_SAMPLE`` evenly
    spaced elements, not the whole array: it only sorts out the candidates, and the
    bytes decide every merge."""

    def __init__(self) -> None:
        self._sums: dict[int, tuple[np.ndarray, int]] = {}
        self.computed = 0      # how many arrays were checksummed (for tests)

    def __call__(self, a: np.ndarray) -> int:
        hit = self._sums.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        flat = a.reshape(-1)
        step = max(1, flat.size // DIGEST_SAMPLE)
        sample = np.ascontiguousarray(flat[::step][:DIGEST_SAMPLE])
        s = zlib.crc32(sample.view(np.uint8)) if sample.size else 0
        self._sums[id(a)] = (a, s)
        self.computed += 1
        return s


def _merge_constant(graph: Graph, v: Value, groups: dict, digest: ConstDigests) -> bool:
    """Replace ``v`` by an earlier equal constant (True), or record it as the first of
    its data.  Constants are grouped by dtype and shape; the data is compared (checksum,
    then the bytes) only inside a group of two or more."""
    group = groups.setdefault((str(v.const.dtype), v.const.shape), [])
    if any(u is v for u in group):
        return False
    if group:
        d = digest(v.const)
        for u in group:
            # bytes, not array_equal: -0.0 and 0.0 (the sign of x / w's infinities) differ
            if digest(u.const) == d and u.const.tobytes() == v.const.tobytes():
                replace_uses(graph, v, u)
                return True
    group.append(v)
    return False


def eliminate_common_subexpressions(graph: Graph, digest: Optional[ConstDigests] = None
                                    ) -> int:
    """Merge equal constants (same dtype, shape and data) and nodes with the same op,
    inputs and attrs (never fallbacks: a PyTorch op may not be pure); returns how many
    nodes and constants were merged.  ``digest``: the constants' checksums, shared by
    the passes of one ``optimize`` (each CSE pass would otherwise read every weight)."""
    merged = 0
    digest = digest if digest is not None else ConstDigests()
    groups: dict[tuple, list] = {}
    seen: dict[tuple, Node] = {}
    keep: list[Node] = []
    for n in graph.nodes:
        for v in list(n.inputs):
            if v.is_const and _merge_constant(graph, v, groups, digest):
                merged += 1
        if n.op == "torch":
            keep.append(n)
            continue
        key = (n.op, tuple(id(v) for v in n.inputs), _freeze(n.attrs))
        prev = seen.get(key)
        if prev is not None and len(prev.outputs) == len(n.outputs):
            for a, b in zip(n.outputs, prev.outputs):
                replace_uses(graph, a, b)
            merged += 1
            continue
        seen[key] = n
        keep.append(n)
    graph.nodes = keep
    return merged
