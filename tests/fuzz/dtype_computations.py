"""Random mixed-dtype pipelines for the schedule fuzzer (trees from tests/fuzz/dtype_exprs.py).

A pipeline reads 1-3 inputs of random dtypes through 2-3 stages of random dtypes: ``S1``
from the inputs, ``S2`` (and ``S3``) from the inputs and the stage before (a plain read at
``[i, j]`` plus whatever the tree reads, shifted reads guarded).  Lifted reductions become
stages of their own, which the fuzzer schedules too (``S1_ra`` ...).  The intermediate
``S1`` may be an argument of the built function besides the output (then both are
compared).  The source is exec'd, so a failure prints a script that rebuilds it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hypothesis import strategies as st

import tdsl as td

from .computations import Computation
from .dtype_exprs import DTYPES, FLOATS, INTS, Gen, Load, Node, Options, evaluate, np_dtype


@dataclasses.dataclass(repr=False)
class DtypeComputation(Computation):
    """A ``Computation`` with several outputs of several dtypes.

    ``arg_names``: the built function's arguments (inputs, then the stages passed as
    arguments); ``outputs``: the names of its computed arguments; ``nodes`` their trees;
    ``dtypes`` every tensor's dtype.
    """

    arg_names: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    nodes: dict = dataclasses.field(default_factory=dict)
    dtypes: dict = dataclasses.field(default_factory=dict)

    @property
    def args(self) -> list:
        return [self.ns[v] for v in self.arg_names]

    def input_arrays(self, rng: np.random.Generator, binding: dict) -> dict:
        """Non-zero inputs: integers in +-[1, 9] (unsigned [1, 9]), floats multiples of 0.5
        in +-[0.5, 4.5], random booleans."""
        n, m = self.sizes(binding)
        out = {}
        for name in self.inputs:
            dt = self.dtypes[name]
            if dt == "bool":
                out[name] = rng.integers(0, 2, (n, m)).astype(bool)
                continue
            mag = rng.integers(1, 10, (n, m))
            if dt in FLOATS:
                out[name] = (mag * rng.choice([-0.5, 0.5], (n, m))).astype(np_dtype(dt))
            else:
                sign = rng.choice([-1, 1], (n, m)) if dt[0] != "u" else 1
                out[name] = (mag * sign).astype(dt)
        return out

    def expected(self, arrays: dict, binding: dict) -> dict:
        """Every computed argument, evaluated by NumPy (stage by stage)."""
        n, m = self.sizes(binding)
        env = dict(arrays)
        for name, node in self.nodes.items():
            env[name] = evaluate(node, env, n, m)
        return {name: env[name] for name in self.outputs}


def _stage(draw: Any, opts: Options, name: str, loads: list, extents: dict, counter: list,
           lines: list, prev: "Load | None") -> Node:
    gen = Gen(draw, opts, loads, extents, counter, lines)
    dt = draw(st.sampled_from(DTYPES), label=f"{name} dtype")
    depth = draw(st.integers(1, 3), label=f"{name} depth")
    tree = gen.tree(dt, depth)
    if prev is None:
        return tree
    # a plain read of the previous stage at [i, j]
    read = gen.cast(gen._load(prev, "j"), dt)
    if dt == "bool":
        return gen.binary(draw(st.sampled_from(["&", "|"]), label="join"), read, tree, dt)
    return gen.binary(draw(st.sampled_from(["+", "-", "max"]), label="join"), read, tree, dt)


@st.composite
def dtype_computations(draw: Any, opts: Options = Options(),
                       symbolic: "bool | None" = False) -> DtypeComputation:
    """Draw a mixed-dtype pipeline (see the module doc)."""
    n_sym = draw(st.booleans(), label="n symbolic") if symbolic is not False else False
    m_sym = draw(st.booleans(), label="m symbolic") if symbolic is not False else False
    if symbolic and not (n_sym or m_sym):
        n_sym = True
    N, M = draw(st.integers(1, 6), label="N"), draw(st.integers(1, 6), label="M")
    nd, md = ("n" if n_sym else "N"), ("m" if m_sym else "M")
    lines = [f"N, M = {N}, {M}"]
    if n_sym:
        lines.append('n = td.var("n")')
    if m_sym:
        lines.append('m = td.var("m")')
    dtypes: dict = {}
    inputs = []
    for idx in range(draw(st.integers(1, 3), label="inputs")):
        name = f"X{idx}"
        dtypes[name] = draw(st.sampled_from(DTYPES), label=f"{name} dtype")
        lines.append(f'{name} = td.placeholder(({nd}, {md}), "{dtypes[name]}", name="{name}")')
        inputs.append(name)
    ns: dict = {"td": td}
    done = [0]

    def run_new_lines() -> None:
        exec("\n".join(lines[done[0]:]), ns)   # noqa: S102 - generated above
        done[0] = len(lines)

    loads = [Load.of_input(x, dtypes[x]) for x in inputs]
    extents = {"N": nd, "M": md}
    counter = [0]
    nodes: dict = {}
    tensors: list = []
    prev = None
    for sidx in range(draw(st.integers(2, 3), label="stages")):
        name = f"S{sidx + 1}"
        node = _stage(draw, opts, name, loads, extents, counter, lines, prev)
        lines.append(f'{name} = td.compute(({nd}, {md}), lambda i, j: {node.src}, name="{name}")')
        run_new_lines()
        nodes[name] = node
        dtypes[name] = node.dtype
        lifted = sorted(t.op.name for t in ns[name].op.input_tensors
                        if t.op.name.startswith(name + ".red"))
        for r, op_name in enumerate(lifted):     # lifted reductions: stages to schedule too
            var = f"{name}_r{'abcdefgh'[r]}"   # not ending in a digit (schedules.py's
            lines.append(f'{var} = next(t for t in {name}.op.input_tensors '   # multi-output
                         f'if t.op.name == "{op_name}")')                       # convention)
            tensors.append(var)
        tensors.append(name)
        prev = Load(name, node.dtype, node.bound, node.ulp)
        loads = loads + [prev]
    output = tensors[-1]
    stage_args = [t for t in nodes if t != output and draw(st.booleans(), label=f"{t} is arg")]
    arg_names = inputs + stage_args + [output]
    lines.append(f"ARGS = [{', '.join(arg_names)}]")
    run_new_lines()
    source = "\n".join(lines)
    return DtypeComputation(
        source=source, ns=ns, tensors=tensors, inputs=inputs, output=output, gemv_stages=[],
        symbolic=tuple(d for d in (nd, md) if d.islower()), const={"N": N, "M": M},
        reference=None, arg_names=arg_names, outputs=stage_args + [output], nodes=nodes,
        dtypes=dtypes)   # type: ignore[arg-type]


__all__ = ["DtypeComputation", "dtype_computations", "Options", "INTS", "FLOATS"]
