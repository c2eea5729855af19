"""Random mixed-dtype expression trees, as tdsl source plus an independent NumPy evaluator.

A tree mixes all thirteen dtypes (bool, int8..uint64, float16, bfloat16, float32, float64):
loads of inputs of random dtypes, constants, index variables, ``+ - *``, min/max, floor
``//`` and ``%`` (by constants and by data that may be zero), comparisons, ``& |``,
``if_then_else``, casts both ways between any two dtypes, implicit integer promotion
(the wider integer wins, signed over unsigned at equal width) and lifted reductions
(``td.sum``/``td.max`` anywhere in a body).  The evaluator follows docs/ir.md: integers
wrap, ``x // 0 == x % 0 == 0``, floor division, float16/bfloat16 round after every
operation, number->bool is ``!= 0``.

The generator keeps every value where the result is exact across executors: float values
carry a magnitude bound and a granularity (a power of two they are multiples of), so a
float32/float64 product is exact (LLVM may contract ``a*b + c`` into an FMA; an exact
product makes that invisible) and a float sum reduction is exact (any order gives the
same sum); float16 stays below its largest finite value; no NaN or infinity arises.

Options (``Options``) switch on shapes that hit known, separately tracked bugs, so the
short profile can pass while those are being fixed:

* ``reduce_in_select``  -- reductions in both an if_then_else condition and its branches
  (r26; off, a select has reductions in its condition or in its branches, not both);
* ``reduce_axis_astype`` -- ``k.astype(...)`` on a reduce axis (r27);
* ``f16_bf16_casts``    -- direct float16 <-> bfloat16 casts (r28, LLVM);
* ``saturating_casts``  -- float->int casts of out-of-range values, checked against the
  saturating rule being implemented (NaN -> 0, +-inf / out of range -> the int type's
  max/min); off, the generator clamps a float->int cast's operand into range (r29).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
DTYPES = ("bool",) + INTS + FLOATS
#: significand bits (with the implicit one) and largest finite value of each float dtype
PRECISION = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
FMAX = {"float16": 65504.0, "bfloat16": 3.0e38, "float32": 3.0e38, "float64": 1.0e300}
#: float values stay below this (no infinity; float16 keeps headroom for one more add)
SAFE = {"float16": 16384.0, "bfloat16": 1.0e30, "float32": 1.0e30, "float64": 1.0e30}


@dataclasses.dataclass(frozen=True)
class Options:
    """Generator switches for shapes that reach known bugs (see the module doc)."""

    reduce_in_select: bool = False
    reduce_axis_astype: bool = False
    f16_bf16_casts: bool = False
    saturating_casts: bool = False
    reductions: bool = True
    div_by_data: bool = True


def np_dtype(dt: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dt == "bfloat16" else np.dtype(dt)


def int_range(dt: str) -> tuple[int, int]:
    info = np.iinfo(dt)
    return int(info.min), int(info.max)


def exact_in(dt: str, bound: float, ulp: float) -> bool:
    """Every multiple of ``ulp`` up to ``bound`` is representable in float ``dt``."""
    if bound == 0:
        return True
    if bound >= SAFE[dt] or ulp <= 0:
        return False
    return bound / ulp <= 2.0 ** PRECISION[dt] and ulp >= 2.0 ** -60


def widens(src: str, dt: str) -> bool:
    """Every ``src`` float converts exactly to ``dt``."""
    return (src, dt) in {("float16", "float32"), ("float16", "float64"),
                         ("bfloat16", "float32"), ("bfloat16", "float64"),
                         ("float32", "float64")}


@dataclasses.dataclass(frozen=True)
class Load:
    """A tensor a tree may read at ``[i, j]`` (or ``[i, k]``), with its value's bound/ulp."""

    name: str
    dtype: str
    bound: float
    ulp: float

    @staticmethod
    def of_input(name: str, dtype: str) -> "Load":
        """An input as tests/fuzz/dtype_computations.py fills it: +-[1, 9] integers,
        multiples of 0.5 in +-[0.5, 4.5], booleans."""
        if dtype == "bool":
            return Load(name, dtype, 1.0, 1.0)
        return Load(name, dtype, 4.5, 0.5) if dtype in FLOATS else Load(name, dtype, 9.0, 1.0)


