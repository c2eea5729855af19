"""Rewrite rules on linear forms: products, floor division/modulo, min/max.

Each rule is exact under floor semantics over mathematical integers, so it applies
to index expressions only (data wraps: see data.py); those that depend on values fire only
when the analyzer's bounds (``_lin_bound``, refined by facts) prove them:

- ``(c*q + r) // c -> q + r // c`` and ``(c*q + r) % c -> r % c`` (exact split),
  then ``r // c -> k`` and ``r % c -> r - k*c`` when ``r`` lies in ``[k*c, k*c + c)``;
- ``(g*x) // (g*c') -> x // c'`` (common factor), ``(x // a) // b -> x // (a*b)``,
  ``(x % a) % b -> x % b`` when ``b`` divides ``a``, ``x//c*c + x%c -> x``;
- symbolic divisor ``b > 0``: ``(b*q + r) // b -> q + r // b``, and ``r // b -> 0``
  when ``0 <= r < b``;
- ``min(a, b)`` -> ``a`` when ``a - b <= 0`` is provable; common terms and factors pulled out.
"""
from __future__ import annotations

from typing import Any

from ..dtype import DType
from ..expr import Const, Expr, FloorDiv, FloorMod, Max, Min, Mul
from .linear import (RANK_DIV, RANK_MAX, RANK_MIN, RANK_MOD, RANK_MUL, RANK_SUM, Lin,
                     lin_add, lin_const, lin_key, lin_scale, single_atom)


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return abs(a)


