"""Tasks of a model's forward pass written as ``tdsl.ops`` calls (TVM's ``extract_tasks``):
one task per listed tensor, reading the placeholders and the other listed tensors as inputs;
tasks of the same computation and sizes are one, weighted by how often the model runs it."""
from __future__ import annotations

from typing import Any, Sequence

from tdsl.errors import TuningError
from tdsl.expr import TensorLoad
from tdsl.keywords import check_keywords
from tdsl.tensor import PlaceholderOp, Tensor, placeholder
from tdsl.visitor import transform

from .task import Task


def _cut(out: Tensor, boundary: dict[int, Tensor], cache: dict[int, Tensor]) -> Tensor:
    """``out``'s computation with every read of a ``boundary`` tensor (other than ``out``)
    turned into a read of a placeholder of the same shape, dtype and name."""
    memo: dict[int, Any] = {}

    def tensor(t: Tensor) -> Tensor:
        if isinstance(t.op, PlaceholderOp):
            return t
        if id(t) in boundary and t is not out:
            if id(t) not in cache:
                p = placeholder(t.shape, t.dtype, name=t.name)
                p.seq = t.seq    # listed among the task's inputs where ``t`` was declared
                cache[id(t)] = p
            return cache[id(t)]
        return op_of(t.op).outputs[t.value_index]

    def op_of(op: Any) -> Any:
        if id(op) in memo:
            return memo[id(op)]
        changed = False

        def pre(n: Any) -> Any:
            nonlocal changed
            if isinstance(n, TensorLoad):
                new = tensor(n.tensor)
                idx = tuple(transform(i, pre=pre) for i in n.indices)
                changed = changed or new is not n.tensor
                return TensorLoad(new, idx)
            return None
        body = [transform(b, pre=pre) for b in op.body]
        memo[id(op)] = op.with_body(body) if changed else op
        return memo[id(op)]
    return tensor(out)


@check_keywords
def extract_tasks(outputs: Sequence[Tensor], target: Any = "llvm",
                  sizes: "dict | None" = None) -> tuple[list[Task], list[int]]:
    """The tasks of a model's forward pass and their weights (TVM's ``extract_tasks``).

    ``outputs``: the tensors that end a kernel, e.g. the result of each ``tdsl.ops``
    call of the forward pass; each becomes one task (``create_auto_task``) whose
    inputs are the placeholders and the other listed tensors it reads, in the order they
    were declared (created), then the output.  Tasks with
    the same key (the same computation and sizes) are one, and its weight is how many
    listed tensors it stands for.  ``sizes``: representative sizes of symbolic
    dimensions.  Returns ``(tasks, weights)`` in order of first appearance.
    """
    from .auto_schedule import create_auto_task
    outs = list(outputs)
    for t in outs:
        if not isinstance(t, Tensor):
            raise TuningError(f"extract_tasks: expected tensors (the results of tdsl.ops calls), "
                              f"got {type(t).__name__}")
        if isinstance(t.op, PlaceholderOp):
            raise TuningError(f"extract_tasks: {t.name!r} is a placeholder, not a kernel output")
    boundary = {id(t): t for t in outs}
    cache: dict[int, Tensor] = {}
    tasks: list[Task] = []
    weights: list[int] = []
    index: dict[str, int] = {}
    for t in outs:
        task = create_auto_task([_cut(t, boundary, cache)], target, sizes=sizes, name=t.name)
        if task.key in index:
            weights[index[task.key]] += 1
        else:
            index[task.key] = len(tasks)
            tasks.append(task)
            weights.append(1)
    return tasks, weights