@dataclasses.dataclass
class Node:
    """Source text, dtype and NumPy evaluation of a subtree.

    ``bound``: the largest magnitude the value can have (integers: ``inf`` once they may
    have wrapped); ``ulp``: floats are multiples of it (0: unknown, e.g. after rounding);
    ``reduces``: the subtree holds a reduction.  ``ev(env)`` evaluates on index grids.
    """

    src: str
    dtype: str
    bound: float
    ulp: float
    ev: Callable[[dict], np.ndarray]
    reduces: bool = False


def _cast_np(x: np.ndarray, dt: str) -> np.ndarray:
    """tdsl's cast (docs/ir.md) on an array."""
    x = np.asarray(x)
    if dt == "bool":
        return x != 0
    if x.dtype == np.bool_:
        return x.astype(np_dtype(dt))
    if dt in INTS and str(x.dtype) in FLOATS:   # bfloat16's NumPy kind is "V", not "f"
        return _float_to_int(x, dt)
    return x.astype(np_dtype(dt))      # integers wrap (C casts), floats round to nearest


def _float_to_int(x: np.ndarray, dt: str) -> np.ndarray:
    """Truncation toward zero; NaN -> 0 and +-inf / out of range -> the max/min of ``dt``."""
    lo, hi = int_range(dt)
    f = np.trunc(x.astype(np.float64))
    out = np.where(np.isnan(f), 0.0, f)
    big = out >= float(hi)
    small = out <= float(lo)
    mid = np.clip(np.where(big | small, 0.0, out), lo, hi)
    res = mid.astype(np.int64) if dt != "uint64" else mid.astype(np.uint64)
    res = res.astype(dt)
    res = np.where(big, np.array(hi, dtype=dt), res)
    return np.where(small, np.array(lo, dtype=dt), res).astype(dt)


def promote(a: str, b: str) -> str:
    """The documented rule: equal dtypes, or the wider integer (signed wins at equal width)."""
    if a == b:
        return a
    ka = (np.dtype(a).itemsize, a[0] != "u")
    kb = (np.dtype(b).itemsize, b[0] != "u")
    return a if ka >= kb else b


def _int_bound(dt: str, bound: float) -> float:
    lo, hi = int_range(dt)
    return bound if bound <= min(-lo, hi) else math.inf


def _wrapped_bound(dt: str, bound: float) -> float:
    """Magnitude bound of an integer of ``dt`` known only to be ``<= bound`` before wrapping."""
    lo, hi = int_range(dt)
    return bound if bound <= min(-lo if lo else hi, hi) else float(max(-lo, hi))


def _conv_bound(x: Node, dt: str) -> float:
    """Magnitude bound of ``x`` converted to the integer dtype ``dt``: a signed value may be
    negative, which wraps to a large unsigned one."""
    if dt[0] == "u" and x.dtype != "bool" and (x.dtype in FLOATS or x.dtype[0] != "u"):
        if x.dtype in FLOATS:              # clamped to [0, ...] by the cast (see Gen.cast)
            return _wrapped_bound(dt, x.bound)
        return float(int_range(dt)[1])
    return _wrapped_bound(dt, x.bound)


