"""The addresses one warp's lanes touch at each memory access of a kernel.

Bank conflicts and coalescing are properties of a warp-wide request: which bytes each
of the 32 lanes reads or writes in one instruction.  This module evaluates the index
expressions of every global and shared access of a kernel's IR for the lanes of a few
warps (linear thread id ``x + y*Dx + z*Dx*Dy``, warp = 32 consecutive ids), at a few
iterations of the serial loops around it (the first two of each loop, outer loops first,
at most ``max_combos`` combinations), blocks at index 0.  A vectorized loop is one access
of ``extent * itemsize`` bytes per lane when its elements are contiguous (what the
generated code does with float2/float4), else one access per element.  Conditions are
evaluated per lane (a lane where one is false makes no access there); a symbolic size is
bound to ``sizes[name]``, else ``SAMPLE_SIZE``.  An index that depends on loaded data (a
gather) cannot be evaluated: the access is marked ``unknown`` and not judged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional

from tdsl.errors import TDSLError
from tdsl.expr import BufferLoad, Const, Expr, SizeVar, Var
from tdsl.stmt import (Allocate, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse,
                       LetStmt, SeqStmt, StorageScope, ThreadTag)
from tdsl.visitor import children

#: The value of a symbolic size that ``sizes`` does not name.
SAMPLE_SIZE = 1024
WARP = 32

#: (byte offset from the buffer's start, bytes) of one lane's access; None: no access.
LaneAccess = Optional[tuple[int, int]]


@dataclass
class AccessSite:
    """One load or store of a global or shared buffer, with the warp requests sampled."""

    buffer: Buffer
    store: bool
    requests: list[tuple[LaneAccess, ...]] = field(default_factory=list)
    unknown: bool = False

    @property
    def label(self) -> str:
        return f"{'store to' if self.store else 'load of'} {self.buffer.name}"


class _Env(dict):
    """Loop and let variables of one lane; symbolic sizes come from ``sizes``."""

    def __init__(self, sizes: Mapping[str, int], *args: Any):
        super().__init__(*args)
        self.sizes = sizes

    def __missing__(self, var: Var) -> int:
        if isinstance(var, SizeVar) or var.name in self.sizes:
            return int(self.sizes.get(var.name, SAMPLE_SIZE))
        raise KeyError(var)

    def bind(self, var: Var, value: int) -> "_Env":
        e = _Env(self.sizes, self)
        e[var] = value
        return e


def _eval(e: Expr, env: _Env) -> Optional[int]:
    from tdsl.backends.cuda.host import host_eval
    try:
        return int(host_eval(e, env))
    except (TDSLError, KeyError, ZeroDivisionError, TypeError, ValueError):
        return None


def block_dims(kernel: Any, sizes: Mapping[str, int]) -> tuple[int, int, int]:
    """The kernel's block size with symbolic extents bound as the module says."""
    env = _Env(sizes)
    dims = tuple(_eval(d, env) for d in kernel.block)
    return tuple(max(1, d or 1) for d in dims)   # type: ignore[return-value]


def warp_accesses(kernel: Any, sizes: "Mapping[str, int] | None" = None,
                  warps: tuple[int, ...] = (0, 1), max_combos: int = 8) -> list[AccessSite]:
    """The global and shared access sites of ``kernel`` (a ``KernelInfo``), each with the
    requests of the sampled warps and loop iterations, in program order.  A tensor-core
    microkernel's loop (GEMM or attention: ``kernel.tc``) is not walked: what runs there is
    the template's C++, not the IR nest it replaces."""
    sizes = dict(sizes or {})
    dims = block_dims(kernel, sizes)
    walker = _Walker(dims, max_combos, sizes)
    tc = getattr(kernel, "tc", None)
    walker.skip = tc.loop if tc is not None else None
    for w in warps:
        if w * WARP < dims[0] * dims[1] * dims[2]:
            walker.run(kernel.root, w)
    return list(walker.sites.values())


