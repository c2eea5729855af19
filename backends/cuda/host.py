"""The host side of a CUDA function: a small plan of allocations and kernel launches.

``kernels.split_kernels`` turns the statements outside every kernel into this
plan; the GPU runtime (``driver.py``) and the CPU emulator (``emulator.py``) both
run it with ``execute``, each supplying its own memory and launch functions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from tdsl.dtype import DType
from tdsl.errors import BuildError, ShapeError
from tdsl.expr import (Add, And, Cast, CmpOp, Const, EQ, Expr, FloorDiv, FloorMod, GE, GT, LE, LT,
                       Max, Min, Mul, NE, Not, Or, Select, Sub, Var)
from tdsl.stmt import Buffer
from tdsl.target import GPUArch

from .limits import check_launch
from tdsl.visitor import children

#: CUDA's limits on grid dimensions (x, y, z).
MAX_GRID = GPUArch(0).max_grid_dim


@dataclass
class HostSeq:
    items: list


@dataclass
class HostAlloc:
    """Device storage for a global buffer, live while ``body`` runs."""

    buffer: Buffer
    nbytes: Expr
    body: Any


@dataclass
class HostLet:
    var: Var
    value: Expr
    body: Any


@dataclass
class HostIf:
    cond: Expr
    then: Any
    other: Any = None


@dataclass
class HostLaunch:
    kernel: Any  # kernels.KernelInfo


@dataclass
class LaunchConfig:
    """Evaluated grid and block sizes of one launch, and its kernel arguments."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: list = field(default_factory=list)   # ints: device pointers, then scalar values

    @property
    def empty(self) -> bool:
        return min(self.grid) <= 0 or min(self.block) <= 0


class HostBackend(Protocol):
    def alloc(self, buffer: Buffer, nbytes: int) -> int: ...
    def free(self, ptr: int) -> None: ...
    def launch(self, kernel: Any, config: LaunchConfig) -> None: ...


# ---- host expressions ----------------------------------------------------------------------------
_ARITH: dict[type, Callable[[int, int], int]] = {
    Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
    Min: min, Max: max,
}
_CMP: dict[type, Callable[[Any, Any], bool]] = {
    EQ: lambda a, b: a == b, NE: lambda a, b: a != b, LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b, GT: lambda a, b: a > b, GE: lambda a, b: a >= b,
}


def host_eval(e: Expr, env: Mapping[Var, int]) -> Any:
    """The value of an integer/bool expression of symbolic sizes (exact Python ints)."""
    t = type(e)
    if t is Const:
        return e.value
    if isinstance(e, Var):
        return env[e]
    if t in _ARITH:
        return _ARITH[t](host_eval(e.a, env), host_eval(e.b, env))
    if t in (FloorDiv, FloorMod):
        a, b = host_eval(e.a, env), host_eval(e.b, env)
        if b == 0:
            raise ShapeError(f"division by zero evaluating {e!r} with sizes "
                             f"{ {v.name: x for v, x in env.items()} }")
        return a // b if t is FloorDiv else a % b
    if isinstance(e, CmpOp):
        return _CMP[t](host_eval(e.a, env), host_eval(e.b, env))
    if t is And:
        return host_eval(e.a, env) and host_eval(e.b, env)
    if t is Or:
        return host_eval(e.a, env) or host_eval(e.b, env)
    if t is Not:
        return not host_eval(e.a, env)
    if t is Select:
        return host_eval(e.true_value if host_eval(e.cond, env) else e.false_value, env)
    if t is Cast:
        v = host_eval(e.value, env)
        return bool(v) if e.dtype is DType.BOOL else int(v)
    raise BuildError(f"cannot evaluate {e!r} on the host")


def check_host_expr(e: Expr, scope: "set[Var] | frozenset[Var]", what: str) -> None:
    """Refuse, at build time, a host expression ``host_eval`` could not evaluate."""
    ok = (Const, Var, Add, Sub, Mul, Min, Max, FloorDiv, FloorMod, CmpOp, And, Or, Not, Select,
          Cast)
    if not isinstance(e, ok) or (isinstance(e, Const) and e.dtype.is_float) or \
            (isinstance(e, Cast) and e.dtype.is_float):
        raise BuildError(f"CUDA: {what} ({e!r}) must be computed on the host from symbolic sizes, "
                         f"but uses a {type(e).__name__} node")
    if isinstance(e, Var) and e not in scope:
        raise BuildError(f"CUDA: {what} ({e!r}) uses variable '{e.name}', which the host does not "
                         f"know (only symbolic sizes are)")
    for c in children(e):
        check_host_expr(c, scope, what)


def buffer_nbytes(buf: Buffer) -> Expr:
    """Bytes spanned by ``buf`` with its strides, as an expression of sizes."""
    span: Expr = Const(1, "int64")
    for dim, stride in zip(buf.shape, buf.effective_strides()):
        span = span + (dim - 1) * stride
    return span * buf.dtype.itemsize


# ---- running a plan ----------------------------------------------------------------------------------
def launch_config(kernel: Any, env: Mapping[Var, int], pointers: Mapping[int, int]) -> LaunchConfig:
    grid = tuple(int(host_eval(g, env)) for g in kernel.grid)
    block = tuple(int(host_eval(b, env)) for b in kernel.block)
    cfg = LaunchConfig(grid, block)  # type: ignore[arg-type]
    if cfg.empty:
        return cfg
    check_launch(kernel.name, grid, block, kernel.max_threads, kernel.gpu or GPUArch(0))
    for p in kernel.params:
        if p.buffer is not None:
            cfg.args.append(pointers[id(p.buffer)])
        else:
            cfg.args.append(int(env[p.var]))
    return cfg


def execute(plan: Any, env: dict, pointers: dict, backend: HostBackend) -> None:
    """Run ``plan``: ``env`` binds size variables, ``pointers`` maps id(Buffer) to addresses."""
    if isinstance(plan, HostSeq):
        for item in plan.items:
            execute(item, env, pointers, backend)
    elif isinstance(plan, HostAlloc):
        ptr = backend.alloc(plan.buffer, max(int(host_eval(plan.nbytes, env)), 1))
        pointers[id(plan.buffer)] = ptr
        try:
            execute(plan.body, env, pointers, backend)
        finally:
            del pointers[id(plan.buffer)]
            backend.free(ptr)
    elif isinstance(plan, HostLet):
        env[plan.var] = host_eval(plan.value, env)
        try:
            execute(plan.body, env, pointers, backend)
        finally:
            del env[plan.var]
    elif isinstance(plan, HostIf):
        branch = plan.then if host_eval(plan.cond, env) else plan.other
        if branch is not None:
            execute(branch, env, pointers, backend)
    elif isinstance(plan, HostLaunch):
        cfg = launch_config(plan.kernel, env, pointers)
        if not cfg.empty:
            backend.launch(plan.kernel, cfg)
    else:
        raise BuildError(f"unknown host plan node {type(plan).__name__}")


def plan_kernels(plan: Any) -> list:
    """The kernels a plan launches, in order."""
    out: list = []

    def walk(p: Any) -> None:
        if isinstance(p, HostSeq):
            for x in p.items:
                walk(x)
        elif isinstance(p, (HostAlloc, HostLet)):
            walk(p.body)
        elif isinstance(p, HostIf):
            walk(p.then)
            if p.other is not None:
                walk(p.other)
        elif isinstance(p, HostLaunch):
            out.append(p.kernel)
    walk(plan)
    return out
