"""Standard workloads and random legal schedules of them, shared by the test suites.

Nothing here depends on the reference interpreter: a test picks how to execute a
schedule by passing a *runner* to ``Case.check_with``::

    def interp(sch, args, arrays):                    # the reference interpreter
        tdsl.interpreter.run(tdsl.lower(sch, args), *arrays)

    def llvm(sch, args, arrays):                      # a backend
        tdsl.build(sch, args, target="llvm")(*arrays)

    @given(case=random_schedule())
    def test_random(case):
        case.check_with(interp)

A runner receives the schedule, its argument tensors and one NumPy array per
argument (inputs filled with random data, outputs filled with NaN/sentinels) and
must write the outputs in place.  ``check_with`` then compares every output with
the NumPy reference and checks that the inputs were left alone.

Workload builders return ``Workload`` objects (tensors + a NumPy reference);
``Workload.schedule()`` gives a fresh default schedule and ``Workload.case(sch)``
packages a schedule with fresh random inputs (``case(sch, M=19)`` rebinds a
symbolic size, so one schedule can be checked at several sizes).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np
from hypothesis import strategies as st

import tdsl as td
from tdsl.arith import Analyzer
from tdsl.expr import Const
from tdsl.schedule.relations import pass_down

Runner = Callable[[Any, list, list], None]

__all__ = ["Workload", "Case", "random_array", "half_dtype", "matmul", "conv2d", "pipeline",
           "random_schedule", "schedule_matmul", "schedule_conv2d", "schedule_pipeline",
           "interpreter_runner", "WORKLOADS", "check_sizes", "SYMBOLIC_VALUES"]


# ---- data ----------------------------------------------------------------------------------------
def half_dtype(dt: str) -> Any:
    """The NumPy dtype of a 16-bit float named by tdsl (``float16``, ``bfloat16``: ml_dtypes'
    type; the test is skipped, saying why, where ml_dtypes is missing)."""
    if dt == "bfloat16":
        import pytest
        return pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes").bfloat16
    return np.float16


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype: str = "float32",
                 low: float = 0.25, high: float = 1.0) -> np.ndarray:
    """Random data that is never zero: |x| in [low, high) with a random sign (ints: 1..9)."""
    shape = tuple(int(s) for s in shape)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.integers(0, 2, size=shape).astype(bool))
    if dt.kind in "iu":
        mag = rng.integers(1, 10, size=shape)
        if dt.kind == "i":
            mag = mag * rng.choice([-1, 1], size=shape)
        return np.asarray(mag.astype(dt))
    mag = rng.uniform(low, high, size=shape)
    return np.asarray((mag * rng.choice([-1.0, 1.0], size=shape)).astype(dt))


def _sentinel(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """An output buffer whose every element is wrong until the kernel writes it."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.full(shape, np.nan, dt)
    if dt == np.bool_:
        return np.zeros(shape, dt)
    return np.full(shape, np.iinfo(dt).min + 7, dt)


# ---- a schedule plus data ---------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    """A schedule, its arguments, inputs and the expected outputs."""

    name: str
    sch: Any
    args: list
    inputs: list
    expected: list
    sizes: dict
    rtol: float = 1e-5
    atol: float = 1e-5
    workload: "Workload | None" = dataclasses.field(default=None, repr=False, compare=False)

    def rebind(self, **sizes: int) -> "Case":
        """The same schedule with fresh inputs at other values of the symbolic sizes."""
        assert self.workload is not None
        return self.workload.case(self.sch, np.random.default_rng(sum(sizes.values())),
                                  self.args, **sizes)

    def arrays(self) -> list:
        """Fresh argument arrays: copies of the inputs, then sentinel-filled outputs."""
        return [x.copy() for x in self.inputs] + [_sentinel(e.shape, e.dtype) for e in self.expected]

    def check_with(self, runner: Runner) -> list:
        """Run with ``runner(sch, args, arrays)`` and compare against NumPy; returns the outputs."""
        arrays = self.arrays()
        runner(self.sch, self.args, arrays)
        outs = arrays[len(self.inputs):]
        for k, (got, want) in enumerate(zip(outs, self.expected)):
            assert got.shape == want.shape and got.dtype == want.dtype
            if got.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=self.rtol, atol=self.atol,
                                           err_msg=f"{self!r}: output {k}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{self!r}: output {k}")
        for got, want in zip(arrays, self.inputs):
            np.testing.assert_array_equal(got, want, err_msg=f"{self!r}: an input was modified")
        return outs

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:   # how hypothesis shows it
        p.text(repr(self))

    def __repr__(self) -> str:
        trace = str(self.sch.trace) or "(default schedule)"
        return f"Case({self.name}, sizes={self.sizes},\n  trace:\n    " + \
            trace.replace("\n", "\n    ") + ")"