class Gen:
    """Draws trees for one stage; ``loads`` are the tensors it may read (name, dtype)."""

    def __init__(self, draw: Any, opts: Options, loads: "list[Load]", extents: dict,
                 counter: list, lines: list):
        self.draw = draw
        self.opts = opts
        self.loads = loads
        self.extents = extents          # "N"/"M": source text of each extent
        self.counter = counter          # reduce-axis numbering shared by a computation
        self.lines = lines              # source lines declaring reduce axes go here

    # ---- leaves ----------------------------------------------------------------------------
    def leaf(self, dt: str, in_reduce: "str | None") -> Node:
        kind = self.draw(st.sampled_from(["load", "load", "const", "index"]), label="leaf")
        if kind == "load" and self.loads:
            load = self.draw(st.sampled_from(self.loads), label="tensor")
            col = in_reduce or "j"
            if in_reduce is None and self.draw(st.integers(0, 3), label="shift") == 0:
                node = self._shifted_load(load)
            else:
                node = self._load(load, col)
            return self.cast(node, dt)
        if kind == "index":
            var = in_reduce if in_reduce and self.draw(st.booleans(), label="k leaf") else \
                self.draw(st.sampled_from(["i", "j"]), label="index")
            src = var
            if var not in ("i", "j"):
                src = var if self.opts.reduce_axis_astype else var + ".var"
            node = Node(f"{src}.astype(\"int64\")", "int64", 9, 1,
                        lambda env, v=var: np.asarray(env[v], np.int64))
            return self.cast(node, dt)
        return self.const(dt)

    def _load(self, load: "Load", col: str) -> Node:
        name = load.name
        return Node(f"{name}[i, {col}]", load.dtype, load.bound, load.ulp,
                    lambda env: env[name][env["i"], env[col]])

    def _shifted_load(self, load: "Load") -> Node:
        """``X[i, j + 1]`` guarded by ``j + 1 < M``, else a constant 1 of the load's dtype."""
        name, ldt = load.name, load.dtype
        m = self.extents["M"]
        one = "True" if ldt == "bool" else f"td.const(1, \"{ldt}\")"
        src = f"td.if_then_else(j + 1 < {m}, {name}[i, j + 1], {one})"

        def ev(env: dict) -> np.ndarray:
            x = env[name]
            j1 = np.minimum(env["j"] + 1, x.shape[1] - 1)
            v = x[env["i"], j1]
            return np.where(env["j"] + 1 < x.shape[1], v, np.array(1, np_dtype(ldt)))
        return Node(src, ldt, max(load.bound, 1.0), min(load.ulp, 1.0) if load.ulp else 0.0, ev)

    def const(self, dt: str) -> Node:
        if dt == "bool":
            v = self.draw(st.booleans(), label="const")
            return Node(f"td.const({v}, \"bool\")", dt, 1, 1, lambda env: np.array(v))
        if dt in FLOATS:
            v = self.draw(st.integers(-8, 8), label="const") / 2
            return Node(f"td.const({v}, \"{dt}\")", dt, abs(v), 0.5,
                        lambda env: np.array(v, np_dtype(dt)))
        lo = -9 if dt[0] != "u" else 0
        v = self.draw(st.integers(lo, 9), label="const")
        return Node(f"td.const({v}, \"{dt}\")", dt, abs(v), 1,
                    lambda env: np.array(v, np_dtype(dt)))

    # ---- casts -------------------------------------------------------------------------------
    def cast(self, x: Node, dt: str) -> Node:
        """``x`` as ``dt``: exact float conversions only (an inexact one goes through a
        float dtype that holds it, or an int8 wrap); float->int operands clamped into range
        unless ``saturating_casts``."""
        if x.dtype == dt:
            return x
        if {x.dtype, dt} == {"float16", "bfloat16"} and not self.opts.f16_bf16_casts:
            x = self.cast(x, "float32")
        if dt in FLOATS and x.dtype in INTS and not exact_in(dt, x.bound, 1):
            x = self.cast(x, "int8")
        if dt in FLOATS and x.dtype in FLOATS and not widens(x.dtype, dt) \
                and not exact_in(dt, x.bound, x.ulp):
            x = self._clamp(x, -2048, 2048) if x.bound > 2048 else x
            if not exact_in(dt, x.bound, x.ulp):
                return self._round_through(x, dt)
        if dt in INTS and x.dtype in FLOATS and not self.opts.saturating_casts:
            lo, hi = int_range(dt)
            if lo == 0 or x.bound >= min(hi, 2048):   # negative -> unsigned is out of range
                x = self._clamp(x, max(lo, -2048), min(hi, 2048))
        src = f"({x.src}).astype(\"{dt}\")"
        if dt == "bool":
            bound, ulp = 1.0, 1.0
        elif dt in INTS:
            bound = _conv_bound(x, dt)
            ulp = 1.0
        else:
            bound, ulp = x.bound, (x.ulp if x.dtype in FLOATS else 1.0)
        return Node(src, dt, bound, ulp, lambda env: _cast_np(x.ev(env), dt), x.reduces)

    def _round_through(self, x: Node, dt: str) -> Node:
        """An inexact float narrowing: round to an integer first (exact), then cast."""
        lo, hi = -2048, 2048
        xi = self.cast(self._clamp(x, lo, hi), "int16")
        return self.cast(xi, dt)

    def _clamp(self, x: Node, lo: float, hi: float) -> Node:
        lo_c = f"td.const({float(lo)!r}, \"{x.dtype}\")"
        hi_c = f"td.const({float(hi)!r}, \"{x.dtype}\")"
        src = f"td.maximum(td.minimum({x.src}, {hi_c}), {lo_c})"
        nd = np_dtype(x.dtype)
        return Node(src, x.dtype, min(x.bound, max(abs(lo), abs(hi))), x.ulp,
                    lambda env: np.maximum(np.minimum(x.ev(env), np.array(hi, nd)),
                                           np.array(lo, nd)), x.reduces)

    # ---- trees ----------------------------------------------------------------------------
    def tree(self, dt: str, depth: int, in_reduce: "str | None" = None,
             allow_reduce: bool = True) -> Node:
        if depth <= 0:
            return self.leaf(dt, in_reduce)
        choices = ["leaf", "cast", "select"]
        if dt == "bool":
            choices += ["compare", "compare", "logic"]
        else:
            choices += ["arith", "arith", "minmax"]
            if dt in INTS:
                choices += ["div"]
            if dt in INTS and in_reduce is None:
                choices += ["promote"]
            if allow_reduce and self.opts.reductions and in_reduce is None:
                choices += ["reduce"]
        what = self.draw(st.sampled_from(choices), label="node")
        sub = lambda d, red=allow_reduce: self.tree(d, depth - 1, in_reduce, red)  # noqa: E731
        if what == "leaf":
            return self.leaf(dt, in_reduce)
        if what == "cast":
            src_dt = self.draw(st.sampled_from(DTYPES + FLOATS), label="cast from")
            if self.opts.f16_bf16_casts and dt in ("float16", "bfloat16") and \
                    self.draw(st.booleans(), label="f16<->bf16"):
                src_dt = "bfloat16" if dt == "float16" else "float16"
            return self.cast(sub(src_dt), dt)
        if what == "select":
            red = allow_reduce and self.opts.reduce_in_select
            if red and self.draw(st.booleans(), label="reductions in select"):
                # a reduction in the condition and one in a branch (r26's shape)
                odt = self.draw(st.sampled_from(DTYPES[1:]), label="compare dtype")
                cond = self.binary("<", self.reduction(odt, depth - 1), sub(odt, False), "bool")
                return self.select(cond, self.reduction(dt, depth - 1), sub(dt, False)) \
                    if dt != "bool" else self.select(cond, sub(dt, False), sub(dt, False))
            # without the option, reductions go in the condition or in the branches
            where = self.draw(st.sampled_from(["cond", "branches"]), label="reductions in")
            red_c = allow_reduce and (red or where == "cond")
            red_b = allow_reduce and (red or where == "branches")
            cond = self.tree("bool", depth - 1, in_reduce, red_c)
            a, b = sub(dt, red_b), sub(dt, red_b)
            return self.select(cond, a, b)
        if what == "compare":
            odt = self.draw(st.sampled_from(DTYPES[1:]), label="compare dtype")
            op = self.draw(st.sampled_from(["<", "<=", "==", "!=", ">", ">="]), label="cmp")
            return self.binary(op, sub(odt), sub(odt), "bool")
        if what == "logic":
            op = self.draw(st.sampled_from(["&", "|"]), label="logic")
            return self.binary(op, sub("bool"), sub("bool"), "bool")
        if what == "minmax":
            op = self.draw(st.sampled_from(["min", "max"]), label="minmax")
            return self.binary(op, sub(dt), sub(dt), dt)
        if what == "div":
            op = self.draw(st.sampled_from(["//", "%"]), label="div")
            if self.opts.div_by_data and self.draw(st.booleans(), label="data divisor"):
                return self.binary(op, sub(dt), sub(dt), dt)
            c = self.draw(st.sampled_from([1, 2, 3, 7] + ([-1, -3] if dt[0] != "u" else [])),
                          label="divisor")
            return self.binary(op, sub(dt), self._int_const(c, dt), dt)
        if what == "promote":                      # two integer dtypes, the result is ``dt``
            other = self.draw(st.sampled_from([d for d in INTS if promote(d, dt) == dt]),
                              label="narrower")
            op = self.draw(st.sampled_from(["+", "-", "*"]), label="op")
            return self.binary(op, sub(dt), sub(other), dt)
        if what == "reduce":
            return self.reduction(dt, depth - 1)
        op = self.draw(st.sampled_from(["+", "-", "*"]), label="op")
        return self.binary(op, sub(dt), sub(dt), dt)

    def _int_const(self, v: int, dt: str) -> Node:
        return Node(f"td.const({v}, \"{dt}\")", dt, abs(v), 1,
                    lambda env: np.array(v, np_dtype(dt)))

    def select(self, cond: Node, a: Node, b: Node) -> Node:
        src = f"td.if_then_else({cond.src}, {a.src}, {b.src})"
        ulp = min(a.ulp, b.ulp) if a.ulp and b.ulp else 0.0
        # both branches are evaluated by NumPy; the chosen one is taken
        return Node(src, a.dtype, max(a.bound, b.bound), ulp,
                    lambda env: np.where(cond.ev(env), a.ev(env), b.ev(env)).astype(
                        np_dtype(a.dtype)),
                    a.reduces or b.reduces or cond.reduces)

    def binary(self, op: str, a: Node, b: Node, dt: str) -> Node:
        """``a op b``; arithmetic that would make a float inexact where that matters is
        turned into ``+``/``-``, and float16 values kept below overflow."""
        if a.dtype != b.dtype:
            rdt = promote(a.dtype, b.dtype)
        else:
            rdt = a.dtype
        if rdt in INTS:                   # operands converted to rdt: their bounds there
            a = dataclasses.replace(a, bound=_conv_bound(a, rdt))
            b = dataclasses.replace(b, bound=_conv_bound(b, rdt))
        if op in ("+", "-", "*") and rdt in FLOATS:
            op = self._float_op(op, a, b, rdt)
        reduces = a.reduces or b.reduces
        if op in ("<", "<=", "==", "!=", ">", ">="):
            f = {"<": np.less, "<=": np.less_equal, "==": np.equal, "!=": np.not_equal,
                 ">": np.greater, ">=": np.greater_equal}[op]
            return Node(f"({a.src} {op} {b.src})", "bool", 1, 1,
                        lambda env: f(_cast_np(a.ev(env), rdt), _cast_np(b.ev(env), rdt)),
                        reduces)
        if op in ("&", "|"):
            f = np.logical_and if op == "&" else np.logical_or
            return Node(f"({a.src} {op} {b.src})", "bool", 1, 1,
                        lambda env: f(a.ev(env), b.ev(env)), reduces)
        if op in ("min", "max"):
            f = np.minimum if op == "min" else np.maximum
            name = "td.minimum" if op == "min" else "td.maximum"
            ulp = min(a.ulp, b.ulp) if a.ulp and b.ulp else 0.0
            return Node(f"{name}({a.src}, {b.src})", rdt, max(a.bound, b.bound), ulp,
                        lambda env: f(_cast_np(a.ev(env), rdt), _cast_np(b.ev(env), rdt)),
                        reduces)
        if op in ("//", "%"):
            bound = a.bound if op == "//" else b.bound
            if op == "//" and rdt[0] != "u":
                bound = _int_bound(rdt, a.bound + 1)
            f = np.floor_divide if op == "//" else np.remainder
            return Node(f"({a.src} {op} {b.src})", rdt, bound, 1,
                        lambda env: f(_cast_np(a.ev(env), rdt), _cast_np(b.ev(env), rdt)),
                        reduces)
        f = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
        if rdt in FLOATS:
            bound = a.bound * b.bound if op == "*" else a.bound + b.bound
            if a.ulp and b.ulp:
                ulp = a.ulp * b.ulp if op == "*" else min(a.ulp, b.ulp)
                if not exact_in(rdt, bound, ulp):
                    ulp = 0.0
            else:
                ulp = 0.0
        else:
            bound = _wrapped_bound(rdt, a.bound * b.bound if op == "*" else a.bound + b.bound)
            if rdt[0] == "u" and op == "-":
                bound = float(int_range(rdt)[1])
            ulp = 1.0
        return Node(f"({a.src} {op} {b.src})", rdt, bound, ulp,
                    lambda env: f(_cast_np(a.ev(env), rdt), _cast_np(b.ev(env), rdt)),
                    reduces)

    def _float_op(self, op: str, a: Node, b: Node, dt: str) -> str:
        """``op``, or ``+`` for a product that could overflow or (float32/64) be inexact,
        or ``min`` (which never grows) for a sum that could overflow."""
        if op == "*":
            bound = a.bound * b.bound
            exact = bool(a.ulp and b.ulp) and exact_in(dt, bound, a.ulp * b.ulp)
            if bound < SAFE[dt] and (exact or dt in ("float16", "bfloat16")):
                return op
            op = "+"
        return op if a.bound + b.bound < SAFE[dt] else "min"

    def reduction(self, dt: str, depth: int) -> Node:
        """``td.sum``/``td.max`` over a fresh reduce axis of extent M, of a subtree reading
        ``X[i, k]``.  A float sum must be exact (any order of additions gives one result);
        otherwise it becomes a max."""
        idx = self.counter[0]
        self.counter[0] += 1
        k = f"k{idx}"
        self.lines.append(f"{k} = td.reduce_axis((0, {self.extents['M']}), name=\"{k}\")")
        src_node = self.tree(dt, max(depth, 0), in_reduce=k, allow_reduce=False)
        kind = self.draw(st.sampled_from(["sum", "sum", "max"]), label="reducer")
        m_max = 9
        if kind == "sum" and dt in FLOATS:
            total = src_node.bound * m_max
            if not (src_node.ulp and exact_in(dt, total, src_node.ulp)) or total >= SAFE[dt]:
                kind = "max"
        nd = np_dtype(dt)

        def ev(env: dict) -> np.ndarray:
            inner = dict(env)
            ext = env["M_value"]
            inner[k] = np.arange(ext).reshape(1, 1, ext)
            vals = np.asarray(src_node.ev(inner))
            vals = np.broadcast_to(vals, np.broadcast_shapes(vals.shape, (1, 1, ext)))
            with np.errstate(all="ignore"):
                if kind == "sum":
                    acc = np.zeros(vals.shape[:2] + (1,), nd)
                    for t in range(ext):
                        acc = (acc + vals[..., t:t + 1]).astype(nd)
                else:
                    acc = np.max(vals, axis=2, keepdims=True).astype(nd)
            return acc
        if kind == "sum":
            bound = src_node.bound * m_max if dt in FLOATS else \
                _wrapped_bound(dt, src_node.bound * m_max)
        else:
            bound = src_node.bound
        return Node(f"td.{kind}({src_node.src}, axis={k})", dt, bound, src_node.ulp, ev, True)


def evaluate(node: Node, arrays: dict, n: int, m: int) -> np.ndarray:
    """``node`` at every (i, j) of an n x m grid, as an array of its dtype."""
    env = dict(arrays)
    env["i"] = np.arange(n).reshape(n, 1, 1)
    env["j"] = np.arange(m).reshape(1, m, 1)
    env["M_value"] = m
    for name, a in arrays.items():          # 3-D grids index 2-D inputs
        env[name] = a
    with np.errstate(all="ignore"):
        v = node.ev(env)
    v = np.broadcast_to(np.asarray(v, np_dtype(node.dtype)), (n, m, 1))
    return np.ascontiguousarray(v[..., 0])
