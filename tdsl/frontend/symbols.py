"""Symbolic sizes: PyTorch's SymInts (sympy expressions over shape symbols) as tdsl Exprs.

Each distinct shape symbol of a traced graph (``s0``, ``s77``, ...) becomes one ``td.var``,
shared by every Value whose shape mentions it; derived sizes (``2*s0``, ``s0 // 2``) become
tdsl Exprs over those vars.  The table also remembers where each symbol can be read at run
time (graph input ``k``, dimension ``d``), which fallback nodes with symbolic arguments need.
"""
from __future__ import annotations

from typing import Any, Optional

import sympy

from ..expr import Expr
from ..intrin import maximum, minimum
from ..tensor import var
from .errors import ImportFailure


class SymbolTable:
    """sympy symbol -> tdsl var, plus where each symbol is found among the graph inputs."""

    def __init__(self, names: Optional[dict] = None) -> None:
        self.vars: dict = {}          # sympy.Symbol -> td Var
        self.sources: dict = {}       # sympy.Symbol -> (input index, dim)
        self._names = dict(names or {})   # sympy.Symbol -> preferred var name

    def name(self, sym: sympy.Symbol, name: str) -> None:
        """Prefer ``name`` for the var of ``sym`` (a user's name for a dynamic dimension)."""
        self._names.setdefault(sym, name)

    def var(self, sym: sympy.Symbol) -> Expr:
        v = self.vars.get(sym)
        if v is None:
            v = var(self._names.get(sym, str(sym)))
            self.vars[sym] = v
        return v

    def note_input(self, k: int, shape: Any) -> None:
        """Record the symbols that input ``k``'s dimensions are (a bare symbol only)."""
        for d, s in enumerate(shape):
            e = sym_expr(s)
            if isinstance(e, sympy.Symbol):
                self.sources.setdefault(e, (k, d))

    def dim(self, s: Any) -> "int | Expr":
        """A size (int, SymInt or sympy expr) as an int or a tdsl Expr."""
        return self.convert(sym_expr(s))

    def shape(self, shape: Any) -> tuple:
        return tuple(self.dim(s) for s in shape)

    def convert(self, e: Any) -> "int | Expr":
        """A sympy integer expression as an int or a tdsl Expr (ImportFailure if it uses a
        function tdsl has no counterpart for)."""
        if isinstance(e, (int, bool)):
            return int(e)
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            return self.var(e)
        args = [self.convert(a) for a in e.args]
        fn = type(e).__name__
        if isinstance(e, sympy.Add):
            out = args[0]
            for a in args[1:]:
                out = out + a
            return out
        if isinstance(e, sympy.Mul):
            out = args[0]
            for a in args[1:]:
                out = out * a
            return out
        if fn in ("FloorDiv",):
            return args[0] // args[1]
        if fn == "CeilDiv":
            return (args[0] + args[1] - 1) // args[1]
        if fn in ("Mod", "PythonMod") or isinstance(e, sympy.Mod):
            return args[0] % args[1]
        if fn in ("Max",) or isinstance(e, sympy.Max):
            return _fold(maximum, args)
        if fn in ("Min",) or isinstance(e, sympy.Min):
            return _fold(minimum, args)
        if fn == "PowByNatural" or isinstance(e, sympy.Pow):
            if isinstance(args[1], int) and args[1] >= 0:
                out: Any = 1
                for _ in range(args[1]):
                    out = out * args[0]
                return out
        raise ImportFailure(f"symbolic size {e} uses {fn}, which tdsl cannot express")

    def unbound(self) -> list:
        """Symbols used by the graph that no input dimension provides."""
        return [s for s in self.vars if s not in self.sources]


def _fold(fn: Any, args: list) -> Any:
    out = args[0]
    for a in args[1:]:
        out = fn(out, a)
    return out


def sym_expr(s: Any) -> Any:
    """The sympy expression of a SymInt (an int stays an int)."""
    node = getattr(s, "node", None)
    if node is not None and hasattr(node, "expr"):
        e = node.expr
        return int(e) if getattr(e, "is_Integer", False) else e
    if isinstance(s, sympy.Basic):
        return int(s) if s.is_Integer else s
    return int(s)


def is_symbolic(s: Any) -> bool:
    """True for a SymInt/SymFloat whose value is not a constant."""
    e = sym_expr(s) if hasattr(s, "node") else s
    return isinstance(e, sympy.Basic) and not e.is_number
