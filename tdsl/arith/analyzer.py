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
                    FloorMod, GE, GT, Intrinsic, LE, LT, Max, Min, Mul, NE, Not, Or, Select,
                    SizeVar, Sub, Var, convert)
from ..visitor import map_children
from .constfold import fold_cast, fold_node, int_range
from .data import DataMixin, wrap_lin
from .interval import Interval
from .intset import IntSetMixin
from .linear import (RANK_CALL, RANK_CAST, RANK_DIV, RANK_MAX, RANK_MIN, RANK_MOD,
                     RANK_MUL, RANK_SELECT, RANK_VAR, Lin, gkey, lin_add, lin_atom,
                     lin_const, lin_key, lin_scale, lin_to_expr, opaque_key)
from .rules import RulesMixin

INDEX_INTS = frozenset({DType.INT32, DType.INT64})
_TRUE = Const(True, DType.BOOL)
_FALSE = Const(False, DType.BOOL)
_CMP = (LT, LE, GT, GE, EQ, NE)
_NEGATE = {LT: GE, GE: LT, LE: GT, GT: LE, EQ: NE, NE: EQ}
_SWAP = {LT: GT, GT: LT, LE: GE, GE: LE, EQ: EQ, NE: NE}

Bound = tuple  # (lo: int | None, hi: int | None), inclusive


def _judge(cls: type, lo: "int | None", hi: "int | None") -> "bool | None":
    """Decide ``d <cls> 0`` from bounds ``lo <= d <= hi``; None if undecided."""
    if cls is LT:
        if hi is not None and hi < 0: return True
        if lo is not None and lo >= 0: return False
    elif cls is LE:
        if hi is not None and hi <= 0: return True
        if lo is not None and lo > 0: return False
    elif cls is GT:
        if lo is not None and lo > 0: return True
        if hi is not None and hi <= 0: return False
    elif cls is GE:
        if lo is not None and lo >= 0: return True
        if hi is not None and hi < 0: return False
    elif cls is EQ:
        if lo == 0 and hi == 0: return True
        if (lo is not None and lo > 0) or (hi is not None and hi < 0): return False
    elif cls is NE:
        r = _judge(EQ, lo, hi)
        return None if r is None else not r
    return None


def _intersect(a: Bound, b: Bound) -> Bound:
    lo = a[0] if b[0] is None else (b[0] if a[0] is None else max(a[0], b[0]))
    hi = a[1] if b[1] is None else (b[1] if a[1] is None else min(a[1], b[1]))
    return (lo, hi)