def interpreter_runner(sch: Any, args: list, arrays: list) -> None:
    """Lower and run with the reference interpreter (imported lazily)."""
    from tdsl.interpreter import run
    run(td.lower(sch, args), *arrays)


# ---- workloads ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Workload:
    """Tensors of one computation with a NumPy reference.

    ``inputs``/``outputs`` are the argument tensors; ``sizes`` the concrete sizes
    (``{"M": 12, ...}``), of which those named in ``symbolic`` are ``td.var``s in the
    tensors' shapes and may be rebound per case (``case(sch, M=19)``);
    ``shapes(sizes)`` gives the input shapes and ``reference(*inputs)`` the expected
    outputs.  ``main`` names the tensors the schedule helpers act on.
    """

    name: str
    inputs: list
    outputs: list
    sizes: dict
    shapes: Callable[[dict], list]
    reference: Callable[..., list]
    main: dict
    symbolic: tuple = ()
    dtype: str = "float32"
    rtol: float = 1e-5
    atol: float = 1e-5

    @property
    def args(self) -> list:
        return list(self.inputs) + list(self.outputs)

    def schedule(self) -> Any:
        return td.create_schedule([t.op for t in self.outputs])

    def case(self, sch: Any, rng: "np.random.Generator | None" = None, args: "list | None" = None,
             **sizes: int) -> Case:
        """``sch`` with fresh random inputs; keyword sizes rebind symbolic dimensions."""
        for k in sizes:
            if k not in self.symbolic:
                raise KeyError(f"{self.name}: size {k!r} is not symbolic here ({self.symbolic})")
        sz = {**self.sizes, **sizes}
        rng = rng if rng is not None else np.random.default_rng(0)
        ins = [random_array(rng, shape, self.dtype) for shape in self.shapes(sz)]
        exp = [np.asarray(e) for e in self.reference(*ins)]
        return Case(self.name, sch, list(args) if args is not None else self.args, ins, exp,
                    sz, self.rtol, self.atol, self)


def _dim(sizes: dict, key: str, symbolic: bool) -> Any:
    return td.var(key.lower()) if symbolic else sizes[key]


