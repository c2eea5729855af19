"""``tvm.tir``: scalar expressions — constants, ``Select``, index arithmetic and math.

Division helpers follow TVM: ``indexdiv``/``indexmod``/``floordiv``/``floormod`` round
toward minus infinity, ``truncdiv``/``truncmod`` toward zero (C semantics),
``ceildiv`` up.
"""
from __future__ import annotations

from typing import Any

import tdsl
from tdsl import (abs, all, any, cast, ceil, cos, erf, exp, exp2, floor, if_then_else, isnan,
                  log, log2, log10, max_value, min_value, power, round, rsqrt, sigmoid, sin,
                  sqrt, tanh, trunc)
from tdsl import expr as _e
from tdsl.dtype import as_dtype
from tdsl.bitwise import (bitwise_and, bitwise_not, bitwise_or, bitwise_xor, shift_left,
                          shift_right)
from tdsl.expr import (Add, And, Call, Cast, Const, Div, EQ, Expr, FloorDiv, FloorMod, GE, GT,
                       LE, LT, Max, Min, Mul, NE, Not, Or, Sub, Var, SizeVar)

from .buffer import Buffer, decl_buffer, ir_builder

IntImm = FloatImm = Const
PrimExpr = Expr


def const(value: Any, dtype: "str | None" = None) -> Const:
    """A constant (dtype from the value when not given: int32, float32 or bool)."""
    return _e.const(value, dtype)


def Select(cond: Any, true_value: Any, false_value: Any) -> Expr:  # noqa: N802
    """``true_value if cond else false_value`` (tdsl evaluates only the chosen branch)."""
    return if_then_else(cond, true_value, false_value)


def _pair(a: Any, b: Any) -> tuple[Expr, Expr]:
    return _e._operands("div", a, b)


def floordiv(a: Any, b: Any) -> Expr:
    a, b = _pair(a, b)
    return a // b


def floormod(a: Any, b: Any) -> Expr:
    a, b = _pair(a, b)
    return a % b


indexdiv = floordiv
indexmod = floormod


def truncdiv(a: Any, b: Any) -> Expr:
    """Integer division rounding toward zero (C's ``/``)."""
    a, b = _pair(a, b)
    if a.dtype.is_float:
        return trunc(a / b)
    q, r = a // b, a % b
    # floor and trunc differ when the remainder is nonzero and the signs differ
    fix = (r != 0) & ((a < 0) != (b < 0))
    return if_then_else(fix, q + 1, q)


def truncmod(a: Any, b: Any) -> Expr:
    """Remainder with the sign of the dividend (C's ``%``)."""
    a, b = _pair(a, b)
    return a - truncdiv(a, b) * b


def ceildiv(a: Any, b: Any) -> Expr:
    """``ceil(a / b)`` for integers."""
    a, b = _pair(a, b)
    return (a + b - 1) // b if _nonneg(b) else -((-a) // b)


def _nonneg(b: Expr) -> bool:
    return isinstance(b, Const) and b.value > 0


def div(a: Any, b: Any) -> Expr:
    """``a / b``: true division for floats, truncating for integers (TVM's ``tir.Div``)."""
    a, b = _pair(a, b)
    return a / b if a.dtype.is_float else truncdiv(a, b)


def max(a: Any, b: Any) -> Expr:  # noqa: A001
    return tdsl.maximum(a, b)


def min(a: Any, b: Any) -> Expr:  # noqa: A001
    return tdsl.minimum(a, b)


def pow(x: Any, y: Any) -> Expr:  # noqa: A001
    return power(x, y)


def fmod(a: Any, b: Any) -> Expr:
    return truncmod(a, b)


def call_packed(name: str, *args: Any) -> Any:
    """In an extern stage's fcompute: call the packed function ``name``."""
    return tdsl.call_packed(name, *args)


def call_extern(dtype: Any, name: str, *args: Any, source: "str | None" = None,
                grid: Any = None, block: Any = None, span: Any = None) -> Any:
    """In an extern stage's fcompute: call the C function ``name``; for CUDA, ``source``
    defines ``__device__ void name(...)`` and ``grid``/``block`` the launch whose every
    thread calls it (a tdsl extension, see ``tdsl.call_extern``)."""
    return tdsl.call_extern(dtype, name, *args, source=source, grid=grid, block=block)


