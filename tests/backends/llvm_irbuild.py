"""Hand-built lowered PrimFuncs for the LLVM backend tests (``tdsl.lower`` stand-ins)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from tdsl.expr import BufferLoad, Const, Expr, SizeVar, Var
from tdsl.stmt import Buffer, BufferStore, For, ForKind, IfThenElse, PrimFunc, SeqStmt, Stmt

S, P, V, U = ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED


def loop(name: str, extent: Any, body: Callable[[Var], Stmt], kind: ForKind = S,
         min: Any = 0) -> For:
    v = Var(name)
    return For(v, min, extent, kind, body(v))


def load(buf: Buffer, *idx: Any) -> BufferLoad:
    return BufferLoad(buf, [i if isinstance(i, Expr) else Const(i, "int64") for i in idx])


def store(buf: Buffer, value: Any, *idx: Any) -> BufferStore:
    return BufferStore(buf, value, [i if isinstance(i, Expr) else Const(i, "int64") for i in idx])


def prim(name: str, params: Sequence[Buffer], body: Stmt, size_vars: Sequence[Var] = (),
         **attrs: Any) -> PrimFunc:
    """A PrimFunc binding each size var to the first parameter dimension that is it."""
    bindings = {}
    for v in size_vars:
        for pi, p in enumerate(params):
            for d, s in enumerate(p.shape):
                if s is v and v not in bindings:
                    bindings[v] = (pi, d)
    return PrimFunc(name, params, body, size_vars, bindings, attrs)


def elementwise(name: str, dtype: str, fn: Callable[..., Expr], nin: int = 2,
                kind: ForKind = S, out_dtype: "str | None" = None) -> PrimFunc:
    """``out[i] = fn(in0[i], in1[i], ...)`` over a symbolic length n."""
    n = SizeVar("n")
    ins = [Buffer(f"X{k}", [n], dtype) for k in range(nin)]
    out = Buffer("Y", [n], out_dtype or dtype)
    body = loop("i", n, lambda i: store(out, fn(*[load(b, i) for b in ins]), i), kind)
    return prim(name, ins + [out], body, [n])


def vector_elementwise(name: str, dtype: str, fn: Callable[..., Expr], nin: int = 2,
                       lanes: int = 16, out_dtype: "str | None" = None,
                       outer: ForKind = S) -> PrimFunc:
    """Like ``elementwise`` but split by ``lanes`` with a vectorized, guarded inner loop."""
    n = SizeVar("n")
    ins = [Buffer(f"X{k}", [n], dtype) for k in range(nin)]
    out = Buffer("Y", [n], out_dtype or dtype)

    def inner(io: Var) -> Stmt:
        def lane(ii: Var) -> Stmt:
            i = io * lanes + ii
            return IfThenElse(i < n, store(out, fn(*[load(b, i) for b in ins]), i))
        return loop("ii", lanes, lane, V)
    body = loop("io", (n + (lanes - 1)) // lanes, inner, outer)
    return prim(name, ins + [out], body, [n])


def tiled_matmul(name: str = "mm", K: int = 64, tile_i: int = 4, tile_j: int = 16,
                 outer: ForKind = S, dtype: str = "float32", symbolic_k: bool = False
                 ) -> PrimFunc:
    """C[m, n] = A[m, K] @ B[K, n] with 4x16 tiles, vectorized j with tail guards,
    an unrolled i, and a reduction loop over k (m, n symbolic)."""
    m, n = SizeVar("m"), SizeVar("n")
    kk: Any = SizeVar("k") if symbolic_k else K
    A = Buffer("A", [m, kk], dtype)
    B = Buffer("B", [kk, n], dtype)
    C = Buffer("C", [m, n], dtype)

    def tile(io: Var) -> Stmt:
        def col(jo: Var) -> Stmt:
            def guard(ii: Var, ji: Var) -> Expr:
                return (io * tile_i + ii < m) & (jo * tile_j + ji < n)

            def idx(ii: Var, ji: Var) -> tuple:
                return io * tile_i + ii, jo * tile_j + ji
            init = loop("ii", tile_i, lambda ii: loop("ji", tile_j, lambda ji: IfThenElse(
                guard(ii, ji), store(C, Const(0.0, dtype), *idx(ii, ji))), V), U)
            update = loop("k", kk, lambda k: loop("ii", tile_i, lambda ii: loop(
                "ji", tile_j, lambda ji: IfThenElse(guard(ii, ji), store(
                    C, load(C, *idx(ii, ji)) + load(A, idx(ii, ji)[0], k) *
                    load(B, k, idx(ii, ji)[1]), *idx(ii, ji))), V), U))
            return SeqStmt([init, update])
        return loop("jo", (n + tile_j - 1) // tile_j, col)
    body = loop("io", (m + tile_i - 1) // tile_i, tile, outer)
    svars = [m, n] + ([kk] if symbolic_k else [])
    return prim(name, [A, B, C], body, svars)
