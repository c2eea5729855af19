"""The integer arithmetic analyzer that lowering uses (after TVM's ``arith.Analyzer``).

Index expressions (int32/int64) are rewritten into a linear canonical form
(``linear.Lin``: coefficient x atom + constant), and floor division/modulo,
min/max and comparisons are folded with the rules in ``rules.py`` using constant
bounds of atoms (from ``bind``, ``constraint`` and ``SizeVar >= 1``) and symbolic
facts ``lin >= 0`` (from symbolic ranges and constraints).  Pure Python over the
tdsl nodes: a typical index expression takes tens of microseconds.

Integer *data* (anything that reads memory, and all int8/uint8 arithmetic) wraps at
its width, so it only gets the ring identities of ``data.py`` (docs/ir.md, "Integer
semantics"); floats are only constant-folded, never reassociated.
"""
from __future__ import annotations

from typing import Any

from ..dtype import DType
from ..expr import (Add, And, Call, Cast, Const, EQ, Expr, FloorDiv,
                    FloorMod, GE, GT, LE, LT, Max, Min, Mul, NE, Not, Or, Select,
                    SizeVar, Sub, Var, convert)
from ..visitor import map_children
from .constfold import fold_cast, fold_node, int_range
from .data import DataMixin, wrap_lin
from .interval import Interval
from .intset import IntSetMixin
from .linear import (RANK_CALL, RANK_CAST, RANK_DIV, RANK_MAX, RANK_MIN, RANK_SELECT,
                     RANK_VAR, Lin, gkey, lin_add, lin_atom,
                     lin_const, lin_key, lin_scale, lin_to_expr, opaque_key)
from .bounds import INDEX_INTS, Bound, BoundsMixin, _intersect, _judge, _single_term_bound
from .rules import RulesMixin

_TRUE = Const(True, DType.BOOL)
_FALSE = Const(False, DType.BOOL)
_CMP = (LT, LE, GT, GE, EQ, NE)
_NEGATE = {LT: GE, GE: LT, LE: GT, GT: LE, EQ: NE, NE: EQ}
_SWAP = {LT: GT, GT: LT, LE: GE, GE: LE, EQ: EQ, NE: NE}


class _Constraint:
    """Context manager of ``Analyzer.constraint``: adds facts, restores on exit."""

    __slots__ = ("ana", "cond", "saved")

    def __init__(self, ana: "Analyzer", cond: Expr):
        self.ana = ana
        self.cond = cond

    def __enter__(self) -> "Analyzer":
        ana = self.ana
        self.saved = (ana._cbounds, ana._cfacts, ana._true, ana._refs)
        ana._cbounds = dict(ana._cbounds)
        ana._cfacts = list(ana._cfacts)
        ana._true = set(ana._true)
        ana._refs = list(ana._refs)
        ana._add_constraint(self.cond)
        return ana

    def __exit__(self, *exc: Any) -> None:
        ana = self.ana
        ana._cbounds, ana._cfacts, ana._true, ana._refs = self.saved
        ana._rebuild_facts()


class _Binding:
    """What ``Analyzer.bind`` returns: the binding is already in effect; used as a context
    manager (``with ana.bind(v, Range(0, n)): ...``) it restores what was known of the
    variable before, so that a fact such as "the loop runs" (``n >= 1``) does not outlive
    the code it describes."""

    __slots__ = ("ana", "var", "saved")

    def __init__(self, ana: "Analyzer", var: Var, saved: tuple):
        self.ana = ana
        self.var = var
        self.saved = saved

    def __enter__(self) -> "Analyzer":
        return self.ana

    def __exit__(self, *exc: Any) -> None:
        self.ana._restore_binding(self.var, self.saved)