class RulesMixin:
    """Rules used by ``Analyzer`` (which provides ``_lin``, ``_to_expr`` and bounds)."""

    # ---- products -------------------------------------------------------------------------
    @staticmethod
    def _mul_factors(x: Expr, n: int) -> list:
        """The ``n`` factors of a product atom built by ``_mul_atoms`` (in key order)."""
        out = []
        for _ in range(n - 1):
            out.append(x.b)
            x = x.a
        out.append(x)
        out.reverse()
        return out

    def _factor_list(self, k: Any, x: Expr) -> list:
        if k[0] == RANK_MUL:
            return list(zip(k[3], self._mul_factors(x, len(k[3]))))
        return [(k, x)]

    def _product_atom(self, factors: list, dt: DType) -> Lin:
        if len(factors) == 1:
            k, x = factors[0]
            return self._lin(x) if k[0] == RANK_SUM else self._atom(x, k)
        factors.sort(key=lambda kv: kv[0])
        node = factors[0][1]
        for _, x in factors[1:]:
            node = Mul(node, x)
        return self._atom(node, (RANK_MUL, "Mul", dt, tuple(k for k, _ in factors)))

    def _mul(self, a: Lin, b: Lin, dt: DType) -> Lin:
        """``a * b`` for two non-constant forms: distributed when small, else one product atom."""
        if (len(a.terms) + 1) * (len(b.terms) + 1) > 16:
            fs = []
            for lin in (a, b):
                sa = single_atom(lin)
                fs += (self._factor_list(*sa) if sa is not None
                       else [(lin_key(lin, dt), self._to_expr(lin, dt))])
            return self._product_atom(fs, dt)
        res = lin_const(a.const * b.const)
        if b.const:
            res = lin_add(res, lin_scale(Lin(a.terms, 0), b.const))
        if a.const:
            res = lin_add(res, lin_scale(Lin(b.terms, 0), a.const))
        for ka, (xa, ca) in a.terms.items():
            fa = self._factor_list(ka, xa)
            for kb, (xb, cb) in b.terms.items():
                p = self._product_atom(fa + self._factor_list(kb, xb), dt)
                res = lin_add(res, lin_scale(p, ca * cb))
        return res

    # ---- floor division / modulo ----------------------------------------------------------------
    def _divmod_atom(self, is_mod: bool, a: Lin, b: Lin, dt: DType) -> Lin:
        ka, kb = lin_key(a, dt), lin_key(b, dt)
        xa, xb = self._to_expr(a, dt), self._to_expr(b, dt)
        if is_mod:
            return self._atom(FloorMod(xa, xb), (RANK_MOD, "FloorMod", dt, (ka, kb)))
        return self._atom(FloorDiv(xa, xb), (RANK_DIV, "FloorDiv", dt, (ka, kb)))

    def _divmod(self, is_mod: bool, a: Lin, b: Lin, dt: DType) -> Lin:
        if not b.terms:
            c = b.const
            if c == 0:                      # x // 0 == x % 0 == 0 (docs/ir.md)
                return lin_const(0)
            if not a.terms:
                return lin_const(a.const % c if is_mod else a.const // c)
            if c > 0:
                return self._divmod_pos(is_mod, a, c, dt)
            if c == -1:
                return lin_const(0) if is_mod else lin_scale(a, -1)
            return self._divmod_atom(is_mod, a, b, dt)
        return self._divmod_sym(is_mod, a, b, dt)

    def _divmod_pos(self, is_mod: bool, a: Lin, c: int, dt: DType) -> Lin:
        """``a // c`` or ``a % c`` for a constant ``c > 0``."""
        if c == 1:
            return lin_const(0) if is_mod else a
        q_terms, r_terms = {}, {}
        for k, v in a.terms.items():
            if v[1] % c == 0:
                q_terms[k] = (v[0], v[1] // c)
            else:
                r_terms[k] = v
        qc, rc = divmod(a.const, c)
        if not r_terms:
            return lin_const(rc) if is_mod else Lin(q_terms, qc)
        r = Lin(r_terms, rc)
        lo, hi = self._lin_bound(r)
        if (lo is None or hi is None or lo // c != hi // c) and self._facts:
            lo, hi = self._refine(r, lo, hi)
        if lo is not None and hi is not None and lo // c == hi // c:
            k = lo // c
            return lin_add(r, lin_const(k * c), -1) if is_mod else Lin(q_terms, qc + k)
        g = c
        for v in r_terms.values():
            g = _gcd(g, v[1])
            if g == 1:
                break
        if g > 1:
            r2 = Lin({k: (x, co // g) for k, (x, co) in r_terms.items()}, rc // g)
            inner = self._divmod_pos(is_mod, r2, c // g, dt)
            if is_mod:
                return lin_add(lin_scale(inner, g), lin_const(rc % g))
            return lin_add(Lin(q_terms, qc), inner)
        if len(r_terms) == 1:
            (k1, (x1, co1)), = r_terms.items()
            if (co1 == 1 and (k1[0] == RANK_DIV or k1[0] == RANK_MOD)
                    and type(x1.b) is Const and x1.b.value > 0):
                c1 = x1.b.value
                if not is_mod and k1[0] == RANK_DIV:
                    # (x // c1 + rc) // c == (x + rc*c1) // (c1*c)
                    inner = lin_add(self._lin(x1.a), lin_const(rc * c1))
                    return lin_add(Lin(q_terms, qc), self._divmod_pos(False, inner, c1 * c, dt))
                if is_mod and k1[0] == RANK_MOD and c1 % c == 0:
                    # (x % c1 + rc) % c == (x + rc) % c when c divides c1
                    inner = lin_add(self._lin(x1.a), lin_const(rc))
                    return self._divmod_pos(True, inner, c, dt)
        atom = self._divmod_atom(is_mod, r, lin_const(c), dt)
        return atom if is_mod else lin_add(Lin(q_terms, qc), atom)

    def _divmod_sym(self, is_mod: bool, a: Lin, b: Lin, dt: DType) -> Lin:
        """``a // b`` or ``a % b`` for a symbolic ``b``."""
        if lin_key(a, dt) == lin_key(b, dt) and (
                self._prove_nonneg(lin_add(b, lin_const(-1)))
                or self._prove_nonneg(lin_add(lin_scale(b, -1), lin_const(-1)))):
            return lin_const(0 if is_mod else 1)         # x // x, x % x with x != 0
        if not self._prove_nonneg(lin_add(b, lin_const(-1))):       # b >= 1 needed below
            return self._divmod_atom(is_mod, a, b, dt)
        q = Lin({}, 0)
        r_terms = dict(a.terms)
        sb = single_atom(b)
        if sb is not None:
            bk = sb[0]
            for k, (x, co) in a.terms.items():
                if k == bk:
                    q = lin_add(q, lin_const(co))
                    del r_terms[k]
                elif k[0] == RANK_MUL and bk in k[3]:
                    fs = self._factor_list(k, x)
                    i = next(j for j, (fk, _) in enumerate(fs) if fk == bk)
                    del fs[i]
                    q = lin_add(q, lin_scale(self._product_atom(fs, dt), co))
                    del r_terms[k]
        r = Lin(r_terms, a.const)
        if not r.terms and r.const == 0:
            return lin_const(0) if is_mod else q
        # 0 <= r < b ?
        if self._prove_nonneg(r) and self._prove_nonneg(lin_add(lin_add(b, r, -1), lin_const(-1))):
            return r if is_mod else q
        if not q.terms and q.const == 0:
            return self._divmod_atom(is_mod, a, b, dt)
        atom = self._divmod_atom(is_mod, r, b, dt)
        return atom if is_mod else lin_add(q, atom)

    def _merge_divmod(self, lin: Lin) -> Lin:
        """``k*(x % c) + k*c*(x // c) -> k*x``, also for a symbolic atom ``c``."""
        for k, (x, co) in lin.terms.items():
            if k[0] != RANK_MOD:
                continue
            dk = (RANK_DIV, "FloorDiv") + k[2:]
            if type(x.b) is Const:
                pk, want = dk, co * x.b.value
            else:
                ck = k[3][1]
                if ck[0] == RANK_SUM:
                    continue
                fs = [dk] + (list(ck[3]) if ck[0] == RANK_MUL else [ck])
                pk, want = (RANK_MUL, "Mul", k[2], tuple(sorted(fs))), co
            d = lin.terms.get(pk)
            if d is not None and d[1] == want:
                t = dict(lin.terms)
                del t[k], t[pk]
                res = lin_add(Lin(t, lin.const), lin_scale(self._lin(x.a), co))
                return self._merge_divmod(res) if len(res.terms) > 1 else res
        return lin

    # ---- min / max ------------------------------------------------------------------------------
    def _minmax(self, is_max: bool, a: Lin, b: Lin, dt: DType) -> Lin:
        if not a.terms and not b.terms:
            return lin_const(max(a.const, b.const) if is_max else min(a.const, b.const))
        d = lin_add(a, b, -1)
        if not d.terms:
            return (a if d.const >= 0 else b) if is_max else (a if d.const <= 0 else b)
        lo, hi = self._lin_bound(d)
        if (lo is None or lo < 0) and (hi is None or hi > 0) and self._facts:
            lo, hi = self._refine(d, lo, hi)
        if hi is not None and hi <= 0:
            return b if is_max else a
        if lo is not None and lo >= 0:
            return a if is_max else b
        # pull out common terms (and a common constant) and a common positive factor
        common, ta, tb = {}, dict(a.terms), dict(b.terms)
        for k, v in a.terms.items():
            w = b.terms.get(k)
            if w is not None and w[1] == v[1]:
                common[k] = v
                del ta[k], tb[k]
        cc = a.const if a.const == b.const else 0
        A, B = Lin(ta, a.const - cc), Lin(tb, b.const - cc)
        g = 0
        for lin in (A, B):
            for _, co in lin.terms.values():
                g = _gcd(g, co)
            g = _gcd(g, lin.const)
        if g > 1:
            A, B = lin_scale_div(A, g), lin_scale_div(B, g)
        else:
            g = 1
        res = self._minmax_atom(is_max, A, B, dt)
        return lin_add(lin_scale(res, g), Lin(common, cc))

    def _minmax_atom(self, is_max: bool, a: Lin, b: Lin, dt: DType) -> Lin:
        ka, kb = lin_key(a, dt), lin_key(b, dt)
        if ka == kb:
            return a
        rank = RANK_MAX if is_max else RANK_MIN
        # min(min(x, y), x) -> min(x, y); min(max(x, y), x) -> x (and symmetric)
        for (k1, l1), (k2, l2) in (((ka, a), (kb, b)), ((kb, b), (ka, a))):
            if k1[0] in (RANK_MIN, RANK_MAX) and single_atom(l1) is not None and k2 in k1[3]:
                return l1 if k1[0] == rank else l2
        if kb < ka:
            a, b, ka, kb = b, a, kb, ka
        xa, xb = self._to_expr(a, dt), self._to_expr(b, dt)
        node = Max(xa, xb) if is_max else Min(xa, xb)
        return self._atom(node, (rank, "Max" if is_max else "Min", dt, (ka, kb)))


def lin_scale_div(a: Lin, g: int) -> Lin:
    """``a / g`` for a ``g`` dividing every coefficient and the constant."""
    return Lin({k: (x, c // g) for k, (x, c) in a.terms.items()}, a.const // g)

