"""Run a fuzzed mixed-dtype schedule everywhere and compare: interpreter, LLVM, NumPy.

Like tests/fuzz/check.py, for ``DtypeComputation``s: every computed argument (the output
and any intermediate stage passed as an argument) is compared with the NumPy evaluation
of its tree (tests/fuzz/dtype_exprs.py) -- integers and booleans exactly, floats exactly
too (the generator keeps them where every executor rounds alike) -- and the trace is
replayed on a fresh schedule, which must lower to structurally equal IR.
"""
from __future__ import annotations

import numpy as np
from hypothesis import event, note

import tdsl as td
from tdsl import interpreter
from tdsl.errors import TDSLError
from tests.guard_pages import guarded_copy

from .check import LAST_CASE, _check_replay, _fail
from .schedules import Fuzz
from .stats import COUNTS


def _sentinel(want: np.ndarray) -> np.ndarray:
    """An output array every element of which is wrong until written."""
    if want.dtype == np.bool_:
        return ~want
    if want.dtype.kind in "iu":
        return (want ^ np.array(0x5A, want.dtype)).astype(want.dtype)
    return np.full(want.shape, np.nan, want.dtype)


def _compare(layer: str, name: str, got: np.ndarray, want: np.ndarray, binding: dict) -> None:
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    bad = ~((g == w) | (np.isnan(g) & np.isnan(w)))
    if bad.any():
        _fail(layer, f"{name} ({want.dtype}) wrong at {binding}: {int(bad.sum())}/{bad.size} "
                     f"elements differ, first at {np.argwhere(bad)[0].tolist()}: got "
                     f"{got[bad][:4]}, want {want[bad][:4]}")


def check_dtypes(fz: Fuzz, bindings: list, seed: int) -> str:
    """Check one fuzzed mixed-dtype schedule; returns 'passed' or 'refused at lower'."""
    comp = fz.comp
    script = fz.script()
    note("---- script ----\n" + script + "\n---- bindings: %r" % (bindings,))
    args = comp.args
    try:
        func = td.lower(fz.s, args)
    except TDSLError as e:
        event(f"refused at lower ({type(e).__name__})")
        _check_replay(fz, None, e)
        COUNTS["refused"] += 1
        return "refused at lower"
    except Exception as e:   # noqa: BLE001
        _fail("lower", f"td.lower raised {type(e).__module__}.{type(e).__name__} "
                       f"(not a TDSLError): {e}")
    note("---- lowered ----\n" + str(func))
    rng = np.random.default_rng(seed)
    cases = []
    for b in bindings:
        ins = comp.input_arrays(rng, b)
        cases.append((b, [ins[x] for x in comp.inputs], comp.expected(ins, b)))
    for binding, ins, want in cases:
        outs = [_sentinel(want[o]) for o in comp.outputs]
        try:
            interpreter.run(func, *[x.copy() for x in ins], *outs)
        except Exception as e:   # noqa: BLE001
            _fail("interpreter", f"at {binding}: {type(e).__module__}.{type(e).__name__}: {e}")
        for o, got in zip(comp.outputs, outs):
            _compare("interpreter", o, got, want[o], binding)
    with open(LAST_CASE, "w") as fh:          # if the native kernel crashes, this is the case
        fh.write(script + f"\n# bindings: {bindings!r}\n")
    try:
        kernel = td.build(fz.s, args, target="llvm")
    except Exception as e:   # noqa: BLE001 - lowered and interpreted, so it must build
        _fail("llvm build", f"{type(e).__module__}.{type(e).__name__}: {e}")
    for binding, ins, want in cases:
        g_ins = [guarded_copy(x) for x in ins]
        outs = [guarded_copy(_sentinel(want[o])) for o in comp.outputs]
        try:
            kernel(*g_ins, *outs)
        except Exception as e:   # noqa: BLE001
            _fail("llvm run", f"at {binding}: {type(e).__module__}.{type(e).__name__}: {e}")
        for o, got in zip(comp.outputs, outs):
            _compare("llvm", o, got, want[o], binding)
        for g, x in zip(g_ins, ins):
            if not np.array_equal(g, x):
                _fail("llvm run", f"an input was modified at {binding}")
    _check_replay(fz, str(func), None)
    COUNTS["passed"] += 1
    event("passed")
    return "passed"

