"""CUDA code for ``AllReduce`` (a cross-thread reduction), as TVM's lower_thread_allreduce.

Three shapes, chosen from the launch configuration:

* ``warp``: each group is an aligned run of ``W`` consecutive lanes, ``W`` a power of two
  <= 32 (the reduced axes come first in the linear thread order, x fastest, leaving out
  axes of extent 1, and have constant extents): a butterfly of ``__shfl_xor_sync``
  (log2 W steps, no shared memory, no barrier) leaves every lane with the group's result.
* ``warps``: the same with ``W = 32*n`` (n <= 32): a butterfly inside each warp, lane 0 of
  each warp posts its warp's result in shared memory, one barrier, every thread combines
  its group's ``n`` partials (in the same order, so all get the same value), and a barrier
  before the scratch is reused.
* ``tree``: anything else (groups that are not runs of lanes, symbolic extents, types
  without shuffles): every thread posts its value in shared memory and a
  barrier-separated tree halves the live range each step.

Every thread of the block must reach the all-reduce, so one under a thread-dependent
condition is refused at build, as a barrier is.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from tdsl.dtype import DType
from tdsl.errors import BuildError
from tdsl.expr import Const, Expr
from tdsl.stmt import AllReduce, ThreadTag

from .cstyle import c_type

if TYPE_CHECKING:
    from .codegen import KernelRenderer

WARP = 32
#: value types __shfl_xor_sync moves directly
_SHUFFLE_TYPES = {DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64}
_AXES = (ThreadTag.THREAD_X, ThreadTag.THREAD_Y, ThreadTag.THREAD_Z)


def _const(e: Expr) -> "int | None":
    return int(e.value) if isinstance(e, Const) else None


def plan(s: AllReduce, block: "tuple[Expr, Expr, Expr]") -> tuple[str, int]:
    """(shape, width): the strategy for ``s`` in a block of ``block`` threads.  Shuffles
    need each group to be a run of consecutive lanes: the reduced axes come first in the
    linear thread order (x fastest), once axes of extent 1 are left out, with constant
    extents; ``width`` is then the group's size in lanes."""
    shuffles = all(v.dtype in _SHUFFLE_TYPES for v in s.values)
    order = [(t, _const(e)) for t, e in zip(_AXES, block) if t in s.tags or _const(e) != 1]
    n = len(s.tags)
    if not shuffles or any(t not in s.tags or e is None for t, e in order[:n]):
        return "tree", 0
    width = 1
    for _, e in order[:n]:
        width *= e   # type: ignore[operator]
    if width <= WARP and width & (width - 1) == 0:
        return "warp", width
    if width % WARP == 0 and width // WARP <= WARP:
        return "warps", width
    return "tree", 0


def scratch_bytes(s: AllReduce, block: "tuple[Expr, Expr, Expr]", max_threads: int) -> int:
    """Static shared memory the all-reduce declares (0 for the warp shape)."""
    shape, _ = plan(s, block)
    count = 0 if shape == "warp" else WARP if shape == "warps" else max_threads
    return sum(count * v.dtype.itemsize for v in s.values)