#: C math functions (float, double and CUDA fast forms) that ``call_pure_extern`` maps to
#: tdsl's intrinsics, by base name
_EXTERN_MATH = {"exp": exp, "exp2": exp2, "log": log, "log2": log2, "log10": log10,
                "sqrt": sqrt, "rsqrt": rsqrt, "tanh": tanh, "erf": erf, "fabs": abs,
                "abs": abs, "floor": floor, "ceil": ceil, "round": round, "trunc": trunc,
                "sin": sin, "cos": cos, "pow": power, "fmax": tdsl.maximum,
                "fmin": tdsl.minimum, "fmod": None}


def call_pure_extern(dtype: Any, func_name: str, *args: Any, span: Any = None) -> Expr:
    """A call of a C math function inside a compute body (``expf``, ``__expf``, ``sqrt``,
    ``powf``...): tdsl has no calls to arbitrary external scalar functions, so the C math
    library's names become tdsl's own intrinsics, computed in ``dtype``."""
    base = func_name[2:] if func_name.startswith("__") else func_name
    if base not in _EXTERN_MATH and base.endswith("f") and base[:-1] in _EXTERN_MATH:
        base = base[:-1]
    if base not in _EXTERN_MATH:
        known = ", ".join(sorted(k for k in _EXTERN_MATH))
        raise tdsl.TDSLError(f"tir.call_pure_extern: '{func_name}' is not a C math function "
                             f"tdsl knows (it has no calls to other external scalar functions); "
                             f"known: {known} (with an 'f' suffix or '__' prefix too)")
    want = as_dtype(str(dtype))
    args_e = [_e.convert(a, want) for a in args]
    args_e = [a if a.dtype == want else a.astype(want) for a in args_e]
    if base == "fmod":
        return truncmod(*args_e)
    return _EXTERN_MATH[base](*args_e)


def vscale() -> Any:
    """SVE's vector-length multiple: a symbolic size no tdsl target binds, so a program
    using it is refused at build (unbound variable ``vscale``); expressions may hold it."""
    return tdsl.size_var("vscale")


#: TVM's TIR statement classes (a test of a lowered function's nodes): refused by name
_TIR_STMTS = frozenset({"Stmt", "Evaluate", "For", "While", "IfThenElse", "SeqStmt", "LetStmt",
                        "AttrStmt", "AssertStmt", "Allocate", "AllocateConst", "BufferStore",
                        "BufferRealize", "ProducerStore", "ProducerRealize", "Prefetch",
                        "DeclBuffer", "Block", "BlockRealize"})


def __getattr__(name: str) -> Any:
    if name == "PrimFunc":
        from tdsl.stmt import PrimFunc
        return PrimFunc
    if name in ("call_intrin", "call_llvm_intrin"):
        raise tdsl.TDSLError(f"tvm.tir.{name} is not supported by tdsl.compat (no TIR "
                             f"intrinsic calls); see the README section 'Coming from TVM'")
    if name in _TIR_STMTS:
        raise tdsl.TDSLError(f"tvm.tir.{name} is a TIR statement class: tdsl lowers to its own "
                             f"IR (tdsl.stmt), not TVM's TIR, so a lowered function holds no "
                             f"TIR statements to test for; see the README section 'Coming from "
                             f"TVM'")
    if name in ("transform", "stmt_functor", "stmt"):
        raise tdsl.TDSLError(f"tvm.tir.{name} is not supported by tdsl.compat: tdsl lowers to "
                             f"its own IR (tdsl.stmt), not TVM's TIR, so TIR passes, visitors "
                             f"and statement classes (tir.transform.prim_func_pass, "
                             f"'tir.add_lower_pass') have nothing to run on; see the README "
                             f"section 'Coming from TVM'")
    raise AttributeError(f"module 'tvm.tir' (tdsl.compat) has no attribute {name!r}")


__all__ = ["Buffer", "decl_buffer", "ir_builder",
           "call_packed", "call_extern", "call_pure_extern", "const", "Select", "IntImm",
           "FloatImm", "Var", "SizeVar", "Cast", "cast",
           "indexdiv", "indexmod", "floordiv", "floormod", "truncdiv", "truncmod", "ceildiv",
           "div", "max", "min", "exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh",
           "sigmoid", "erf", "abs", "floor", "ceil", "round", "trunc", "sin", "cos", "isnan",
           "power", "pow", "fmod", "if_then_else", "all", "any", "max_value", "min_value",
           "Add", "Sub", "Mul", "Div", "FloorDiv", "FloorMod", "Min", "Max", "EQ", "NE", "LT",
           "LE", "GT", "GE", "And", "Or", "Not", "Call", "PrimExpr", "bitwise_and", "bitwise_or",
           "bitwise_xor", "bitwise_not", "shift_left", "shift_right", "vscale"]
