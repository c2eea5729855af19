"""Read-range checks a kernel runs on its sizes before native code (symbolic shapes).

Lowering proves most reads inside the tensors they read
(``tdsl.lowering.read_bounds``); where the sizes are symbolic and the proof depends on
their values, it leaves a ``ReadCheck`` in the function's attrs.  The argument check
evaluates each one with the sizes bound from the call's arrays and raises a
``ShapeError`` naming the stage, the tensor, the dimension, the range and the shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ShapeError
from ..expr import Expr, Var
from .shape_eval import eval_shape_expr, format_shape_expr

#: ``PrimFunc.attrs`` key: the function's ``ReadCheck`` list
READ_CHECKS_ATTR = "tdsl.read_checks"


@dataclass(frozen=True)
class ReadCheck:
    """Dimension ``dim`` of ``tensor`` is read over ``[lo, hi]`` (expressions of the sizes)
    whenever every extent of the reading stage's domain is >= 1; ``exact``: the range is
    reached (else it is an upper bound of what is read)."""

    where: str
    tensor: str
    dim: int
    lo: Expr
    hi: Expr
    size: Expr
    extents: tuple
    exact: bool

    def run(self, env: Mapping[Var, Any]) -> None:
        """Raise a ShapeError when the read leaves ``[0, size)`` with these sizes."""
        if any(eval_shape_expr(e, env) < 1 for e in self.extents):
            return    # the stage's domain is empty: it reads nothing
        lo, hi, size = (eval_shape_expr(e, env) for e in (self.lo, self.hi, self.size))
        if 0 <= lo and hi < size:
            return
        sizes = ", ".join(f"{v.name} = {x}" for v, x in env.items())
        verb = "reads" if self.exact else "may read"
        raise ShapeError(
            f"{self.where}: with {sizes} it {verb} dimension {self.dim} of '{self.tensor}' at "
            f"[{lo}, {hi}] ({format_shape_expr(self.lo)} .. {format_shape_expr(self.hi)}), "
            f"outside its extent {size} ({format_shape_expr(self.size)}); pass arrays whose "
            f"sizes keep the reads inside, or guard the read with td.if_then_else")


def run_read_checks(checks: Any, env: Mapping[Var, Any]) -> None:
    """Run every check (``checks``: a function's ``READ_CHECKS_ATTR`` value)."""
    for c in checks:
        c.run(env)
