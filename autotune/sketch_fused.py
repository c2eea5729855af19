"""Sketch rule FUSED: a composite kernel whose stages only work scheduled together.

``ops.attention`` is seven stages (transposed queries, scores, block max, probabilities,
block sum, weighted values, online-softmax merge) that the default CPU schedule
(``ops.schedules.llvm_attention``) computes block by block inside the merge's key-block
loop, so that nothing of size seq_q x seq_k exists.  Scheduled stage by stage, as the
generic rules would, the scores become a whole matrix at root and the space is astronomically
large.  So the sketch plans such a group as one rule: the stages are claimed (no other rule
touches them) and its knobs are the default schedule's parameters
(``llvm_attention.AttentionTiles``):

* ``<out>.rows`` -- queries per parallel task (1, 2 or 4 vectors; a decode step's few
  queries as they are);
* ``<out>.score_keys`` -- keys per register tile of the scores (the unrolled tile is
  score_keys x the task's query vectors);
* ``<out>.acc_rows`` -- queries per register tile of the weighted values (x d, unrolled);
* ``<out>.parts`` -- decode (one query) only: the key blocks split into this many parts
  reduced in parallel (rfactor).

The key block (``block_k``) is part of the computation (its shapes), not of the schedule:
it is chosen when the attention is declared (``ops.attention``'s rule by sequence length).
CPU only: the CUDA sketch keeps its generic rules.
"""
from __future__ import annotations

from typing import Any

from tdsl.ops.schedules import llvm_attention as LA
from tdsl.ops.schedules.graph import stage_kind
from tdsl.ops.tags import OpKind

from .space import OtherOptionSpace

#: Vector registers a register tile may use (of 32 with AVX-512, 16 otherwise), leaving
#: some for the operands of one step.
_REG_SHARE = {32: 28, 16: 13}


def fused_groups(sch: Any) -> dict[int, list[Any]]:
    """``{id(anchor stage): [its member stages]}`` for each attention of ``sch``."""
    groups: dict[int, list[Any]] = {}
    for st in sch.stages:
        if st.is_placeholder or stage_kind(st) is not OpKind.ATTENTION_OUT:
            continue
        a = LA.attention_stages(sch, st)
        if a is not None:
            groups[id(st)] = [a.merge, a.bacc, a.bsum, a.prob, a.bmax, a.score, a.qt]
    return groups


def _ext(e: Any, sizes: Any) -> "int | None":
    from .irutil import eval_int
    v = eval_int(e, sizes, 0)
    return v if v > 0 else None


def attention_knobs(src: Any, name: str, anchor_op: Any, nblocks: "int | None") -> None:
    """Add the knobs of the attention whose result stage is ``name`` to ``src.space``."""
    from tdsl.ops.schedules.cpu import cpu_of
    cpu = cpu_of(src.target)        # what ``schedule_attention`` will tile for
    lanes = cpu.lanes(anchor_op.output(0).dtype)
    regs = 32 if cpu.vector_bits >= 512 else 16
    budget = _REG_SHARE[regs]
    seq_q = _ext(anchor_op.axis[2].dom.extent, src.sizes)
    d = _ext(anchor_op.axis[3].dom.extent, src.sizes) or 4 * lanes
    dvec = max(1, -(-d // lanes))
    if seq_q is not None and seq_q < lanes:
        rows = [seq_q]
    else:
        rows = [r * lanes for r in (1, 2, 4) if seq_q is None or r == 1 or r * lanes <= seq_q]
    src.space.add(f"{name}.rows", OtherOptionSpace(rows))
    keys = [k for k in (4, 8, 16) if k <= budget]       # x one query vector; fewer
    #                                                      keys for more (``apply_attention``)
    src.space.add(f"{name}.score_keys", OtherOptionSpace(keys))
    acc = [a for a in (1, 2, 4, 8) if a * dvec <= budget and a <= max(rows)] or [1]
    src.space.add(f"{name}.acc_rows", OtherOptionSpace(acc))
    if rows == [1] and nblocks is not None:
        parts = [p for p in (1, 2, 4, 8) if p <= nblocks]
        src.space.add(f"{name}.parts", OtherOptionSpace(parts))


def apply_attention(apply: Any, name: str) -> None:
    """Schedule the attention whose result stage is ``name`` with the config's tiles."""
    from tdsl.ops.schedules.cpu import cpu_of
    cpu = cpu_of(apply.src.target)
    st = apply.stage(name)
    rows = apply.val(f"{name}.rows")
    keys, acc = apply.val(f"{name}.score_keys"), apply.val(f"{name}.acc_rows")
    lanes = cpu.lanes(st.op.output(0).dtype)
    keys = max(1, min(keys, _REG_SHARE[32 if cpu.vector_bits >= 512 else 16] //
                      max(1, -(-rows // lanes))))
    tiles = LA.AttentionTiles(rows=rows, score_keys=keys, acc_rows=min(acc, rows),
                              parts=apply.val(f"{name}.parts"))
    LA.schedule_attention(apply.sch, st, None, cpu, tiles)