def matmul(M: int = 12, N: int = 10, K: int = 9, symbolic_m: bool = False,
           dtype: str = "float32") -> Workload:
    """C[i, j] = sum_k A[i, k] * B[k, j]; with ``symbolic_m`` M is ``td.var("m")``."""
    sizes = {"M": M, "N": N, "K": K}
    m = _dim(sizes, "M", symbolic_m)
    A = td.placeholder((m, K), dtype, name="A")
    B = td.placeholder((K, N), dtype, name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((m, N), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")

    def ref(a, b):
        return [(a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)]
    return Workload("matmul", [A, B], [C], sizes,
                    lambda z: [(z["M"], z["K"]), (z["K"], z["N"])], ref,
                    {"A": A, "B": B, "C": C}, ("M",) if symbolic_m else (), dtype)


def conv2d(N: int = 1, CI: int = 2, H: int = 6, W: int = 5, CO: int = 3, R: int = 3,
           pad: int = 1, symbolic_h: bool = False) -> Workload:
    """NCHW conv2d, stride 1, zero padding ``pad`` done by a stage P (if_then_else).

    With ``symbolic_h`` the height is ``td.var("h")``, so P's height is ``h + 2*pad``
    and the output's ``h + 2*pad - R + 1``."""
    sizes = {"N": N, "CI": CI, "H": H, "W": W, "CO": CO, "R": R, "pad": pad}
    h = _dim(sizes, "H", symbolic_h)
    X = td.placeholder((N, CI, h, W), name="X")
    Wt = td.placeholder((CO, CI, R, R), name="Wt")
    P = td.compute((N, CI, h + 2 * pad, W + 2 * pad),
                   lambda b, c, y, x: td.if_then_else(
                       td.all(y >= pad, y < h + pad, x >= pad, x < W + pad),
                       X[b, c, y - pad, x - pad], 0.0), name="P")
    rc = td.reduce_axis((0, CI), name="rc")
    ry = td.reduce_axis((0, R), name="ry")
    rx = td.reduce_axis((0, R), name="rx")
    OH, OW = h + 2 * pad - R + 1, W + 2 * pad - R + 1
    Y = td.compute((N, CO, OH, OW), lambda b, o, y, x: td.sum(
        P[b, rc, y + ry, x + rx] * Wt[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")

    def ref(x, w):
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        oh, ow = xp.shape[2] - R + 1, xp.shape[3] - R + 1
        out = np.zeros((x.shape[0], CO, oh, ow))
        for ry_ in range(R):
            for rx_ in range(R):
                patch = xp[:, :, ry_:ry_ + oh, rx_:rx_ + ow]          # N, CI, oh, ow
                out += np.einsum("ncyx,oc->noyx", patch, w[:, :, ry_, rx_].astype(np.float64))
        return [out.astype(np.float32)]
    return Workload("conv2d", [X, Wt], [Y], sizes,
                    lambda z: [(z["N"], z["CI"], z["H"], z["W"]), (z["CO"], z["CI"], z["R"], z["R"])],
                    ref, {"X": X, "Wt": Wt, "P": P, "Y": Y}, ("H",) if symbolic_h else ())


def pipeline(H: int = 7, W: int = 10, symbolic_h: bool = False) -> Workload:
    """Two elementwise stages with a broadcast: B = A*2 + bias[j]; C = exp(B) * B - 1."""
    sizes = {"H": H, "W": W}
    h = _dim(sizes, "H", symbolic_h)
    A = td.placeholder((h, W), name="A")
    bias = td.placeholder((W,), name="bias")
    B = td.compute((h, W), lambda i, j: A[i, j] * 2.0 + bias[j], name="B")
    C = td.compute((h, W), lambda i, j: td.exp(B[i, j]) * B[i, j] - 1.0, name="C")

    def ref(a, b):
        t = a.astype(np.float64) * 2.0 + b.astype(np.float64)[None, :]
        return [(np.exp(t) * t - 1.0).astype(np.float32)]
    return Workload("pipeline", [A, bias], [C], sizes, lambda z: [(z["H"], z["W"]), (z["W"],)],
                    ref, {"A": A, "bias": bias, "B": B, "C": C}, ("H",) if symbolic_h else ())


# ---- random legal schedules --------------------------------------------------------------------------
FACTORS = [1, 2, 3, 4, 5, 8]


def _split_some(draw: Any, stage: Any, max_splits: int = 2) -> None:
    """Split random leaves of ``stage`` by random factors (or nparts)."""
    for _ in range(draw(st.integers(0, max_splits))):
        leaves = stage.leaf_iter_vars
        iv = draw(st.sampled_from(leaves))
        f = draw(st.sampled_from(FACTORS))
        if draw(st.booleans()):
            stage.split(iv, factor=f)
        else:
            stage.split(iv, nparts=f)


def _reorder_some(draw: Any, stage: Any) -> None:
    if draw(st.booleans()):
        perm = draw(st.permutations(list(stage.leaf_iter_vars)))
        stage.reorder(*perm)


def _fuse_some(draw: Any, stage: Any) -> None:
    """Fuse a random run of adjacent loops of one kind (spatial or reduction)."""
    if not draw(st.booleans()):
        return
    leaves = stage.leaf_iter_vars
    if len(leaves) < 2:
        return
    start = draw(st.integers(0, len(leaves) - 2))
    kind = leaves[start].kind
    end = start + 1
    while end < len(leaves) and leaves[end].kind is kind and end - start < 3:
        end += 1
    if end - start >= 2:
        n = draw(st.integers(2, end - start))
        stage.fuse(*leaves[start:start + n])


def _constant_extents(stage: Any) -> dict:
    """Extents of a root-attached stage's leaves that are compile-time constants."""
    ana = Analyzer()
    roots = {iv: ana.simplify(iv.dom.extent) for iv in stage.root_iter_vars}
    ext = pass_down(stage.relations, roots, ana)
    return {iv: e.value for iv, e in ext.items() if isinstance(e, Const)}


def _annotate_some(draw: Any, sch: Any, stage: Any) -> None:
    """Optional vectorize/unroll/parallel on loops where they are legal (a root stage)."""
    attached = {s.attach_ivar for s in sch.stages if s.attach_stage is stage}
    const = _constant_extents(stage)
    leaves = stage.leaf_iter_vars
    inner = leaves[-1]
    if (draw(st.booleans()) and inner.kind.value == "spatial" and inner in const
            and const[inner] <= 16 and inner not in attached):
        stage.vectorize(inner)
    if draw(st.booleans()):
        cands = [iv for iv in leaves[:-1] if iv in const and const[iv] <= 8]
        if cands:
            stage.unroll(draw(st.sampled_from(cands)))
    if draw(st.booleans()):
        first = leaves[0]
        if first.kind.value == "spatial" and stage.iter_attrs.get(first) is None:
            stage.parallel(first)


def _loops_under(sch: Any, stage: Any) -> list:
    """(stage, loop) pairs that enclose every iteration of ``stage``: its own loops and the
    loops of the stages it is attached under, down to each attach point."""
    out = [(stage, iv) for iv in stage.leaf_iter_vars]
    p, at = stage.attach_stage, stage.attach_ivar
    while p is not None:
        leaves = p.leaf_iter_vars
        out += [(p, iv) for iv in leaves[:leaves.index(at) + 1]]
        p, at = p.attach_stage, p.attach_ivar
    return out


def schedule_matmul(draw: Any, wl: Workload) -> Any:
    """cache_write (local/global) or rfactor or neither; optional cache_read of A; random
    splits, reorders and fuses of every stage; random attachment of the helper stages."""
    sch = wl.schedule()
    C = wl.main["C"]
    comp = sch[C]
    mode = draw(st.sampled_from(["plain", "plain", "cache_write", "rfactor"]))
    if mode == "cache_write":
        CL = sch.cache_write(C, draw(st.sampled_from(["local", "global"])))
        comp = sch[CL]
    rd = draw(st.sampled_from([None, None, "local", "global"]))
    AA = sch.cache_read(wl.main["A"], rd, [comp.op.outputs[0]]) if rd else None
    helper = None
    if mode == "rfactor":
        ko, ki = comp.split(comp.op.reduce_axis[0], factor=draw(st.sampled_from(FACTORS)))
        CF = sch.rfactor(C, draw(st.sampled_from([ko, ki])), draw(st.integers(0, 2)))
        helper = sch[CF]
        _split_some(draw, helper, 2)
        _reorder_some(draw, helper)
    _split_some(draw, comp, 3)
    _reorder_some(draw, comp)
    _fuse_some(draw, comp)
    out = sch[C]
    if mode == "cache_write":
        helper, comp = comp, out
        _split_some(draw, out, 2)
        _reorder_some(draw, out)
        _fuse_some(draw, out)
    if helper is not None and draw(st.booleans()):
        helper.compute_at(out, draw(st.sampled_from(out.leaf_iter_vars)))
    if AA is not None and draw(st.booleans()):
        readers = sch.consumers(sch[AA])
        host, loop = draw(st.sampled_from(_loops_under(sch, readers[0])))
        sch[AA].compute_at(host, loop)
    if draw(st.booleans()):
        _annotate_some(draw, sch, out)
    return sch


def schedule_conv2d(draw: Any, wl: Workload) -> Any:
    sch = wl.schedule()
    Y, P = sch[wl.main["Y"]], sch[wl.main["P"]]
    _split_some(draw, Y, 3)
    _reorder_some(draw, Y)
    _fuse_some(draw, Y)
    where = draw(st.sampled_from(["inline", "at", "root"]))
    if where == "inline":
        P.compute_inline()
    elif where == "at":
        _split_some(draw, P, 1)
        P.compute_at(Y, draw(st.sampled_from(Y.leaf_iter_vars)))
    else:
        _split_some(draw, P, 2)
        _reorder_some(draw, P)
    return sch


def schedule_pipeline(draw: Any, wl: Workload) -> Any:
    sch = wl.schedule()
    B, C = sch[wl.main["B"]], sch[wl.main["C"]]
    _split_some(draw, C, 3)
    _reorder_some(draw, C)
    _fuse_some(draw, C)
    where = draw(st.sampled_from(["inline", "at", "root"]))
    if where == "inline":
        B.compute_inline()
    else:
        _split_some(draw, B, 2)
        _reorder_some(draw, B)
        _fuse_some(draw, B)
        if where == "at":
            B.compute_at(C, draw(st.sampled_from(C.leaf_iter_vars)))
    if draw(st.booleans()):
        _annotate_some(draw, sch, C)
    return sch


def _draw_matmul(draw: Any) -> Workload:
    return matmul(draw(st.integers(1, 13)), draw(st.integers(1, 11)), draw(st.integers(1, 9)),
                  symbolic_m=draw(st.booleans()))


def _draw_conv2d(draw: Any) -> Workload:
    r = draw(st.sampled_from([1, 3]))
    pad = 1 if r == 3 else draw(st.integers(0, 1))
    return conv2d(1, draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 6)),
                  draw(st.integers(1, 3)), r, pad=pad, symbolic_h=draw(st.booleans()))


def _draw_pipeline(draw: Any) -> Workload:
    return pipeline(draw(st.integers(1, 12)), draw(st.integers(1, 12)),
                    symbolic_h=draw(st.booleans()))


WORKLOADS = {
    "matmul": (_draw_matmul, schedule_matmul),
    "conv2d": (_draw_conv2d, schedule_conv2d),
    "pipeline": (_draw_pipeline, schedule_pipeline),
}


@st.composite
def random_schedule(draw: Any, workloads: Sequence[str] = ("matmul", "conv2d", "pipeline"),
                    seed: "int | None" = None) -> Case:
    """A ``Case``: a random workload (random sizes, sometimes symbolic) under a random legal
    schedule, with random inputs and the NumPy reference."""
    name = draw(st.sampled_from(list(workloads)))
    draw_wl, sched = WORKLOADS[name]
    wl = draw_wl(draw)
    sch = sched(draw, wl)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)) if seed is None else seed)
    return wl.case(sch, rng)


# ---- sizes for the per-primitive differential tests ----------------------------------------------------
#: Values a symbolic size is bound to: smaller than the usual split factors, divisible, and not.
SYMBOLIC_VALUES = (3, 16, 21)


def check_sizes(make: Callable[["int | None"], Workload], schedule: Callable[[Workload], Any],
                size: "int | str", runner: Runner = interpreter_runner,
                values: Sequence[int] = SYMBOLIC_VALUES, rng: "np.random.Generator | None" = None
                ) -> None:
    """Schedule ``make(size)`` with ``schedule`` and check it against NumPy.

    ``size == "sym"`` builds the workload with a symbolic size (``make(None)``) and
    checks one schedule of it at every value in ``values``.
    """
    rng = rng if rng is not None else np.random.default_rng(7)
    if size == "sym":
        wl = make(None)
        assert wl.symbolic, f"{wl.name}: make(None) must give a symbolic workload"
        sch = schedule(wl)
        for v in values:
            wl.case(sch, rng, **{wl.symbolic[0]: v}).check_with(runner)
    else:
        wl = make(int(size))
        wl.case(schedule(wl), rng).check_with(runner)