class _Walker:
    def __init__(self, dims: tuple[int, int, int], max_combos: int, sizes: Mapping[str, int]):
        self.dims = dims
        self.max_combos = max_combos
        self.sizes = sizes
        self.sites: dict[int, AccessSite] = {}
        self.skip: Optional[For] = None      # a loop whose body does not run as written

    def run(self, root: Any, warp: int) -> None:
        dx, dy, dz = self.dims
        self.tids: list[tuple[int, int, int]] = []
        envs: list[Optional[_Env]] = []
        for lane in range(WARP):
            t = warp * WARP + lane
            self.tids.append((t % dx, (t // dx) % dy, t // (dx * dy)))
            envs.append(_Env(self.sizes) if t < dx * dy * dz else None)
        self.visit(root, envs, None, 1)

    # ---- statements -------------------------------------------------------------------
    def visit(self, s: Any, envs: list, vec: "tuple[Var, int] | None", combos: int) -> None:
        if not any(e is not None for e in envs):
            return
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.visit(x, envs, vec, combos)
        elif isinstance(s, For):
            self._for(s, envs, vec, combos)
        elif isinstance(s, IfThenElse):
            self._loads(s.cond, envs, vec)
            conds = [None if e is None else _eval(s.cond, e) for e in envs]
            self.visit(s.then_case, [e if c is None or c else None for e, c in zip(envs, conds)],
                       vec, combos)
            if s.else_case is not None:
                self.visit(s.else_case, [e if c is None or not c else None
                                         for e, c in zip(envs, conds)], vec, combos)
        elif isinstance(s, LetStmt):
            self._loads(s.value, envs, vec)
            new = []
            for e in envs:
                v = None if e is None else _eval(s.value, e)
                new.append(e if e is None or v is None else e.bind(s.var, v))
            self.visit(s.body, new, vec, combos)
        elif isinstance(s, Allocate):
            self.visit(s.body, envs, vec, combos)
        elif isinstance(s, BufferStore):
            self._loads(s.value, envs, vec)
            for i in s.indices:
                self._loads(i, envs, vec)
            self._record(s, s.buffer, s.indices, True, envs, vec)
        elif isinstance(s, Evaluate):
            for c in children(s):
                self._loads(c, envs, vec)
        # barriers, warp-collective intrinsics, extern calls and all-reduces: no access here

    def _for(self, s: For, envs: list, vec: "tuple[Var, int] | None", combos: int) -> None:
        if s is self.skip:
            return
        if s.kind is ForKind.THREAD_BINDING:
            new = []
            for e, tid in zip(envs, self.tids):
                if e is None:
                    new.append(None)
                    continue
                idx = _tag_index(s.thread_tag, tid)
                lo, ext = _eval(s.min, e), _eval(s.extent, e)
                ok = ext is None or idx < ext
                new.append(e.bind(s.var, (lo or 0) + idx) if ok else None)
            self.visit(s.body, new, vec, combos)
            return
        if s.kind is ForKind.VECTORIZED and vec is None and isinstance(s.extent, Const):
            new = [None if e is None else e.bind(s.var, _eval(s.min, e) or 0) for e in envs]
            self.visit(s.body, new, (s.var, int(s.extent.value)), combos)
            return
        offsets = (0, 1) if combos * 2 <= self.max_combos else (0,)
        ran = False
        for o in offsets:
            new = []
            for e in envs:
                lo = None if e is None else _eval(s.min, e)
                ext = None if e is None else _eval(s.extent, e)
                new.append(None if e is None or (ext is not None and o >= ext)
                           else e.bind(s.var, (lo or 0) + o))
            if any(e is not None for e in new):
                ran = True
                self.visit(s.body, new, vec, combos * len(offsets))
            if not ran:
                break

    # ---- accesses ---------------------------------------------------------------------
    def _loads(self, e: Any, envs: list, vec: "tuple[Var, int] | None") -> None:
        for n in _expr_nodes(e):
            if isinstance(n, BufferLoad):
                self._record(n, n.buffer, n.indices, False, envs, vec)

    def _record(self, node: Any, buf: Buffer, indices: tuple, store: bool, envs: list,
                vec: "tuple[Var, int] | None") -> None:
        if buf.scope not in (StorageScope.GLOBAL, StorageScope.SHARED):
            return
        site = self.sites.get(id(node))
        if site is None:
            site = self.sites[id(node)] = AccessSite(buf, store)
        size = buf.dtype.itemsize
        n = vec[1] if vec is not None else 1
        per_lane: list[Optional[list[int]]] = []
        for e in envs:
            if e is None:
                per_lane.append(None)
                continue
            addrs = []
            for v in range(n):
                env = e if vec is None else e.bind(vec[0], e[vec[0]] + v)
                a = _offset(buf, indices, env)
                if a is None:
                    site.unknown = True
                    return
                addrs.append(a * size)
            per_lane.append(addrs)
        site.requests.extend(_requests(per_lane, n, size))


def _requests(per_lane: list, n: int, size: int) -> Iterator[tuple[LaneAccess, ...]]:
    """Warp requests of one (vector) access: contiguous lanes' elements are one access of
    up to 16 bytes per lane (wider ones are several), else one request per element."""
    active = [a for a in per_lane if a is not None]
    contiguous = all(a[v] == a[0] + v * size for a in active for v in range(n))
    if not contiguous:
        for v in range(n):
            yield tuple(None if a is None else (a[v], size) for a in per_lane)
        return
    total = n * size
    chunk = min(total, 16)
    for start in range(0, total, chunk):
        yield tuple(None if a is None else (a[0] + start, min(chunk, total - start))
                    for a in per_lane)


def _offset(buf: Buffer, indices: tuple, env: _Env) -> Optional[int]:
    flat = 0
    for i, st in zip(indices, buf.effective_strides()):
        iv, sv = _eval(i, env), _eval(st, env)
        if iv is None or sv is None:
            return None
        flat += iv * sv
    return flat


def _tag_index(tag: "ThreadTag | None", tid: tuple[int, int, int]) -> int:
    if tag is ThreadTag.THREAD_X:
        return tid[0]
    if tag is ThreadTag.THREAD_Y:
        return tid[1]
    if tag is ThreadTag.THREAD_Z:
        return tid[2]
    return 0          # blockIdx.* and vthread: the first block


def _expr_nodes(e: Any) -> Iterator[Any]:
    stack = [e]
    while stack:
        n = stack.pop()
        if n is None or isinstance(n, (str, int, float)):
            continue
        yield n
        stack.extend(children(n))