class Analyzer(RulesMixin, IntSetMixin, DataMixin, BoundsMixin):
    """Simplifies, bounds and compares integer expressions given what is known of the
    variables: ranges (``bind(var, Range)``), values (``bind(var, expr)``) and
    conditions (``with constraint(cond)``)."""

    def __init__(self) -> None:
        self._var_bounds: dict[Var, Bound] = {}
        self._bind_facts: dict[Var, list[Lin]] = {}
        self._subst: dict[Var, Expr] = {}
        self._subst_lin: dict[Var, Lin] = {}
        self._cbounds: dict[Any, Bound] = {}      # atom key -> bound, from constraints
        self._cfacts: list[Lin] = []               # facts f >= 0, from constraints
        self._true: set = set()                    # gkeys of conditions assumed true
        self._refs: list = []                      # keeps alive what keys refer to by id
        self._facts: list[Lin] = []
        self._depth = 0
        self._memo: dict[int, tuple] = {}
        self._dmemo: dict[int, tuple] = {}       # id -> (expr, is data), see data.py
        self._data_on = False                      # does the current call see data?
        self._bcache: dict[Any, Bound] = {}
        self._dom_vars: frozenset = frozenset()   # int_set's ranging variables

    # ---- public API ------------------------------------------------------------------
    def bind(self, var: Var, value: Any) -> _Binding:
        """Declare ``var``'s range (a ``Range`` or ``Interval``) or its value (an expression).

        Takes effect at once.  ``with ana.bind(var, value): ...`` scopes it: on exit the
        previous knowledge of ``var`` comes back (use this for facts that hold only inside
        a loop or a region of code)."""
        var = var.as_expr()
        saved = (self._subst.get(var), self._subst_lin.get(var), self._var_bounds.get(var),
                 self._bind_facts.get(var))
        # a new binding replaces what was known of var
        self._subst.pop(var, None)
        self._subst_lin.pop(var, None)
        self._var_bounds.pop(var, None)
        if self._bind_facts.pop(var, None):
            self._rebuild_facts()
        self._begin()
        self._scan(value)
        try:
            if isinstance(value, Interval):
                self._bind_range(var, value.min, value.max)
            elif hasattr(value, "extent") and hasattr(value, "min") and not isinstance(value, Expr):
                hi = None if value.extent is None else value.min + value.extent - 1
                self._bind_range(var, value.min, hi)
            else:
                e = convert(value, var.dtype)
                if e.dtype != var.dtype:
                    e = Cast(e, var.dtype)
                e = self._simp(e)
                self._subst[var] = e
                if var.dtype in INDEX_INTS:
                    self._subst_lin[var] = self._lin(e)
        finally:
            self._end()
        return _Binding(self, var, saved)

    def _restore_binding(self, var: Var, saved: tuple) -> None:
        """Put back what was known of ``var`` before a scoped ``bind``."""
        for table, value in zip((self._subst, self._subst_lin, self._var_bounds, self._bind_facts),
                                saved):
            if value is None:
                table.pop(var, None)
            else:
                table[var] = value
        self._rebuild_facts()
        self._memo = {} if self._depth == 0 else self._memo
        self._bcache = {}

    def constraint(self, cond: Expr) -> _Constraint:
        """``with ana.constraint(i < n): ...`` assumes ``cond`` inside the block."""
        return _Constraint(self, cond)

    def simplify(self, expr: Expr) -> Expr:
        """The canonical, folded form of ``expr`` given what is known."""
        if not isinstance(expr, Expr):
            expr = convert(expr)
        self._scan(expr)
        if self._depth:
            return self._simp(expr)
        self._depth = 1
        try:
            return self._simp(expr)
        finally:
            self._depth = 0
            self._memo = {}
            self._dmemo = {}
            self._data_on = False
            self._bcache = {}

    def const_int_bound(self, expr: Expr) -> "tuple[int | None, int | None]":
        """Inclusive constant bounds of an integer expression (None = unbounded)."""
        expr = convert(expr)
        self._begin()
        self._scan(expr)
        try:
            dt = expr.dtype
            if dt in INDEX_INTS and not self._has_data(expr):
                lin = self._lin(expr)
                return self._refined_bound(lin)
            e = self._simp(expr)
            if type(e) is Const:
                return (int(e.value), int(e.value)) if not dt.is_float else (None, None)
            if dt.is_bool:
                return (0, 1)
            if dt.is_int:
                return int_range(dt)
            return (None, None)
        finally:
            self._end()

    def can_prove(self, cond: Expr) -> bool:
        """True only if ``cond`` certainly holds given what is known."""
        cond = convert(cond)
        self._begin()
        self._scan(cond)
        try:
            r = self._bool(cond)
            return type(r) is Const and bool(r.value)
        finally:
            self._end()

    def can_prove_equal(self, a: Any, b: Any) -> bool:
        """True only if ``a`` and ``b`` certainly have the same value."""
        a = convert(a)
        b = convert(b, a.dtype)
        if a is b:
            return True
        self._begin()
        self._scan(a, b)
        try:
            data = self._is_data_int(a) or self._is_data_int(b)
            if a.dtype in INDEX_INTS and b.dtype in INDEX_INTS and not data:
                d = lin_add(self._lin(a), self._lin(b), -1)
                if not d.terms:
                    return d.const == 0
                return _judge(EQ, *self._refined_bound(d)) is True
            if data and a.dtype == b.dtype:
                d = wrap_lin(lin_add(self._dlin(a), self._dlin(b), -1), a.dtype)
                return not d.terms and d.const == 0
            return gkey(self._simp(a)) == gkey(self._simp(b))
        finally:
            self._end()

    # ---- call bracketing ---------------------------------------------------------------
    def _begin(self) -> None:
        self._depth += 1

    def _end(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._memo = {}
            self._dmemo = {}
            self._data_on = False
            self._bcache = {}

    # ---- knowledge -----------------------------------------------------------------------
    def _bind_range(self, var: Var, lo_e: Any, hi_e: Any) -> None:
        self._scan(lo_e, hi_e)
        facts = []
        lo = hi = None
        av = lin_atom(var, self._var_key(var))
        if lo_e is not None:
            lmin = self._lin(convert(lo_e, var.dtype))
            lo = self._refined_bound(lmin)[0]
            if lmin.terms:
                facts.append(lin_add(av, lmin, -1))
        if hi_e is not None:
            lmax = self._lin(convert(hi_e, var.dtype))
            hi = self._refined_bound(lmax)[1]
            if lmax.terms:
                facts.append(lin_add(lmax, av, -1))
        kept = []
        for g in (g for f in facts for g in self._expand_fact(f)):
            if len(g.terms) != 1:
                kept.append(g)
            elif next(iter(g.terms.values()))[0] is var:   # c*var + k >= 0: a constant bound
                lo, hi = _intersect((lo, hi), _single_term_bound(g))
        self._var_bounds[var] = (lo, hi)
        self._bind_facts[var] = kept
        self._rebuild_facts()
        self._bcache = {}

    def _expand_fact(self, f: Lin, depth: int = 2) -> list[Lin]:
        """``f`` and what follows from it through min/max and floor division:
        ``c*min(a, b) + r >= 0`` (``c > 0``) implies ``c*a + r >= 0`` and ``c*b + r >= 0``
        (likewise ``-c*max``); ``k*(X//k) <= X`` turns ``c*(X//k) + r >= 0`` into
        ``c*X + k*r >= 0`` and ``k*(X//k) >= X - k + 1`` handles ``c < 0``."""
        out = [f]
        if depth == 0:
            return out
        for k, (x, c) in f.terms.items():
            r = k[0]
            if (r == RANK_MIN and c > 0) or (r == RANK_MAX and c < 0):
                rest = Lin({kk: v for kk, v in f.terms.items() if kk != k}, f.const)
                for op in (x.a, x.b):
                    out.extend(self._expand_fact(lin_add(rest, lin_scale(self._lin(op), c)),
                                                 depth - 1))
                break
            if r == RANK_DIV and type(x.b) is Const and x.b.value > 0:
                d = x.b.value
                rest = Lin({kk: v for kk, v in f.terms.items() if kk != k}, f.const)
                num = self._lin(x.a)
                if c < 0:
                    num = lin_add(num, lin_const(1 - d))
                out.extend(self._expand_fact(lin_add(lin_scale(rest, d), lin_scale(num, c)),
                                             depth - 1))
                break
        return out

    def _rebuild_facts(self) -> None:
        out = [f for fs in self._bind_facts.values() for f in fs]
        out.extend(self._cfacts)
        self._facts = out
        self._bcache = {}

    def _add_constraint(self, cond: Expr) -> None:
        self._begin()
        self._scan(cond)
        try:
            c = self._bool(convert(cond))
            self._add_fact_expr(c)
        finally:
            self._end()
        self._rebuild_facts()

    def _add_fact_expr(self, c: Expr) -> None:
        if type(c) is Const:
            return
        self._true.add(gkey(c))
        self._refs.append(c)
        cls = type(c)
        if cls is And:
            self._add_fact_expr(c.a)
            self._add_fact_expr(c.b)
        elif (cls in _CMP and c.a.dtype in INDEX_INTS and not self._has_data(c.a)
              and not self._has_data(c.b)):        # no bound facts from wrapping data
            d = lin_add(self._lin(c.a), self._lin(c.b), -1)
            if cls is LT: facts = [lin_add(lin_scale(d, -1), lin_const(-1))]
            elif cls is LE: facts = [lin_scale(d, -1)]
            elif cls is GT: facts = [lin_add(d, lin_const(-1))]
            elif cls is GE: facts = [d]
            elif cls is EQ: facts = [d, lin_scale(d, -1)]
            else: facts = []
            for g in (g for f in facts for g in self._expand_fact(f)):
                if len(g.terms) != 1:
                    self._cfacts.append(g)
                    continue
                (k, (x, _)), = g.terms.items()      # c*atom + k >= 0: a constant bound
                b = _single_term_bound(g)
                old = self._cbounds.get(k)
                self._cbounds[k] = b if old is None else _intersect(old, b)
                self._refs.append(x)
        self._bcache = {}

    # ---- dispatch -------------------------------------------------------------------------
    def _simp(self, e: Expr) -> Expr:
        dt = e.dtype
        if dt.is_int:
            return self._to_expr(self._lin(e) if dt in INDEX_INTS else self._dlin(e), dt)
        if dt is DType.BOOL:
            return self._bool(e)
        return self._other(e)

    def _to_expr(self, lin: Lin, dt: DType) -> Expr:
        ex = lin_to_expr(lin, dt)
        self._memo[id(ex)] = (ex, lin)
        return ex

    def _atom(self, node: Expr, key: Any) -> Lin:
        """A one-atom form; registered so that re-linearizing ``node`` is free."""
        lin = lin_atom(node, key)
        self._memo[id(node)] = (node, lin)
        return lin

    def _lin(self, e: Expr) -> Lin:
        m = self._memo.get(id(e))
        if m is not None:
            return m[1]
        if self._has_data(e):
            return self._dlin(e)
        f = _LIN.get(type(e))
        lin = f(self, e) if f is not None else self._l_other(e)
        if not lin.terms:                 # a constant: the value the backends compute
            lin = wrap_lin(lin, e.dtype)
        self._memo[id(e)] = (e, lin)
        return lin

    @staticmethod
    def _var_key(v: Var) -> tuple:
        return (RANK_VAR, v.name, v.seq, v.dtype)

    def _l_const(self, e: Const) -> Lin:
        return lin_const(e.value)

    def _l_var(self, e: Var) -> Lin:
        s = self._subst_lin.get(e)
        if s is not None:
            return s
        return lin_atom(e, (RANK_VAR, e.name, e.seq, e.dtype))

    def _l_add(self, e: Add) -> Lin:
        r = lin_add(self._lin(e.a), self._lin(e.b))
        return self._merge_divmod(r) if len(r.terms) > 1 else r

    def _l_sub(self, e: Sub) -> Lin:
        r = lin_add(self._lin(e.a), self._lin(e.b), -1)
        return self._merge_divmod(r) if len(r.terms) > 1 else r

    def _l_mul(self, e: Mul) -> Lin:
        a, b = self._lin(e.a), self._lin(e.b)
        if not b.terms:
            return lin_scale(a, b.const)
        if not a.terms:
            return lin_scale(b, a.const)
        return self._mul(a, b, e.dtype)

    def _l_div(self, e: FloorDiv) -> Lin:
        return self._divmod(False, self._lin(e.a), self._lin(e.b), e.dtype)

    def _l_mod(self, e: FloorMod) -> Lin:
        return self._divmod(True, self._lin(e.a), self._lin(e.b), e.dtype)

    def _l_min(self, e: Min) -> Lin:
        return self._minmax(False, self._lin(e.a), self._lin(e.b), e.dtype)

    def _l_max(self, e: Max) -> Lin:
        return self._minmax(True, self._lin(e.a), self._lin(e.b), e.dtype)

    def _l_select(self, e: Select) -> Lin:
        c = self._bool(e.cond)
        if type(c) is Const:
            return self._lin(e.true_value if c.value else e.false_value)
        dt = e.dtype
        t, f = self._lin(e.true_value), self._lin(e.false_value)
        kt, kf = lin_key(t, dt), lin_key(f, dt)
        if kt == kf:
            return t
        node = Select(c, self._to_expr(t, dt), self._to_expr(f, dt))
        return self._atom(node, (RANK_SELECT, "Select", dt, (gkey(c), kt, kf)))

    def _l_cast(self, e: Cast) -> Lin:
        v = self._simp(e.value)
        if type(v) is Const:
            r = fold_cast(v, e.dtype)
            if r is not None:
                return lin_const(r.value)
        if v.dtype == e.dtype:
            return self._lin(v)
        node = e if v is e.value else Cast(v, e.dtype)
        return self._atom(node, (RANK_CAST, "Cast", e.dtype, (gkey(v),)))

    def _l_call(self, e: Call) -> Lin:
        args = tuple(self._simp(a) for a in e.args)
        node = e if all(x is y for x, y in zip(args, e.args)) else Call(e.func, args, e.dtype)
        node = fold_node(node)
        if type(node) is Const:
            return lin_const(node.value)
        return self._atom(node, (RANK_CALL, node.func, node.dtype,
                               tuple(gkey(a) for a in args)))

    def _l_other(self, e: Expr) -> Lin:
        x = e.as_expr()
        if x is not e:
            return self._lin(x)
        return self._atom(e, opaque_key(e))

    # ---- bool and other dtypes ---------------------------------------------------------------
    def _bool(self, e: Expr) -> Expr:
        cls = type(e)
        if cls is Const:
            return e
        if cls in _CMP:
            if e.a.dtype.is_int and (self._is_data_int(e.a) or self._is_data_int(e.b)):
                r = self._dcmp(cls, e)
            elif e.a.dtype in INDEX_INTS:
                r = self._cmp(cls, e.a, e.b)
            else:
                a, b = self._simp(e.a), self._simp(e.b)
                r = fold_node(e if a is e.a and b is e.b else cls(a, b))
        elif cls is And or cls is Or:
            r = self._logic(e)
        elif cls is Not:
            r = self._not(self._bool(e.a))
        else:
            r = self._other(e)
        if self._true and type(r) is not Const and gkey(r) in self._true:
            return _TRUE
        return r

    def _logic(self, e: Expr) -> Expr:
        is_and = type(e) is And
        a = self._bool(e.a)
        if type(a) is Const:
            if bool(a.value) != is_and:   # False and .. / True or ..
                return a
            return self._bool(e.b)
        b = self._bool(e.b)
        if type(b) is Const:
            return a if bool(b.value) == is_and else b
        if gkey(a) == gkey(b):
            return a
        if a is e.a and b is e.b:
            return e
        return And(a, b) if is_and else Or(a, b)

    def _not(self, a: Expr) -> Expr:
        cls = type(a)
        if cls is Const:
            return Const(not a.value, DType.BOOL)
        if cls is Not:
            return a.a
        if cls in _CMP and a.a.dtype.is_int:
            return _NEGATE[cls](a.a, a.b)
        return Not(a)

    def _cmp(self, cls: type, a: Expr, b: Expr) -> Expr:
        dt = a.dtype
        la, lb = self._lin(a), self._lin(b)
        d = lin_add(la, lb, -1)
        r = self._decide(cls, d)
        if r is not None:
            return _TRUE if r else _FALSE
        # normal form: common terms cancelled, the constant on one side and positive
        ta, tb = dict(la.terms), dict(lb.terms)
        for k, v in la.terms.items():
            w = lb.terms.get(k)
            if w is not None:
                m = min(v[1], w[1]) if v[1] > 0 and w[1] > 0 else (
                    max(v[1], w[1]) if v[1] < 0 and w[1] < 0 else 0)
                if m:
                    if v[1] == m: del ta[k]
                    else: ta[k] = (v[0], v[1] - m)
                    if w[1] == m: del tb[k]
                    else: tb[k] = (w[0], w[1] - m)
        c = la.const - lb.const
        if not tb:                       # x + 3 < 5  ->  x < 2
            na, nb = Lin(ta, 0), Lin(tb, -c)
        elif not ta:                     # 5 < x  ->  x > 5
            cls, na, nb = _SWAP[cls], Lin(tb, 0), Lin(ta, c)
        elif c > 0:                      # i + 4 < n
            na, nb = Lin(ta, c), Lin(tb, 0)
        else:                            # i < n + 4
            na, nb = Lin(ta, 0), Lin(tb, -c)
        g = 0
        for lin in (na, nb):
            for _, co in lin.terms.values():
                g = _gcd(g, co)
            g = _gcd(g, lin.const)
        if g > 1:                        # i*4 < n*4 + 8  ->  i < n + 2
            na, nb = _div_exact(na, g), _div_exact(nb, g)
        return cls(self._to_expr(na, dt), self._to_expr(nb, dt))

    def _decide(self, cls: type, d: Lin) -> "bool | None":
        if not d.terms:
            return _judge(cls, d.const, d.const)
        lo, hi = self._lin_bound(d)
        r = _judge(cls, lo, hi)
        if r is None and self._facts:
            lo, hi = self._refine(d, lo, hi)
            r = _judge(cls, lo, hi)
        if r is None and (cls is EQ or cls is NE):
            g = 0
            for _, c in d.terms.values():
                g = _gcd(g, c)
            if g > 1 and d.const % g:
                return cls is NE
        return r

    def _other(self, e: Expr) -> Expr:
        cls = type(e)
        if cls is Const:
            return e
        if isinstance(e, Var):
            s = self._subst.get(e)
            return e if s is None else s
        if cls is Select:
            c = self._bool(e.cond)
            if type(c) is Const:
                return self._simp(e.true_value if c.value else e.false_value)
            t, f = self._simp(e.true_value), self._simp(e.false_value)
            if t is f or gkey(t) == gkey(f):
                return t
            if c is e.cond and t is e.true_value and f is e.false_value:
                return e
            return Select(c, t, f)
        if not cls._fields:
            x = e.as_expr()
            return e if x is e else self._simp(x)
        return fold_node(map_children(e, self._simp))

def _div_exact(a: Lin, g: int) -> Lin:
    return Lin({k: (x, c // g) for k, (x, c) in a.terms.items()}, a.const // g)


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return abs(a)


_LIN = {Const: Analyzer._l_const, Var: Analyzer._l_var, SizeVar: Analyzer._l_var,
        Add: Analyzer._l_add, Sub: Analyzer._l_sub, Mul: Analyzer._l_mul,
        FloorDiv: Analyzer._l_div, FloorMod: Analyzer._l_mod, Min: Analyzer._l_min,
        Max: Analyzer._l_max, Select: Analyzer._l_select, Cast: Analyzer._l_cast,
        Call: Analyzer._l_call}


def simplify(expr: Expr) -> Expr:
    """Simplify ``expr`` with a fresh analyzer (no variable bounds)."""
    return Analyzer().simplify(expr)