def _single_term_bound(f: Lin) -> Bound:
    """The bound on the atom of a one-term fact ``c*atom + q >= 0``."""
    (_, co), = f.terms.values()
    q = f.const
    return (-(q // co), None) if co > 0 else (None, q // (-co))


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


class Analyzer(RulesMixin, IntSetMixin, DataMixin):
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

    # ---- bounds ----------------------------------------------------------------------------
    def _lin_bound(self, lin: Lin) -> Bound:
        lo = hi = lin.const
        for k, (x, c) in lin.terms.items():
            alo, ahi = self._atom_bound(k, x)
            if c > 0:
                lo = None if lo is None or alo is None else lo + c * alo
                hi = None if hi is None or ahi is None else hi + c * ahi
            else:
                lo = None if lo is None or ahi is None else lo + c * ahi
                hi = None if hi is None or alo is None else hi + c * alo
            if lo is None and hi is None:
                break
        return (lo, hi)

    def _refine(self, d: Lin, lo: "int | None", hi: "int | None") -> Bound:
        """Tighten ``lo <= d <= hi`` with the facts ``f >= 0``:
        ``d >= min(d - f)`` and ``d <= max(d + f)`` (computed without building them)."""
        dterms = d.terms
        ab = self._atom_bound
        for f in self._facts:
            fterms = f.terms
            for k in fterms:
                if k in dterms:
                    break
            else:
                continue                 # shares no atom with d: cannot tighten
            l2 = d.const - f.const       # running min of d - f
            h2 = d.const + f.const       # running max of d + f
            for k, (x, c) in dterms.items():
                fc = fterms.get(k)
                fc = 0 if fc is None else fc[1]
                cl, ch = c - fc, c + fc
                if not (cl or ch):
                    continue
                alo, ahi = ab(k, x)
                if l2 is not None and cl:
                    t = alo if cl > 0 else ahi
                    l2 = None if t is None else l2 + cl * t
                if h2 is not None and ch:
                    t = ahi if ch > 0 else alo
                    h2 = None if t is None else h2 + ch * t
                if l2 is None and h2 is None:
                    break
            else:
                for k, (x, c) in fterms.items():
                    if k in dterms:
                        continue
                    alo, ahi = ab(k, x)
                    if l2 is not None:   # coefficient -c in d - f
                        t = ahi if c > 0 else alo
                        l2 = None if t is None else l2 - c * t
                    if h2 is not None:   # coefficient +c in d + f
                        t = ahi if c > 0 else alo
                        h2 = None if t is None else h2 + c * t
            if l2 is not None and (lo is None or l2 > lo):
                lo = l2
            if h2 is not None and (hi is None or h2 < hi):
                hi = h2
        return (lo, hi)

    def _refined_bound(self, lin: Lin, depth: int = 2) -> Bound:
        lo, hi = self._lin_bound(lin)
        if self._facts and lin.terms:
            lo, hi = self._refine(lin, lo, hi)
        if depth and len(lin.terms) > 1:
            lo, hi = self._split_minmax_bound(lin, lo, hi, depth)
            lo, hi = self._paired_minmax_bound(lin, lo, hi, depth)
        elif depth and lin.terms and next(iter(lin.terms))[0] in (RANK_MIN, RANK_MAX):
            # a lone min / max: its operands' own correlations (``max(0, e)`` of a tile extent)
            lo, hi = self._split_minmax_bound(lin, lo, hi, depth)
        return (lo, hi)

    def _paired_minmax_bound(self, lin: Lin, lo: "int | None", hi: "int | None",
                             depth: int) -> Bound:
        """Tighten the bounds of ``rest + c*(min(a1, b1) - min(a2, b2))`` (or ``max``): the
        difference lies between ``a1 - a2`` and ``b1 - b2`` (min and max are monotone and
        1-Lipschitz in each operand), so the sum lies between ``rest + c*(a1 - a2)`` and
        ``rest + c*(b1 - b2)``.  A clamped tile's extent ``min(x + 63, L) - min(x, L) + 1``
        is then at most 64, which splitting one term at a time cannot see."""
        items = [(k, x, c) for k, (x, c) in lin.terms.items() if k[0] in (RANK_MIN, RANK_MAX)]
        for n, (k1, x1, c1) in enumerate(items):
            for k2, x2, c2 in items[n + 1:]:
                if k1[0] != k2[0] or c1 != -c2:
                    continue
                rest = Lin({kk: v for kk, v in lin.terms.items() if kk not in (k1, k2)},
                           lin.const)
                for p1, q1 in ((x2.a, x2.b), (x2.b, x2.a)):
                    da = lin_add(self._lin(x1.a), self._lin(p1), -1)
                    db = lin_add(self._lin(x1.b), self._lin(q1), -1)
                    (l1, h1), (l2, h2) = (
                        self._refined_bound(lin_add(rest, lin_scale(dd, c1)), depth - 1)
                        for dd in (da, db))
                    nlo = None if l1 is None or l2 is None else min(l1, l2)
                    nhi = None if h1 is None or h2 is None else max(h1, h2)
                    if nlo is not None and (lo is None or nlo > lo):
                        lo = nlo
                    if nhi is not None and (hi is None or nhi < hi):
                        hi = nhi
        return (lo, hi)

    def _split_minmax_bound(self, lin: Lin, lo: "int | None", hi: "int | None", depth: int) -> Bound:
        """Tighten the bounds of ``rest + c*max(a, b)`` (or ``min``) by distributing the
        term: it is ``max``/``min`` of ``rest + c*a`` and ``rest + c*b``, whose bounds keep
        the correlation between ``rest`` and ``a``, ``b`` that interval arithmetic loses
        (``8*x + 7 - max(0, 8*x - 1)`` is at most 8, not ``7 + 8*max(x)``)."""
        for k, (x, c) in lin.terms.items():
            r = k[0]
            if r != RANK_MIN and r != RANK_MAX:
                continue
            rest = Lin({kk: v for kk, v in lin.terms.items() if kk != k}, lin.const)
            (l1, h1), (l2, h2) = (self._refined_bound(lin_add(rest, lin_scale(self._lin(op), c)),
                                                      depth - 1) for op in (x.a, x.b))
            if (r == RANK_MIN) == (c > 0):      # the sum is the min of the two
                nlo = None if l1 is None or l2 is None else min(l1, l2)
                nhi = h1 if h2 is None else (h2 if h1 is None else min(h1, h2))
            else:                               # the sum is the max of the two
                nlo = l1 if l2 is None else (l2 if l1 is None else max(l1, l2))
                nhi = None if h1 is None or h2 is None else max(h1, h2)
            if nlo is not None and (lo is None or nlo > lo):
                lo = nlo
            if nhi is not None and (hi is None or nhi < hi):
                hi = nhi
            break
        return (lo, hi)

    def _prove_nonneg(self, lin: Lin) -> bool:
        return self._decide(GE, lin) is True

    def _bound_expr(self, x: Expr) -> Bound:
        dt = x.dtype
        if dt in INDEX_INTS and not self._has_data(x):
            return self._lin_bound(self._lin(x))
        if dt.is_bool:
            return (0, 1)
        if dt.is_int:
            return int_range(dt)
        return (None, None)

    def _atom_bound(self, k: Any, x: Expr) -> Bound:
        b = self._bcache.get(k)
        if b is not None:
            return b
        r = k[0]
        b = (None, None)
        self._bcache[k] = b              # breaks cycles while it is being computed
        if r == RANK_VAR:
            b = self._var_bounds.get(x, b)
            if isinstance(x, SizeVar):
                b = _intersect(b, (1, None))
        elif r == RANK_DIV or r == RANK_MOD:
            b = self._divmod_bound(r == RANK_MOD, x)
        elif r == RANK_MIN or r == RANK_MAX:
            (al, ah), (bl, bh) = self._bound_expr(x.a), self._bound_expr(x.b)
            if r == RANK_MIN:
                b = (None if al is None or bl is None else min(al, bl),
                     bh if ah is None else (ah if bh is None else min(ah, bh)))
            else:
                b = (bl if al is None else (al if bl is None else max(al, bl)),
                     None if ah is None or bh is None else max(ah, bh))
        elif r == RANK_MUL:
            b = (1, 1)
            for f in self._mul_factors(x, len(k[3])):
                b = _mul_bound(b, self._bound_expr(f))
        elif r == RANK_SELECT:
            (al, ah), (bl, bh) = self._bound_expr(x.true_value), self._bound_expr(x.false_value)
            b = (None if al is None or bl is None else min(al, bl),
                 None if ah is None or bh is None else max(ah, bh))
        elif r == RANK_CAST:
            b = self._bound_expr(x.value) if not x.value.dtype.is_float else (None, None)
            tlo, thi = int_range(x.dtype)
            if b[0] is None or b[1] is None or b[0] < tlo or b[1] > thi:
                b = (None, None)
        elif r == RANK_CALL and x.func is Intrinsic.ABS:
            lo, hi = self._bound_expr(x.args[0])
            if lo is not None and lo >= 0:
                b = (lo, hi)
            elif hi is not None and hi <= 0:
                b = (-hi, None if lo is None else -lo)
            else:
                b = (0, None if lo is None or hi is None else max(-lo, hi))
        cb = self._cbounds.get(k)
        if cb is not None:
            b = _intersect(b, cb)
        self._bcache[k] = b
        return b

    def _divmod_bound(self, is_mod: bool, x: Expr) -> Bound:
        lo, hi = self._bound_expr(x.a)
        if type(x.b) is Const:
            c = x.b.value
            if c == 0:                      # x // 0 == x % 0 == 0 (docs/ir.md)
                return (0, 0)
            if is_mod:
                if c > 0:
                    return (0, c - 1) if lo is None or lo < 0 or hi is None else (0, min(c - 1, hi))
                return (c + 1, 0)
            if c > 0:
                return (None if lo is None else lo // c, None if hi is None else hi // c)
            return (None if hi is None else hi // c, None if lo is None else lo // c)
        cl, ch = self._bound_expr(x.b)
        if cl is None or cl < 1:
            return (None, None)
        if is_mod:
            h = None if ch is None else ch - 1
            if lo is not None and lo >= 0 and hi is not None:
                h = hi if h is None else min(h, hi)
            return (0, h)
        if lo is None or lo < 0:
            return (None, None if hi is None else (hi // cl if hi >= 0 else hi // (ch or hi)))
        return (0 if ch is None else lo // ch, None if hi is None else hi // cl)


def _mul_bound(a: Bound, b: Bound) -> Bound:
    (al, ah), (bl, bh) = a, b
    if None not in (al, ah, bl, bh):
        ps = (al * bl, al * bh, ah * bl, ah * bh)
        return (min(ps), max(ps))
    if al is not None and bl is not None and al >= 0 and bl >= 0:
        return (al * bl, None if ah is None or bh is None else ah * bh)
    return (None, None)


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
