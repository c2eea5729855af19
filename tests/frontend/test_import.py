"""The FX/core-ATen import: which graph ops each ATen op becomes, symbolic sizes, fallbacks.
(No kernels are built here; tests/frontend/test_compile.py runs the models.)"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import sympy  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.export.graph_signature import InputKind  # noqa: E402

import tdsl as td  # noqa: E402
from tdsl.frontend import opset_supports  # noqa: E402
from tdsl.frontend.decomp import export_table  # noqa: E402
from tdsl.frontend.errors import ImportFailure  # noqa: E402
from tdsl.frontend.importer import _SymbolicCall, _Sym, import_fx  # noqa: E402
from tdsl.frontend.symbols import SymbolTable  # noqa: E402

from ._models import Block, SmallCNN, WithCumprod, randomize_bn  # noqa: E402


def imp(model, args, dynamic=None):
    """Export + decompose + import, as tdsl.compile does (without building)."""
    with torch.no_grad():
        ep = torch.export.export(model, args, dynamic_shapes=dynamic)
        ep = ep.run_decompositions(export_table())
    consts = {pos: (ep.state_dict[s.target] if s.target in ep.state_dict
                    else ep.constants[s.target])
              for pos, s in enumerate(ep.graph_signature.input_specs)
              if s.kind != InputKind.USER_INPUT}
    return import_fx(ep.graph_module, consts, opset_supports())


def ops_of(graph) -> list:
    return [n.op for n in graph.nodes]


def test_cnn_ops():
    im = imp(randomize_bn(SmallCNN()), (torch.randn(2, 3, 16, 16),))
    g = im.graph
    ops = ops_of(g)
    for op in ("conv2d", "batch_norm", "relu", "max_pool2d", "clamp", "avg_pool2d",
               "adaptive_avg_pool2d", "reshape", "dense"):
        assert op in ops, (op, str(g))
    assert "torch" not in ops, str(g)
    convs = [n for n in g.nodes if n.op == "conv2d"]
    assert convs[0].attrs["stride"] == (2, 2) and len(convs[0].inputs) == 2   # no bias
    assert convs[1].attrs["groups"] == 8 and convs[1].attrs["dilation"] == (2, 2)
    assert convs[1].attrs["padding"] == (2, 2, 2, 2) and len(convs[1].inputs) == 3
    bn = next(n for n in g.nodes if n.op == "batch_norm")
    assert all(v.is_const for v in bn.inputs[1:])          # snapshotted weights and stats
    assert bn.inputs[3].const.std() > 0                     # the running mean, not zeros
    dense = next(n for n in g.nodes if n.op == "dense")
    assert dense.inputs[1].is_const and dense.inputs[1].shape == (10, 48)   # W[N, K]
    assert im.report.fallbacks == {}


def test_transformer_ops_symbolic_batch():
    im = imp(Block().eval(), (torch.randint(0, 40, (2, 5)),),
             ({0: torch.export.Dim("batch")},))
    g = im.graph
    ops = ops_of(g)
    for op in ("embedding", "layer_norm", "dense", "slice", "transpose", "attention", "gelu",
               "add"):
        assert op in ops, (op, str(g))
    att = next(n for n in g.nodes if n.op == "attention")
    assert att.attrs["causal"] is True and att.attrs["scale"] == pytest.approx(8 ** -0.5)
    batch = g.inputs[0].shape[0]
    assert isinstance(batch, td.Var) and g.inputs[0].shape[1] == 5
    # every Value's symbolic size is an Expr over that one var
    assert att.outputs[0].shape[0] is batch
    assert len(im.symbols.vars) == 1
    ln = next(n for n in g.nodes if n.op == "layer_norm")
    assert ln.attrs["axes"] == (2,)
    assert im.report.fallbacks == {}


def test_mlp_and_creation_constants():
    class M(torch.nn.Module):
        def forward(self, x):
            pos = torch.arange(x.shape[1], dtype=torch.float32)
            return x * pos + torch.ones(4) + x[:, 1:2] + x.select(1, -1).unsqueeze(1)
    im = imp(M(), (torch.randn(3, 4),))
    g = im.graph
    assert "torch" not in ops_of(g), str(g)
    consts = [v for n in g.nodes for v in n.inputs if v.is_const and v.ndim == 1]
    assert any(list(v.const) == [0.0, 1.0, 2.0, 3.0] for v in consts)
    # select(1, -1) = slice [3:4] + reshape
    sl = [n for n in g.nodes if n.op == "slice"]
    assert any(n.attrs["start"] == 3 and n.attrs["end"] == 4 for n in sl), str(g)


def test_unmapped_op_falls_back_with_report():
    im = imp(WithCumprod().eval(), (torch.randn(2, 6),))
    fb = [n for n in im.graph.nodes if n.op == "torch"]
    assert [n.attrs["name"] for n in fb] == ["aten.cumprod.default"]
    assert fb[0].attrs["target"] is torch.ops.aten.cumprod.default
    assert fb[0].attrs["args"][1] == -1 or fb[0].attrs["args"][1] == 1
    assert im.report.fallbacks == {"aten.cumprod.default": 1}
    assert "no tdsl mapping" in im.report.reasons["aten.cumprod.default"]
    assert "cumprod" in str(im.report)


def test_unsupported_dtype_falls_back():
    class M(torch.nn.Module):
        def forward(self, x):
            return (x.double() * 2).float() + 1
    im = imp(M(), (torch.randn(3, 4),))
    names = [n.attrs.get("name") for n in im.graph.nodes if n.op == "torch"]
    assert "aten.mul.Tensor" in names, str(im.graph)
    assert "aten.add.Tensor" not in names


def test_attention_with_a_bool_mask_maps():
    """(It fell back until the graph's attention took bool masks: True attends.)"""
    class M(torch.nn.Module):
        def forward(self, q, m):
            return F.scaled_dot_product_attention(q, q, q, attn_mask=m)
    q = torch.randn(1, 2, 4, 8)
    im = imp(M(), (q, torch.ones(4, 4, dtype=torch.bool)))
    assert "attention" in ops_of(im.graph) and not im.report.fallbacks, im.report


def test_sym_expressions():
    s0, s1 = sympy.Symbol("s0", positive=True, integer=True), sympy.Symbol("s1")
    table = SymbolTable()
    table.name(s0, "batch")
    from torch.utils._sympy.functions import CeilDiv, FloorDiv
    e = table.convert(FloorDiv(2 * s0 + 3, 2) + CeilDiv(s1, 4) * s0)
    v0, v1 = table.vars[s0], table.vars[s1]
    assert v0.name == "batch"
    from tdsl.ops._util import const_value, simplify
    from tdsl.visitor import substitute
    for a, b in ((1, 1), (5, 7), (17, 8)):
        got = simplify(substitute(e, {v0: td.const(a, v0.dtype), v1: td.const(b, v1.dtype)}))
        assert const_value(got) == (2 * a + 3) // 2 + -(-b // 4) * a
    with pytest.raises(ImportFailure, match="cannot express"):
        table.convert(sympy.sin(s0))


def test_symbolic_fallback_arguments_are_bound_from_inputs():
    s0 = sympy.Symbol("s0")
    call = _SymbolicCall(torch.ops.aten.new_ones.default, [2 * s0 + 1], [s0], [0])
    x = torch.randn(5, 3)
    out = call((x,), (x, [_Sym(0), 2]), {})
    assert out.shape == (11, 2)


def test_symbol_not_an_input_dimension_is_refused():
    table = SymbolTable()
    table.var(sympy.Symbol("u0"))
    assert table.unbound()


def test_dtype_numpy_lacks_refuses_the_graph():
    class M(torch.nn.Module):
        def forward(self, x):
            return (x.to(torch.bfloat16) * 2).float()
    with pytest.raises(ImportFailure, match="bfloat16"):
        imp(M(), (torch.randn(3, 4),))
