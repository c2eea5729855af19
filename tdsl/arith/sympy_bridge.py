"""Conversion between tdsl expressions and SymPy, for symbolic shape reasoning and tests.

``to_sympy`` maps each ``Var`` to an integer symbol (``SizeVar`` -> positive) that
remembers its variable, so ``from_sympy`` gives back the very same ``Var`` objects;
two different variables with the same name stay different symbols.  Floor
division becomes ``floor(a/b)``, modulo ``Mod(a, b)`` (a constant zero divisor gives 0, a
symbolic divisor is modelled as nonzero) — left unevaluated, because SymPy (1.14)
rewrites ``Mod(2*Mod(x, 3), 3)`` to ``2*Mod(x, 3)``, which is wrong at x = 2.  Loads and other
non-arithmetic nodes are refused.  Integers are mathematical (index semantics,
docs/ir.md): int8/uint8 wraparound is not modelled.  Far too slow for lowering: use
``Analyzer``.
"""
from __future__ import annotations

from typing import Any, Mapping

import sympy

from ..dtype import INDEX, DType
from ..expr import (Add, And, Call, Cast, Const, Div, EQ, Expr, FloorDiv, FloorMod, GE, GT,
                    Intrinsic, LE, LT, Max, Min, Mul, NE, Not, Or, Select, SizeVar, Sub, Var)


class VarSymbol(sympy.Dummy):
    """An integer SymPy symbol standing for one tdsl ``Var`` (identity-keyed)."""

    def __new__(cls, var: Var) -> "VarSymbol":
        assumptions = {"integer": True} if var.dtype.is_int else {"real": True}
        if isinstance(var, SizeVar):
            assumptions["positive"] = True
        obj = super().__new__(cls, var.name, dummy_index=id(var), **assumptions)
        obj.tdsl_var = var
        return obj

    def _sympystr(self, printer: Any) -> str:
        return self.name


_BINOPS = {Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
           Div: lambda a, b: a / b, FloorDiv: lambda a, b: sympy.floor(a / b),
           FloorMod: lambda a, b: sympy.Mod(a, b, evaluate=False), Min: sympy.Min, Max: sympy.Max,
           LT: sympy.Lt, LE: sympy.Le, GT: sympy.Gt, GE: sympy.Ge, EQ: sympy.Eq, NE: sympy.Ne,
           And: sympy.And, Or: sympy.Or}
_FUNCS = {Intrinsic.ABS: sympy.Abs, Intrinsic.EXP: sympy.exp, Intrinsic.LOG: sympy.log,
          Intrinsic.SQRT: sympy.sqrt, Intrinsic.SIN: sympy.sin, Intrinsic.COS: sympy.cos,
          Intrinsic.TANH: sympy.tanh, Intrinsic.FLOOR: sympy.floor, Intrinsic.CEIL: sympy.ceiling,
          Intrinsic.POW: sympy.Pow}


def to_sympy(expr: Expr, symbols: "dict[Var, sympy.Symbol] | None" = None) -> sympy.Expr:
    """The SymPy form of ``expr``; ``symbols`` (filled in) maps variables to their symbols."""
    if symbols is None:
        symbols = {}

    def conv(e: Expr) -> Any:
        cls = type(e)
        if cls is Const:
            if e.dtype.is_bool:
                return sympy.true if e.value else sympy.false
            return sympy.Integer(e.value) if e.dtype.is_int else sympy.Float(e.value)
        if isinstance(e, Var):
            s = symbols.get(e)
            if s is None:
                s = symbols[e] = VarSymbol(e)
            return s
        f = _BINOPS.get(cls)
        if f is not None:
            a, b = conv(e.a), conv(e.b)
            if (cls is FloorDiv or cls is FloorMod) and e.dtype.is_int and b.is_zero:
                return sympy.Integer(0)          # integer x // 0 == x % 0 == 0 (docs/ir.md)
            return f(a, b)
        if cls is Not:
            return sympy.Not(conv(e.a))
        if cls is Select:
            return sympy.Piecewise((conv(e.true_value), conv(e.cond)),
                                   (conv(e.false_value), True))
        if cls is Cast:
            v = conv(e.value)
            if e.dtype.is_int and e.value.dtype.is_int:
                return v
            if e.dtype.is_int and e.value.dtype.is_bool:
                return sympy.Piecewise((1, v), (0, True))
            if e.dtype.is_float and not e.value.dtype.is_bool:
                return v
            raise TypeError(f"to_sympy: cannot convert a cast from {e.value.dtype} to {e.dtype}")
        if cls is Call and e.func in _FUNCS:
            return _FUNCS[e.func](*[conv(a) for a in e.args])
        x = e.as_expr()
        if x is not e:
            return conv(x)
        raise TypeError(f"to_sympy: cannot convert a {cls.__name__} node")

    return conv(expr)