class AllReduceEmitter:
    """Emits one kernel's all-reduces through its renderer."""

    def __init__(self, r: "KernelRenderer"):
        self.r = r
        #: declarations of the shared scratch arrays, hoisted to the kernel's top
        self.decls: list[str] = []

    def emit(self, s: AllReduce) -> None:
        r = self.r
        if r.divergent:
            raise BuildError(f"CUDA kernel '{r.kernel.name}': a cross-thread reduction "
                             f"({s.combiner.name} over {', '.join(t.value for t in s.tags)}) sits "
                             f"under a condition that differs between threads of a block (a "
                             f"thread loop shorter than the launch, or a thread-dependent if); "
                             f"every thread of the block must take part in it")
        shape, width = plan(s, r.kernel.block)
        types = [c_type(v.dtype) for v in s.values]
        r.emit(f"// all-reduce ({s.combiner.name}) over {', '.join(t.value for t in s.tags)}: "
               f"{shape}")
        with self.braces():
            vals = [r.names.fresh(f"{b.name}_v") for b in s.results]
            cond = r.expr(s.cond)
            for v, t, value, ident in zip(vals, types, s.values, s.combiner.identity):
                code = r.expr(value)
                init = code if cond == "true" else f"({cond}) ? ({code}) : ({r.expr(ident)})"
                r.emit(f"{t} {v} = {init};")
            if shape == "warp":
                self.butterfly(s, vals, types, width)
            elif shape == "warps":
                self.butterfly(s, vals, types, WARP)
                self.across_warps(s, vals, types, width)
            else:
                self.tree(s, vals, types)
            for b, v in zip(s.results, vals):
                r.emit(f"{r.buffer_ref(b)}[0] = {v};")

    @contextmanager
    def braces(self) -> Iterator[None]:
        self.r.emit("{")
        self.r.depth += 1
        try:
            yield
        finally:
            self.r.depth -= 1
            self.r.emit("}")

    # ---- pieces ------------------------------------------------------------------------------
    def combine(self, s: AllReduce, acc: list[str], other: list[str], types: list[str]) -> None:
        """``acc = combiner(acc, other)``.  One value: the combiner's variables name ``acc``
        and ``other`` directly; a tuple updates together, so its inputs are copied first."""
        r, red = self.r, s.combiner
        if len(acc) == 1:
            names = r.names.by_id
            saved = [names.get(id(v)) for v in (red.lhs[0], red.rhs[0])]
            names[id(red.lhs[0])], names[id(red.rhs[0])] = acc[0], other[0]
            try:
                r.emit(f"{acc[0]} = {r.expr(red.result[0])};")
            finally:
                for v, old in zip((red.lhs[0], red.rhs[0]), saved):
                    if old is None:
                        names.pop(id(v), None)
                    else:
                        names[id(v)] = old
            return
        with self.braces(), ExitStack() as stack:
            for var, src, t in list(zip(red.lhs, acc, types)) + list(zip(red.rhs, other, types)):
                name = stack.enter_context(r.names.scoped(var, var.name))
                r.emit(f"const {t} {name} = {src};")
            for a, e in zip(acc, red.result):
                r.emit(f"{a} = {r.expr(e)};")

    def lane_mask(self) -> str:
        """The lanes of this thread's warp that exist (the last warp may be partial)."""
        k = self.r.kernel
        total = k.threads_per_block
        if total is not None and total % WARP == 0:
            return "0xffffffffu"
        mask = self.r.names.fresh("lanes")
        n = self.r.names.fresh("nlanes")
        self.r.emit(f"const unsigned {n} = {self.threads()} - ({self.linear()} & ~31u);")
        self.r.emit(f"const unsigned {mask} = {n} >= 32u ? 0xffffffffu : ((1u << {n}) - 1u);")
        return mask

    @staticmethod
    def threads() -> str:
        return "(blockDim.x * blockDim.y * blockDim.z)"

    @staticmethod
    def linear() -> str:
        return "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"

    def butterfly(self, s: AllReduce, vals: list[str], types: list[str], width: int) -> None:
        r = self.r
        if width <= 1:
            return
        mask = self.lane_mask()
        off = width // 2
        while off >= 1:
            other = [r.names.fresh("o") for _ in vals]
            for o, v, t in zip(other, vals, types):
                r.emit(f"const {t} {o} = __shfl_xor_sync({mask}, {v}, {off}, {width});")
            self.combine(s, vals, other, types)
            off //= 2

    def scratch(self, t: str, count: int) -> str:
        r = self.r
        r.helpers.add("shared")
        name = r.names.fresh("red_buf")
        self.decls.append(f"  __shared__ tdsl_shared<{t}, {count}> {name};"
                          f"  // cross-thread reduction scratch")
        return name

    def across_warps(self, s: AllReduce, vals: list[str], types: list[str], width: int) -> None:
        """Lane 0 of each warp posts its warp's result; every thread combines its group's
        ``width / 32`` partials in the same order (so all get the same value)."""
        r = self.r
        bufs = [self.scratch(t, WARP) for t in types]
        lin = r.names.fresh("lin")
        r.emit(f"const unsigned {lin} = {self.linear()};")
        with r.block(f"if (({lin} & 31u) == 0u)"):
            for b, v in zip(bufs, vals):
                r.emit(f"{b}[{lin} >> 5] = {v};")
        r.emit("__syncthreads();")
        base = r.names.fresh("warp0")
        r.emit(f"const unsigned {base} = ({lin} / {width}u) * {width // WARP}u;")
        for b, v in zip(bufs, vals):
            r.emit(f"{v} = {b}[{base}];")
        w = r.names.fresh("w")
        with r.block(f"for (unsigned {w} = 1; {w} < {width // WARP}u; ++{w})"):
            other = [r.names.fresh("o") for _ in vals]
            for o, b, t in zip(other, bufs, types):
                r.emit(f"const {t} {o} = {b}[{base} + {w}];")
            self.combine(s, vals, other, types)
        r.emit("__syncthreads();")

    def tree(self, s: AllReduce, vals: list[str], types: list[str]) -> None:
        r = self.r
        bufs = [self.scratch(t, r.kernel.max_threads) for t in types]
        dims = {ThreadTag.THREAD_X: "blockDim.x", ThreadTag.THREAD_Y: "blockDim.y",
                ThreadTag.THREAD_Z: "blockDim.z"}
        idx = {ThreadTag.THREAD_X: "threadIdx.x", ThreadTag.THREAD_Y: "threadIdx.y",
               ThreadTag.THREAD_Z: "threadIdx.z"}

        def radix(tags: list) -> tuple[str, str]:
            """(index, extent) of the mixed-radix number the tags make, x fastest."""
            index, extent = "0u", "1u"
            for t in reversed(tags):   # z first: outermost digit
                index = f"({index} * {dims[t]} + {idx[t]})"
            for t in tags:
                extent = f"{extent} * {dims[t]}"
            return index, extent
        red_tags = [t for t in _AXES if t in s.tags]
        ri, rn = radix(red_tags)
        gi, _ = radix([t for t in _AXES if t not in s.tags])
        names = {x: r.names.fresh(x) for x in ("rank", "width", "slot")}
        r.emit(f"const unsigned {names['rank']} = {ri};")
        r.emit(f"const unsigned {names['width']} = {rn};")
        r.emit(f"const unsigned {names['slot']} = {gi} * {names['width']} + {names['rank']};")
        for b, v in zip(bufs, vals):
            r.emit(f"{b}[{names['slot']}] = {v};")
        r.emit("__syncthreads();")
        # the steps unrolled from a power of two covering the most threads a block can have
        # (steps wider than this launch's groups only synchronize): every barrier is its
        # own statement, reached by all threads
        step = 1
        while step < r.kernel.max_threads:
            step *= 2
        step //= 2
        while step >= 1:
            with self.braces():
                with r.block(f"if ({names['rank']} + {step}u < {names['width']} && "
                             f"{names['rank']} < {step}u)"):
                    other = [r.names.fresh("o") for _ in vals]
                    for o, b, t in zip(other, bufs, types):
                        r.emit(f"const {t} {o} = {b}[{names['slot']} + {step}u];")
                    self.combine(s, vals, other, types)
                    for b, v in zip(bufs, vals):
                        r.emit(f"{b}[{names['slot']}] = {v};")
                r.emit("__syncthreads();")
            step //= 2
        for b, v in zip(bufs, vals):
            r.emit(f"{v} = {b}[{names['slot']} - {names['rank']}];")
        r.emit("__syncthreads();")


def find(node: Any) -> list[AllReduce]:
    """The all-reduces under ``node``."""
    from .kernels import walk
    out: list[AllReduce] = []
    walk(node, lambda n: out.append(n) if isinstance(n, AllReduce) else None)
    return out
