"""Run a fuzzed schedule everywhere and compare: interpreter, LLVM, NumPy, trace replay.

``check(fz, bindings, seed)`` lowers the schedule, runs it with the reference
interpreter (every access bounds-checked) and compiled for LLVM (arrays end at an
unreadable page) at each binding of the symbolic sizes, on random non-zero data, and
compares both with NumPy; then replays ``s.trace`` on a fresh schedule, which must lower
to the same IR.  A ``TDSLError`` from ``td.lower`` is a refusal (the layer is recorded);
anything else going wrong is a failure that names the layer.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
from hypothesis import event, note

import tdsl as td
from tdsl import interpreter
from tdsl.errors import TDSLError
from tdsl.structural import structural_equal
from tests.guard_pages import guarded_copy
from tests.workloads import random_array

from .schedules import Fuzz
from .stats import COUNTS

LAST_CASE = os.path.join(tempfile.gettempdir(), "tdsl_fuzz_last_case.py")


class LayerFailure(AssertionError):
    """A layer (lower, interpreter, llvm, trace replay) failed on an accepted schedule."""

    def __init__(self, layer: str, message: str):
        self.layer = layer
        super().__init__(f"[{layer}] {message}")


def _fail(layer: str, message: str) -> None:
    event(f"FAILED in {layer}")
    raise LayerFailure(layer, message)


def _compare(layer: str, got: np.ndarray, want: np.ndarray, binding: dict) -> None:
    scale = float(np.max(np.abs(want))) if want.size else 1.0
    bad = ~np.isclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-4 * max(scale, 1.0))
    if bad.any():
        _fail(layer, f"wrong result at {binding}: {int(bad.sum())}/{bad.size} elements differ, "
                     f"first at {np.argwhere(bad)[0].tolist()}: got {got[bad][:4]}, "
                     f"want {want[bad][:4]}")


def _arrays(fz: Fuzz, binding: dict, rng: np.random.Generator) -> tuple[list, np.ndarray]:
    shapes = fz.comp.input_shapes(binding)
    ins = {name: random_array(rng, shapes[name]) for name in fz.comp.inputs}
    want = fz.comp.reference(ins, binding)
    return [ins[n] for n in fz.comp.inputs], want


def _check_replay(fz: Fuzz, lowered: "str | None", err: "Exception | None") -> None:
    ns = fz.ns
    fresh = td.create_schedule(ns[fz.comp.output].op)
    try:
        fz.s.trace.apply(fresh, intrinsics=fz.intrinsics)
    except Exception as e:   # noqa: BLE001
        _fail("trace replay", f"replaying the trace raised {type(e).__name__}: {e}\n"
                              f"trace:\n{fz.s.trace}")
    if fresh.trace.to_json() != fz.s.trace.to_json():
        _fail("trace replay", f"replay recorded another trace:\n{fresh.trace}\nvs\n{fz.s.trace}")
    try:
        f2 = td.lower(fresh, fz.comp.args)
    except TDSLError as e:
        if err is None or type(e) is not type(err):
            _fail("trace replay", f"the replayed schedule does not lower ({type(e).__name__}: {e}); "
                                  f"the original {'did' if err is None else 'raised ' + repr(err)}")
        return
    except Exception as e:   # noqa: BLE001
        _fail("trace replay", f"lowering the replayed schedule raised {type(e).__name__}: {e}")
    if err is not None:
        _fail("trace replay", f"the original schedule was refused by lower ({err}) but the "
                              f"replayed one lowers")
    f1 = td.lower(fz.s, fz.comp.args)
    if not structural_equal(f1, f2):
        _fail("trace replay", f"the replayed schedule lowers to other IR:\n--- original:\n"
                              f"{lowered}\n--- replayed:\n{f2}")


def check(fz: Fuzz, bindings: list, seed: int) -> str:
    """Check one fuzzed schedule; returns 'passed' or 'refused at lower'."""
    script = fz.script()
    note("---- script ----\n" + script + "\n---- bindings: %r" % (bindings,))
    args = fz.comp.args
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
    lowered = str(func)
    note("---- lowered ----\n" + lowered)
    rng = np.random.default_rng(seed)
    cases = [(b,) + _arrays(fz, b, rng) for b in bindings]
    for binding, ins, want in cases:
        out = np.full(want.shape, np.nan, "float32")
        try:
            interpreter.run(func, *[x.copy() for x in ins], out)
        except Exception as e:   # noqa: BLE001
            _fail("interpreter", f"at {binding}: {type(e).__module__}.{type(e).__name__}: {e}")
        _compare("interpreter", out, want, binding)
    with open(LAST_CASE, "w") as fh:          # if the native kernel crashes, this is the case
        fh.write(script + f"\n# bindings: {bindings!r}\n")
    try:
        kernel = td.build(fz.s, args, target="llvm")
    except Exception as e:   # noqa: BLE001 - lowered and interpreted, so it must build
        _fail("llvm build", f"{type(e).__module__}.{type(e).__name__}: {e}")
    for binding, ins, want in cases:
        g_ins = [guarded_copy(x) for x in ins]
        out = guarded_copy(np.full(want.shape, np.nan, "float32"))
        try:
            kernel(*g_ins, out)
        except Exception as e:   # noqa: BLE001
            _fail("llvm run", f"at {binding}: {type(e).__module__}.{type(e).__name__}: {e}")
        _compare("llvm", out, want, binding)
        for g, x in zip(g_ins, ins):
            if not np.array_equal(g, x):
                _fail("llvm run", f"an input was modified at {binding}")
    _check_replay(fz, lowered, None)
    COUNTS["passed"] += 1
    event("passed")
    return "passed"