def from_sympy(sexpr: Any, dtype: "DType | str" = INDEX,
               vars: "Mapping[str, Var] | None" = None) -> Expr:
    """A tdsl expression (integer ``dtype``) for a SymPy expression from ``to_sympy``.

    Symbols made by ``to_sympy`` give back their variable; other symbols are looked
    up by name in ``vars`` or become new variables (one per name).
    """
    from ..dtype import as_dtype
    dtype = as_dtype(dtype)
    made: dict[str, Var] = dict(vars or {})

    def c(v: int) -> Const:
        return Const(int(v), dtype)

    def conv(s: Any) -> Expr:
        if isinstance(s, VarSymbol):
            return s.tdsl_var
        if s is sympy.true or s is sympy.false:
            return Const(bool(s), DType.BOOL)
        if isinstance(s, sympy.Symbol):
            v = made.get(s.name)
            if v is None:
                v = made[s.name] = (SizeVar(s.name, dtype) if s.is_positive else Var(s.name, dtype))
            return v
        if s.is_Integer:
            return c(s)
        if s.is_Rational:
            raise ValueError(f"from_sympy: non-integer rational {s} outside floor()")
        if isinstance(s, sympy.Add):
            return _sum([conv(a) for a in sympy.Add.make_args(s)])
        if isinstance(s, sympy.Mul):
            num, den = sympy.fraction(s)
            if den != 1:
                raise ValueError(f"from_sympy: division {s} outside floor()")
            coeff, rest = s.as_coeff_Mul()
            factors = [conv(a) for a in sympy.Mul.make_args(rest)]
            prod = factors[0]
            for f in factors[1:]:
                prod = Mul(prod, f)
            if coeff == 1:
                return prod
            if coeff == -1:
                return Sub(c(0), prod)
            return Mul(prod, c(coeff))
        if isinstance(s, sympy.Pow):
            base, exp = s.args
            if exp.is_Integer and exp > 0:
                b = conv(base)
                out = b
                for _ in range(int(exp) - 1):
                    out = Mul(out, b)
                return out
            raise ValueError(f"from_sympy: power {s} is not integer arithmetic")
        if isinstance(s, sympy.floor):
            num, den = sympy.fraction(sympy.together(s.args[0]))
            return FloorDiv(conv(sympy.expand(num)), conv(den))
        if isinstance(s, sympy.ceiling):
            num, den = sympy.fraction(sympy.together(s.args[0]))
            n, d = conv(sympy.expand(num)), conv(den)
            return FloorDiv(Sub(Add(n, d), c(1)), d)   # valid for d > 0
        if isinstance(s, sympy.Mod):
            return FloorMod(conv(s.args[0]), conv(s.args[1]))
        if isinstance(s, (sympy.Min, sympy.Max)):
            cls = Min if isinstance(s, sympy.Min) else Max
            args = [conv(a) for a in s.args]
            out = args[0]
            for a in args[1:]:
                out = cls(out, a)
            return out
        if isinstance(s, sympy.Abs):
            return Call(Intrinsic.ABS, [conv(s.args[0])], dtype)
        if isinstance(s, sympy.Piecewise):
            return _piecewise(list(s.args))
        rel = {sympy.StrictLessThan: LT, sympy.LessThan: LE, sympy.StrictGreaterThan: GT,
               sympy.GreaterThan: GE, sympy.Equality: EQ, sympy.Unequality: NE}.get(type(s))
        if rel is not None:
            return rel(conv(s.lhs), conv(s.rhs))
        if isinstance(s, (sympy.And, sympy.Or)):
            cls = And if isinstance(s, sympy.And) else Or
            args = [conv(a) for a in s.args]
            out = args[0]
            for a in args[1:]:
                out = cls(out, a)
            return out
        if isinstance(s, sympy.Not):
            return Not(conv(s.args[0]))
        raise ValueError(f"from_sympy: unsupported {type(s).__name__}: {s}")

    def _piecewise(pairs: list) -> Expr:
        (val, cond), rest = pairs[0], pairs[1:]
        if cond is sympy.true or not rest:
            return conv(val)
        return Select(conv(cond), conv(val), _piecewise(rest))

    def _sum(parts: list) -> Expr:
        # positive parts first, then subtract negated ones: n - i rather than -i + n
        pos, neg = [], []
        for p in parts:
            if type(p) is Sub and type(p.a) is Const and p.a.value == 0:
                neg.append(p.b)
            elif type(p) is Const and p.value < 0:
                neg.append(c(-p.value))
            elif type(p) is Mul and type(p.b) is Const and p.b.value < 0:
                neg.append(p.a if p.b.value == -1 else Mul(p.a, c(-p.b.value)))
            else:
                pos.append(p)
        out = pos[0] if pos else None
        for p in pos[1:]:
            out = Add(out, p)
        for p in neg:
            out = Sub(c(0) if out is None else out, p)
        return out

    return conv(sympy.sympify(sexpr))
