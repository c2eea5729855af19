"""Random schedules of a random computation, applied one primitive at a time.

Every primitive call is generated as a line of Python and ``exec``'d in the namespace
of the computation, so the fuzzer's notes are a script that replays the schedule.  A
primitive may be refused, but only with a ``TDSLError``, and a refused call must leave
the schedule as it was (same trace length, same stages and loops, same lowered IR).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import event
from hypothesis import strategies as st

import tdsl as td
from tdsl.errors import TDSLError
from tdsl.tensor import IterKind

from .computations import Computation
from .stats import COUNTS

HEADER = '''\
import numpy as np
import tdsl as td
from tdsl import interpreter


def lp(stage, name):
    """The leaf loop of ``stage`` called ``name``."""
    return next(v for v in stage.leaf_iter_vars if v.name == name)


def gemv(m, l):
    """c[i] = sum_k a[k] * b[k, i]: one row of P @ W, m columns at a time."""
    a = td.placeholder((l,), name="a")
    b = td.placeholder((l, m), name="b")
    k = td.reduce_axis((0, l), name="k")
    c = td.compute((m,), lambda i: td.sum(a[k] * b[k, i], axis=k), name="c")
    return td.decl_tensor_intrin(c.op, name=f"gemv{m}x{l}")
'''

MOVES = ("split_factor", "split_nparts", "reorder", "fuse", "tile",
         "compute_at", "compute_at", "compute_at", "compute_inline", "compute_root",
         "unroll", "vectorize", "parallel", "cache_read", "cache_write", "rfactor",
         "tensorize_recipe", "tensorize")


class PrimitiveFailure(AssertionError):
    """A primitive raised something other than a TDSLError, or changed a refused schedule."""


@dataclasses.dataclass
class Fuzz:
    """One computation, its schedule ``s`` and the script that built them."""

    comp: Computation
    ns: dict
    lines: list
    tensors: list                       # source expressions of scheduled tensors
    readable: list                      # tensors that cache_read may copy (inputs, all outputs)
    intrinsics: dict
    applied: int = 0
    refused: int = 0

    @staticmethod
    def start(comp: Computation) -> "Fuzz":
        ns = dict(comp.ns)
        exec(HEADER, ns)   # noqa: S102
        exec("s = td.create_schedule(%s.op)" % comp.output, ns)   # noqa: S102
        readable = list(comp.inputs)
        for t in comp.tensors:
            readable.append(t)
            if t.endswith("0"):
                readable.append(t[:-1] + "1")
        return Fuzz(comp, ns, ["s = td.create_schedule(%s.op)" % comp.output],
                    list(comp.tensors), readable, {})

    @property
    def s(self) -> Any:
        return self.ns["s"]

    def script(self) -> str:
        return "\n".join([HEADER, self.comp.source, *self.lines])

    # ---- state -------------------------------------------------------------------------
    def stage(self, expr: str) -> Any:
        return self.s[eval(expr, self.ns)]   # noqa: S307

    def leaves(self, expr: str) -> list[str]:
        return [v.name for v in self.stage(expr).leaf_iter_vars]

    def expr_of_stage(self, stage: Any) -> "str | None":
        for e in self.tensors:
            if self.stage(e) is stage:
                return e
        return None

    def snapshot(self) -> tuple:
        """What a refused primitive must not change."""
        s = self.s
        stages = tuple((st.name, tuple(v.name for v in st.leaf_iter_vars),
                        tuple(v.name for v in st.all_iter_vars), st.attach_type.value,
                        st.attach_stage.name if st.attach_stage is not None else None,
                        st.attach_ivar.name if st.attach_ivar is not None else None,
                        tuple(sorted((iv.name, a.kind.name) for iv, a in st.iter_attrs.items())),
                        id(st.op))
                       for st in s.stages)
        try:
            ir = str(td.lower(s, self.comp.args))
        except Exception as e:   # noqa: BLE001 - compared, not judged, here
            ir = f"{type(e).__name__}: {e}"
        return len(s.trace), stages, ir

    # ---- applying one primitive ----------------------------------------------------------
    def apply(self, primitive: str, line: str, new_tensors: tuple = ()) -> bool:
        """Run ``line``; True if it was accepted.  A refusal must be a TDSLError and leave
        the schedule unchanged."""
        before = self.snapshot()
        try:
            exec(line, self.ns)   # noqa: S102
        except TDSLError as e:
            self.refused += 1
            COUNTS["primitives refused"] += 1
            event(f"primitive refused: {primitive} ({type(e).__name__})")
            after = self.snapshot()
            if after != before:
                diff = [name for name, x, y in zip(("trace length", "stages", "lowered IR"),
                                                   before, after) if x != y]
                raise PrimitiveFailure(f"refused primitive changed the schedule ({', '.join(diff)})"
                                       f":\n  {line}\n  error: {e}\n--- before:\n{before[2]}\n"
                                       f"--- after:\n{after[2]}") from e
            self.lines.append(f"# refused ({type(e).__name__}): {line}")
            return False
        except Exception as e:
            raise PrimitiveFailure(f"primitive raised {type(e).__module__}.{type(e).__name__} "
                                   f"(not a TDSLError):\n  {line}\n  {e}") from e
        self.applied += 1
        COUNTS["primitives applied"] += 1
        event(f"primitive applied: {primitive}")
        self.lines.append(line)
        for t in new_tensors:
            self.tensors.append(t)
            self.readable.append(t)
        return True

    # ---- drawing primitives ----------------------------------------------------------------
    def draw_move(self, draw: Any) -> None:
        move = draw(st.sampled_from(MOVES), label="move")
        getattr(self, "_" + move)(draw)

    def _stage_expr(self, draw: Any) -> str:
        return draw(st.sampled_from(self.tensors), label="stage")

    def _loop(self, draw: Any, expr: str) -> "str | None":
        leaves = self.leaves(expr)
        if not leaves:
            return None
        return draw(st.sampled_from(leaves), label="loop")

    def _split(self, draw: Any, key: str) -> None:
        t = self._stage_expr(draw)
        loop = self._loop(draw, t)
        if loop is None:
            return
        f = draw(st.integers(1, 5), label=key)
        self.apply("split", f's[{t}].split(lp(s[{t}], "{loop}"), {key}={f})')

    def _split_factor(self, draw: Any) -> None:
        self._split(draw, "factor")

    def _split_nparts(self, draw: Any) -> None:
        self._split(draw, "nparts")

    def _reorder(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        leaves = self.leaves(t)
        if len(leaves) < 2:
            return
        perm = draw(st.permutations(leaves), label="order")
        k = draw(st.integers(2, len(leaves)), label="count")
        loops = ", ".join(f'lp(s[{t}], "{n}")' for n in perm[:k])
        self.apply("reorder", f"s[{t}].reorder({loops})")

    def _fuse(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        leaves = self.leaves(t)
        if len(leaves) < 2:
            return
        if draw(st.booleans(), label="adjacent"):
            i = draw(st.integers(0, len(leaves) - 2), label="at")
            pair = leaves[i:i + 2]
        else:
            pair = draw(st.lists(st.sampled_from(leaves), min_size=2, max_size=2, unique=True))
        loops = ", ".join(f'lp(s[{t}], "{n}")' for n in pair)
        self.apply("fuse", f"s[{t}].fuse({loops})")

    def _tile(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        leaves = self.leaves(t)
        if len(leaves) < 2:
            return
        i = draw(st.integers(0, len(leaves) - 2), label="at")
        fx, fy = draw(st.integers(1, 5), label="x_factor"), draw(st.integers(1, 5), label="y_factor")
        self.apply("tile", f's[{t}].tile(lp(s[{t}], "{leaves[i]}"), lp(s[{t}], "{leaves[i + 1]}"), '
                           f"{fx}, {fy})")

    def _compute_at(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        consumers = [e for e in (self.expr_of_stage(c) for c in self.s.consumers(self.stage(t)))
                     if e is not None]
        if consumers and draw(st.integers(0, 4), label="parent kind"):
            parent = draw(st.sampled_from(consumers), label="parent")
        else:
            parent = self._stage_expr(draw)
        loop = self._loop(draw, parent)
        if loop is None:
            return
        self.apply("compute_at", f's[{t}].compute_at(s[{parent}], lp(s[{parent}], "{loop}"))')

    def _compute_inline(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        self.apply("compute_inline", f"s[{t}].compute_inline()")

    def _compute_root(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        self.apply("compute_root", f"s[{t}].compute_root()")

    def _annotate(self, draw: Any, what: str) -> None:
        t = self._stage_expr(draw)
        loop = self._loop(draw, t)
        if loop is not None:
            self.apply(what, f's[{t}].{what}(lp(s[{t}], "{loop}"))')

    def _unroll(self, draw: Any) -> None:
        self._annotate(draw, "unroll")

    def _vectorize(self, draw: Any) -> None:
        self._annotate(draw, "vectorize")

    def _parallel(self, draw: Any) -> None:
        roots = [t for t in self.tensors if self.stage(t).attach_type.value == "root"]
        t = draw(st.sampled_from(roots or self.tensors), label="stage")
        leaves = self.leaves(t)
        if leaves:
            loop = leaves[0] if draw(st.integers(0, 3), label="outermost") else \
                draw(st.sampled_from(leaves), label="loop")
            self.apply("parallel", f's[{t}].parallel(lp(s[{t}], "{loop}"))')

    def _cache_read(self, draw: Any) -> None:
        src = draw(st.sampled_from(self.readable), label="cached tensor")
        try:
            readers = [e for e in (self.expr_of_stage(r) for r in self.s.readers(self.stage(src)))
                       if e is not None]
        except TDSLError:
            readers = []
        if not readers or not draw(st.integers(0, 5), label="reader kind"):
            readers = [self._stage_expr(draw)]
        else:
            readers = draw(st.lists(st.sampled_from(readers), min_size=1, max_size=2, unique=True),
                           label="readers")
        new = f"R{len(self.lines)}"
        self.apply("cache_read", f'{new} = s.cache_read({src}, "local", [{", ".join(readers)}])',
                   (new,))

    def _cache_write(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        new = f"CW{len(self.lines)}"
        if t.endswith("0") and t[:-1] + "1" in self.readable and draw(st.booleans(), label="all outputs"):
            self.apply("cache_write", f'{new} = s.cache_write([{t}, {t[:-1]}1], "local")',
                       (f"{new}[0]",))
        else:
            self.apply("cache_write", f'{new} = s.cache_write({t}, "local")', (new,))

    def _rfactor(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        st_ = self.stage(t)
        reduce_leaves = [v.name for v in st_.leaf_iter_vars if v.kind is IterKind.REDUCE]
        if not reduce_leaves:
            return
        loop = draw(st.sampled_from(reduce_leaves), label="loop")
        fa = draw(st.integers(0, 2), label="factor_axis")
        new = f"RF{len(self.lines)}"
        self.apply("rfactor", f'{new} = s.rfactor({t}, lp(s[{t}], "{loop}"), factor_axis={fa})',
                   (new,))

    def draw_tensorize_recipe(self, draw: Any) -> None:
        """Start a schedule with the split/reorder/tensorize steps of a gemv."""
        self._tensorize_recipe(draw)

    def _intrin(self, draw: Any) -> str:
        m = draw(st.sampled_from([1, 2, 4]), label="intrin rows")
        l = self.comp.const["M"] if "m" not in self.comp.symbolic else \
            draw(st.integers(1, 9), label="intrin length")
        name = f"gemv{m}x{l}"
        if name not in self.intrinsics:
            exec(f"{name} = gemv({m}, {l})", self.ns)   # noqa: S102
            self.lines.append(f"{name} = gemv({m}, {l})")
            self.intrinsics[name] = self.ns[name]
        return name

    def _tensorize(self, draw: Any) -> None:
        t = self._stage_expr(draw)
        loop = self._loop(draw, t)
        if loop is not None:
            intrin = self._intrin(draw)
            self.apply("tensorize", f's[{t}].tensorize(lp(s[{t}], "{loop}"), {intrin})')

    def _tensorize_recipe(self, draw: Any) -> None:
        """split the last spatial loop by the intrinsic's rows, move the reduction loops
        innermost, tensorize: each a separate (possibly refused) primitive call."""
        cands = [t for t in self.tensors if t in self.comp.gemv_stages] or self.tensors
        t = draw(st.sampled_from(cands), label="stage")
        intrin = self._intrin(draw)
        m = int(intrin[4:].split("x")[0])
        st_ = self.stage(t)
        spatial = [v.name for v in st_.leaf_iter_vars if v.kind is not IterKind.REDUCE]
        if not spatial:
            return
        self.apply("split", f's[{t}].split(lp(s[{t}], "{spatial[-1]}"), factor={m})')
        st_ = self.stage(t)
        spatial = [v.name for v in st_.leaf_iter_vars if v.kind is not IterKind.REDUCE]
        reduce_ = [v.name for v in st_.leaf_iter_vars if v.kind is IterKind.REDUCE]
        order = spatial + reduce_
        if len(order) >= 2 and order != self.leaves(t):
            loops = ", ".join(f'lp(s[{t}], "{n}")' for n in order)
            self.apply("reorder", f"s[{t}].reorder({loops})")
        if spatial:
            self.apply("tensorize", f's[{t}].tensorize(lp(s[{t}], "{spatial[-1]}"), {intrin})')
