"""Integer bounds of linear forms: the interval arithmetic and the fact-based refinement
behind ``Analyzer.const_int_bound``, ``can_prove`` and the comparison folding (a mixin of
``Analyzer``, which owns the state: variable bounds, facts, the bound cache)."""
from __future__ import annotations

from typing import Any

from ..dtype import DType
from ..expr import EQ, Const, Expr, GE, GT, Intrinsic, LE, LT, NE, SizeVar
from .constfold import int_range
from .linear import (RANK_CALL, RANK_CAST, RANK_DIV, RANK_MAX, RANK_MIN, RANK_MOD,
                     RANK_MUL, RANK_SELECT, RANK_VAR, Lin, lin_add, lin_scale)

INDEX_INTS = frozenset({DType.INT32, DType.INT64})

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


def _mul_bound(a: Bound, b: Bound) -> Bound:
    (al, ah), (bl, bh) = a, b
    if None not in (al, ah, bl, bh):
        ps = (al * bl, al * bh, ah * bl, ah * bh)
        return (min(ps), max(ps))
    if al is not None and bl is not None and al >= 0 and bl >= 0:
        return (al * bl, None if ah is None or bh is None else ah * bh)
    return (None, None)


class BoundsMixin:
    """Bounds of ``Lin`` forms and expression atoms under the analyzer's knowledge."""

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

    def _split_minmax_bound(self, lin: Lin, lo: "int | None", hi: "int | None",
                            depth: int) -> Bound:
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
