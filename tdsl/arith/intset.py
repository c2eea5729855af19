"""Symbolic interval analysis (``Analyzer.int_set``): the range of an index
expression while some variables sweep their domains, the others held fixed.

Works on the analyzer's linear forms, so endpoints come out simplified (and the
analyzer's own knowledge still simplifies them, e.g. ``min`` of endpoints).
"""
from __future__ import annotations

from typing import Any, Optional

from ..expr import Const, Expr, convert
from ..visitor import uses_var
from .interval import Interval
from .linear import (RANK_DIV, RANK_MAX, RANK_MIN, RANK_MOD, RANK_MUL, RANK_SELECT, RANK_VAR,
                     Lin, lin_add, lin_atom, lin_const, lin_key, lin_scale)

LinSet = tuple  # (lo: Lin | None, hi: Lin | None)


class IntSetMixin:
    """``int_set`` for ``Analyzer``."""

    def int_set(self, expr: Expr, dom_map: "dict | None" = None) -> Interval:
        """The interval of ``expr`` when each var of ``dom_map`` ranges over its
        ``Interval`` (or ``Range``); other variables are fixed symbols."""
        from .analyzer import INDEX_INTS
        expr = convert(expr)
        self._begin()
        self._scan(expr)
        try:
            dt = expr.dtype
            if dt not in INDEX_INTS or self._has_data(expr):   # data wraps: no ranges
                e = self._simp(expr)
                if type(e) is Const or not dom_map or not uses_var(e, _var_set(dom_map)):
                    return Interval(e, e)
                return Interval.everything()
            lin = self._lin(expr)
            if not dom_map:
                e = self._to_expr(lin, dt)
                return Interval(e, e)
            dom = {}
            for v, iv in dom_map.items():
                v = v.as_expr()
                if not isinstance(iv, Interval):
                    iv = Interval(iv.min, None if iv.extent is None else iv.min + iv.extent - 1)
                dom[v] = (None if iv.min is None else self._lin(convert(iv.min, v.dtype)),
                          None if iv.max is None else self._lin(convert(iv.max, v.dtype)))
            self._dom_vars = frozenset(dom)
            lo, hi = self._iset_lin(lin, dom, dt)
            return Interval(None if lo is None else self._to_expr(lo, dt),
                            None if hi is None else self._to_expr(hi, dt))
        finally:
            self._end()

    def _iset_lin(self, lin: Lin, dom: dict, dt: Any) -> LinSet:
        lo: Optional[Lin] = lin_const(lin.const)
        hi: Optional[Lin] = lo
        for k, (x, c) in lin.terms.items():
            al, ah = self._iset_atom(k, x, dom, dt)
            if c < 0:
                al, ah = ah, al
            lo = None if lo is None or al is None else lin_add(lo, lin_scale(al, c))
            hi = None if hi is None or ah is None else lin_add(hi, lin_scale(ah, c))
            if lo is None and hi is None:
                break
        return lo, hi

    def _iset_expr(self, x: Expr, dom: dict, dt: Any) -> LinSet:
        from .analyzer import INDEX_INTS
        if x.dtype not in INDEX_INTS:
            return (None, None)
        return self._iset_lin(self._lin(x), dom, dt)

    def _iset_atom(self, k: Any, x: Expr, dom: dict, dt: Any) -> LinSet:
        if not uses_var(x, self._dom_vars):
            p = lin_atom(x, k)
            return p, p
        r = k[0]
        if r == RANK_VAR:
            return dom[x]
        if (r == RANK_DIV or r == RANK_MOD) and type(x.b) is Const and x.b.value != 0:
            c = x.b.value
            xl, xh = self._iset_expr(x.a, dom, dt)
            if r == RANK_DIV:
                dl = None if xl is None else self._divmod(False, xl, lin_const(c), dt)
                dh = None if xh is None else self._divmod(False, xh, lin_const(c), dt)
                return (dl, dh) if c > 0 else (dh, dl)
            if c > 0 and xl is not None and xh is not None:
                ql = self._divmod(False, xl, lin_const(c), dt)
                qh = self._divmod(False, xh, lin_const(c), dt)
                if lin_key(ql, dt) == lin_key(qh, dt):   # no wrap-around inside the range
                    return (self._divmod(True, xl, lin_const(c), dt),
                            self._divmod(True, xh, lin_const(c), dt))
            return (lin_const(0), lin_const(c - 1)) if c > 0 else (lin_const(c + 1), lin_const(0))
        if r == RANK_MIN or r == RANK_MAX:
            al, ah = self._iset_expr(x.a, dom, dt)
            bl, bh = self._iset_expr(x.b, dom, dt)
            if r == RANK_MIN:
                lo = None if al is None or bl is None else self._minmax(False, al, bl, dt)
                hi = bh if ah is None else (ah if bh is None else self._minmax(False, ah, bh, dt))
            else:
                lo = bl if al is None else (al if bl is None else self._minmax(True, al, bl, dt))
                hi = None if ah is None or bh is None else self._minmax(True, ah, bh, dt)
            return lo, hi
        if r == RANK_SELECT:
            tl, th = self._iset_expr(x.true_value, dom, dt)
            fl, fh = self._iset_expr(x.false_value, dom, dt)
            lo = None if tl is None or fl is None else self._minmax(False, tl, fl, dt)
            hi = None if th is None or fh is None else self._minmax(True, th, fh, dt)
            return lo, hi
        if r == RANK_MUL:
            return self._iset_mul(k, x, dom, dt)
        return (None, None)

    def _iset_mul(self, k: Any, x: Expr, dom: dict, dt: Any) -> LinSet:
        fixed, varying = [], []
        for fk, fx in self._factor_list(k, x):
            (varying if uses_var(fx, self._dom_vars) else fixed).append((fk, fx))
        if len(varying) == 1:
            fl, fh = self._iset_expr(varying[0][1], dom, dt)
            p = self._product_atom(fixed, dt)
            plo, phi = self._refined_bound(p)
            if plo is not None and plo >= 0:
                return (None if fl is None else self._mul_any(fl, p, dt),
                        None if fh is None else self._mul_any(fh, p, dt))
            if phi is not None and phi <= 0:
                return (None if fh is None else self._mul_any(fh, p, dt),
                        None if fl is None else self._mul_any(fl, p, dt))
            return (None, None)
        # several varying factors: only constant endpoints can be multiplied safely
        lo = hi = 1
        for fk, fx in varying + fixed:
            fl, fh = self._iset_expr(fx, dom, dt)
            if fl is None or fh is None or fl.terms or fh.terms:
                return (None, None)
            ps = (lo * fl.const, lo * fh.const, hi * fl.const, hi * fh.const)
            lo, hi = min(ps), max(ps)
        return lin_const(lo), lin_const(hi)

    def _mul_any(self, a: Lin, b: Lin, dt: Any) -> Lin:
        if not b.terms:
            return lin_scale(a, b.const)
        if not a.terms:
            return lin_scale(b, a.const)
        return self._mul(a, b, dt)


def _var_set(dom_map: dict) -> frozenset:
    return frozenset(v.as_expr() for v in dom_map)
