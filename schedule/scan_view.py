"""``s[update]`` and ``s[init]`` of a ``td.scan``: views of the scan's own stage.

TVM users schedule a scan through its init and update computes (``s[s_update].split(
s_update.op.axis[1], ...)``, the same for ``s_init``).  In tdsl they are not stages of their
own: the scan stage's loops are its spatial axes, and one nest computes, per spatial point,
the init rows then the update rows.  A view translates axis ``d >= 1`` of the init or update
compute to the scan stage's spatial axis ``d - 1`` and forwards the primitive, so the usual
schedule applies once; the second part's identical request (the same split, the same
binding) returns what the first made.  A different request cannot be honoured by one nest
and raises ``ScheduleError``.  A compute substituted into the update body (it reads the
state, so it runs per step) accepts ``compute_at``/``compute_inline`` as no-ops.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tdsl.errors import ScheduleError
from tdsl.tensor import IterVar

from .relations import Split

if TYPE_CHECKING:
    from tdsl.scan_op import ScanOp
    from .stage import Stage


class ScanPartStage:
    """``s[part]`` for the init or update compute ``part`` of the scan whose stage is
    ``scan_stage`` (``step`` is True for a compute inlined into the update body)."""

    def __init__(self, part: Any, scan_stage: "Stage", step: bool = False):
        self.op = part
        self.scan_stage = scan_stage
        self.step = step

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def scan(self) -> "ScanOp":
        return self.scan_stage.op

    def _fail(self, primitive: str, reason: str, loop: "str | None" = None) -> ScheduleError:
        return ScheduleError(primitive, self.name, f"'{self.name}' is part of the scan "
                             f"'{self.scan.name}', {reason}", loop=loop)

    def _loop(self, primitive: str, iv: Any) -> Any:
        """The scan stage's loop that ``iv`` (an axis of this part, or a loop a primitive
        on the scan stage made) stands for."""
        if self.step:
            raise self._fail(primitive, "computed inside each step of its update; schedule the "
                             "scan through its update compute or s[scan]")
        axes = list(getattr(self.op, "axis", ()))
        if isinstance(iv, IterVar) and any(iv is a for a in axes):
            d = next(k for k, a in enumerate(axes) if a is iv)
            if d == 0:
                raise self._fail(primitive, "and its first axis is the scan axis, which runs "
                                 "sequentially (it is not a loop of the stage)", iv.name)
            return self.scan.spatial_axis[d - 1]
        return iv

    def split(self, parent: Any, factor: Any = None, nparts: Any = None) -> tuple:
        loop = self._loop("split", parent)
        st = self.scan_stage
        if loop not in st.leaf_iter_vars:
            done = next((r for r in st.relations if isinstance(r, Split) and r.parent is loop),
                        None)
            if done is not None and _same(done.factor, factor) and _same(done.nparts, nparts):
                return done.outer, done.inner
            if done is not None:
                raise self._fail("split", f"whose init and update run in one loop nest (each "
                                 f"spatial point's rows in order), and its loop '{loop.name}' "
                                 f"was already split differently; split init and update alike",
                                 loop.name)
        return st.split(loop, factor=factor, nparts=nparts)

    def bind(self, ivar: Any, thread_ivar: Any) -> None:
        loop = self._loop("bind", ivar)
        a = self.scan_stage.iter_attrs.get(loop)
        tag = getattr(thread_ivar, "thread_tag", None)
        if a is not None and a.thread_tag is not None and tag is not None:
            if a.thread_tag == tag:
                return
            raise self._fail("bind", f"whose init and update share one loop nest, and loop "
                             f"'{loop.name}' is already bound to {a.thread_tag}", loop.name)
        self.scan_stage.bind(loop, thread_ivar)

    def _forward(self, primitive: str, loops: tuple) -> None:
        mapped = [self._loop(primitive, iv) for iv in loops]
        getattr(self.scan_stage, primitive)(*mapped)

    def reorder(self, *args: Any) -> None:
        self._forward("reorder", args)

    def parallel(self, var: Any) -> None:
        st = self.scan_stage
        loop = self._loop("parallel", var)
        a = st.iter_attrs.get(loop)
        if a is None or a.kind.value != "parallel":
            st.parallel(loop)

    def unroll(self, var: Any) -> None:
        self._forward("unroll", (var,))

    def fuse(self, *args: Any) -> Any:
        return self.scan_stage.fuse(*[self._loop("fuse", iv) for iv in args])

    def compute_at(self, parent: Any, scope: Any) -> None:
        host = getattr(parent, "scan_stage", parent)
        if self.step and host is self.scan_stage:
            return   # already computed at each point of each step
        raise self._fail("compute_at", "computed by the scan stage itself")

    def compute_inline(self) -> None:
        if self.step:
            return   # already substituted into the update
        raise self._fail("compute_inline", "computed by the scan stage itself")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise self._fail(name, f"and '{name}' has no meaning for it in tdsl (schedule the "
                         f"scan's loops: split, reorder, fuse, bind, parallel, unroll)")

    def __repr__(self) -> str:
        return f"scan_part({self.name} of {self.scan.name})"


def _same(a: Any, b: Any) -> bool:
    """Two split factors (ints, constants or one symbolic expression) are the same."""
    if a is None or b is None:
        return a is None and b is None
    va, vb = getattr(a, "value", a), getattr(b, "value", b)
    if isinstance(va, int) and isinstance(vb, int):
        return va == vb
    return a is b


def scan_part(sch: Any, op: Any) -> "ScanPartStage | None":
    """The view of ``op`` if it is the init, update or a per-step compute of a scan in
    ``sch``."""
    from tdsl.scan_op import ScanOp
    for st in sch.stages:
        if isinstance(st.op, ScanOp):
            if any(op is p for p in st.op.init_ops + st.op.update_ops):
                return ScanPartStage(op, st)
            if any(op is p for p in st.op.step_ops):
                return ScanPartStage(op, st, step=True)
    return None
