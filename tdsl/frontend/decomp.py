"""The decomposition table: PyTorch's core-ATen decompositions, less the ops tdsl maps whole.

Both routes (``tdsl.compile`` through ``torch.export(...).run_decompositions`` and the Dynamo
backend through ``aot_autograd``) lower to core ATen with this table.  Removed from it, so
that each stays one graph op: scaled-dot-product attention (else a math decomposition with a
boolean mask), ``silu`` (else ``x * sigmoid(x)``).
"""
from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten

#: ops kept whole (each has a converter in aten_ops)
KEEP = (aten.scaled_dot_product_attention.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten.silu.default)


def export_table() -> Any:
    """For ``ExportedProgram.run_decompositions``."""
    table = torch.export.default_decompositions()
    for op in KEEP:
        if op in table:
            del table[op]
    return table


def aot_table() -> dict:
    """For ``aot_autograd(decompositions=...)``."""
    from torch._decomp import core_aten_decompositions
    table = dict(core_aten_decompositions())
    for op in KEEP:
        table.pop(op, None)
    return table
