"""Random computations for the schedule fuzzer, as Python source plus a NumPy reference.

A computation is a pipeline of 2-4 stages over an ``(N, M)`` grid (each size a constant
or a ``td.var``): elementwise producers, stencils reading ``P[i+1]``/``P[i-1]`` under
``if_then_else`` guards, matmul-like reductions (``sum_k P[i, k] * W[k, j]``), a
multi-output compute, and two reductions sharing one ``reduce_axis`` object.  The
computation is generated as source text and built by ``exec`` so that a failing example
prints a script that rebuilds exactly what ran.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

import tdsl as td

KINDS = ("ew", "stencil_j", "stencil_i", "reduce", "multi", "shared_k")


@dataclasses.dataclass
class Computation:
    """Source of a pipeline, the namespace it was built in, and its NumPy reference.

    ``tensors`` names the tensor variables of the compute stages (producers first);
    ``gemv_stages`` those of the form ``sum_k X[i, k] * W[k, j]`` (tensorize targets);
    ``symbolic`` the names of the size variables (``"n"``, ``"m"``); ``const`` the
    constant sizes.
    """

    source: str
    ns: dict
    tensors: list
    inputs: list
    output: str
    gemv_stages: list
    symbolic: tuple
    const: dict
    reference: Callable[[dict, dict], np.ndarray]

    def __repr__(self) -> str:
        return "Computation(\n" + self.source + "\n)"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:   # how hypothesis shows it
        p.text(repr(self))

    @property
    def args(self) -> list:
        return [self.ns[v] for v in self.inputs] + [self.ns[self.output]]

    def sizes(self, binding: dict) -> tuple[int, int]:
        n = binding["n"] if "n" in self.symbolic else self.const["N"]
        m = binding["m"] if "m" in self.symbolic else self.const["M"]
        return n, m

    def input_shapes(self, binding: dict) -> dict:
        n, m = self.sizes(binding)
        return {"A": (n, m), "W": (m, m)}


def _read(var: str, multi: bool, i: str, j: str) -> str:
    """Source reading the previous stage at (i, j); a multi-output stage is read as X0 + X1."""
    return f"({var}0[{i}, {j}] + {var}1[{i}, {j}])" if multi else f"{var}[{i}, {j}]"


@st.composite
def computations(draw: Any, symbolic: "bool | None" = None, reduce: bool = False) -> Computation:
    """Draw a pipeline of 2-4 stages; ``symbolic``: True for at least one ``td.var`` size,
    False for constant sizes only, None for either; ``reduce``: include a reduction."""
    n_sym = draw(st.booleans()) if symbolic is not False else False
    m_sym = draw(st.booleans()) if symbolic is not False else False
    if symbolic and not (n_sym or m_sym):
        n_sym = True
    N = draw(st.integers(1, 9))
    M = draw(st.integers(1, 9))
    dims = ("n" if n_sym else "N", "m" if m_sym else "M")
    lines = ["N, M = %d, %d" % (N, M)]
    if n_sym:
        lines.append('n = td.var("n")')
    if m_sym:
        lines.append('m = td.var("m")')
    nd, md = dims
    lines.append(f'A = td.placeholder(({nd}, {md}), name="A")')
    uses_w = False
    kinds = []
    total = draw(st.integers(2, 4))
    while len(kinds) < total:
        kind = draw(st.sampled_from(KINDS))
        if kind == "shared_k" and len(kinds) + 2 > total:
            continue
        if reduce and len(kinds) == total - 1 and not {"reduce", "shared_k"} & set(kinds):
            kind = draw(st.sampled_from(["reduce", "shared_k"])) if total - len(kinds) >= 2 \
                else "reduce"
        kinds.append(kind)
        if kind == "shared_k":
            kinds.append("shared_k2")
    # default-named stages ("compute") are drawn too; the shrinker prefers explicit names
    default_named = draw(st.lists(st.booleans(), min_size=len(kinds), max_size=len(kinds)))
    named = [not d for d in default_named]
    tensors: list[str] = []
    gemv: list[str] = []
    steps: list[tuple] = []           # for the reference: (kind, multi_in)
    prev, prev_multi = "A", False
    letters = "BCDEFG"
    for idx, kind in enumerate(kinds):
        var = letters[idx]
        name = f', name="{var}"' if named[idx] else ""
        r = lambda i, j: _read(prev, prev_multi, i, j)   # noqa: E731
        multi = False
        if kind == "ew":
            c = draw(st.sampled_from(["1.5", "-0.5", "2.0"]))
            body = f"{r('i', 'j')} * {c} + A[i, j]"
            lines.append(f"{var} = td.compute(({nd}, {md}), lambda i, j: {body}{name})")
            steps.append(("ew", float(c)))
        elif kind in ("stencil_j", "stencil_i"):
            ax, ext = ("j", md) if kind == "stencil_j" else ("i", nd)
            plus = r("i", "j + 1") if ax == "j" else r("i + 1", "j")
            minus = r("i", "j - 1") if ax == "j" else r("i - 1", "j")
            body = (f"{r('i', 'j')} + td.if_then_else({ax} + 1 < {ext}, {plus}, 0.0) * 0.5"
                    f" - td.if_then_else({ax} >= 1, {minus}, 0.0) * 0.25")
            lines.append(f"{var} = td.compute(({nd}, {md}), lambda i, j: {body}{name})")
            steps.append((kind,))
        elif kind == "reduce":
            uses_w = True
            lines.append(f'k{var} = td.reduce_axis((0, {md}), name="k{var.lower()}")')
            body = f"td.sum({r('i', f'k{var}')} * W[k{var}, j], axis=k{var})"
            lines.append(f"{var} = td.compute(({nd}, {md}), lambda i, j: {body}{name})")
            steps.append(("reduce",))
            if not prev_multi:
                gemv.append(var)
        elif kind == "multi":
            mname = f', name="{var}"' if named[idx] else ""
            lines.append(f"{var}0, {var}1 = td.compute(({nd}, {md}), lambda i, j: "
                         f"({r('i', 'j')} * 2.0, {r('i', 'j')} - 1.0){mname})")
            steps.append(("multi",))
            multi = True
        elif kind == "shared_k":
            uses_w = True
            lines.append(f'ks = td.reduce_axis((0, {md}), name="ks")')
            body = f"td.sum({r('i', 'ks')} * W[ks, j], axis=ks)"
            lines.append(f"{var} = td.compute(({nd}, {md}), lambda i, j: {body}{name})")
            steps.append(("reduce",))
            if not prev_multi:
                gemv.append(var)
        elif kind == "shared_k2":          # a second compute with the same reduce_axis object
            body = f"td.sum({r('i', 'ks')} * W[ks, j], axis=ks)"
            lines.append(f"{var} = td.compute(({nd}, {md}), lambda i, j: {body}{name})")
            steps.append(("reduce",))
            gemv.append(var)
        if multi:
            tensors.append(var + "0")
        else:
            tensors.append(var)
        prev, prev_multi = var, multi
    if prev_multi:                          # the output is a single tensor: combine X0, X1
        var = letters[len(kinds)]
        lines.append(f"{var} = td.compute(({nd}, {md}), lambda i, j: "
                     f"{_read(prev, True, 'i', 'j')} * 0.5, name=\"{var}\")")
        steps.append(("combine",))
        tensors.append(var)
    if uses_w:
        lines.insert(lines.index(f'A = td.placeholder(({nd}, {md}), name="A")') + 1,
                     f'W = td.placeholder(({md}, {md}), name="W")')
    source = "\n".join(lines)
    ns: dict = {"td": td}
    exec(source, ns)   # noqa: S102 - the source is generated above
    inputs = ["A"] + (["W"] if uses_w else [])

    def reference(arrays: dict, binding: dict) -> np.ndarray:
        a = arrays["A"].astype(np.float64)
        w = arrays["W"].astype(np.float64) if "W" in arrays else None
        p: Any = a
        for step in steps:
            if step[0] == "ew":
                p = p * step[1] + a
            elif step[0] in ("stencil_j", "stencil_i"):
                ax = 1 if step[0] == "stencil_j" else 0
                plus = np.zeros_like(p)
                minus = np.zeros_like(p)
                if ax == 1:
                    plus[:, :-1] = p[:, 1:]
                    minus[:, 1:] = p[:, :-1]
                else:
                    plus[:-1, :] = p[1:, :]
                    minus[1:, :] = p[:-1, :]
                p = p + plus * 0.5 - minus * 0.25
            elif step[0] == "reduce":
                p = p @ w
            elif step[0] == "multi":
                p = p * 2.0 + (p - 1.0)            # later stages read X0 + X1
            elif step[0] == "combine":
                p = p * 0.5
        return p

    return Computation(source, ns, tensors, inputs, tensors[-1], gemv,
                       tuple(d for d in dims if d.islower()), {"N": N, "M": M}, reference)
