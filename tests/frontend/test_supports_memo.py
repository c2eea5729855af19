"""The FX import asks the graph's ``supports`` once per distinct question (``SupportsMemo``):
repeated layers ask the same (op, input shapes and dtypes, scalar values, attrs) again."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tdsl  # noqa: E402
import tdsl as td  # noqa: E402
from tdsl.frontend.supports_memo import SupportsMemo, supports_key  # noqa: E402
from tdsl.graph import Value, constant  # noqa: E402


def _counting(answer=True):
    calls = []

    def supports(op, inputs, attrs):
        calls.append(op)
        return answer
    return supports, calls


def test_same_question_asked_once_and_each_difference_asked_again():
    supports, calls = _counting()
    memo = SupportsMemo(supports)
    x, y = Value((4, 8), "float32"), Value((4, 8), "float32")
    assert memo("add", [x, y], {"alpha": 1})
    assert memo("add", [Value((4, 8), "float32"), y], {"alpha": 1})   # equal question
    assert len(calls) == 1 and memo.asked == 1
    different = [("mul", [x, y], {"alpha": 1}),                        # op
                 ("add", [Value((4, 9), "float32"), y], {"alpha": 1}),  # shape
                 ("add", [Value((4, 8), "float16"), y], {"alpha": 1}),  # dtype
                 ("add", [x, y], {"alpha": 1.0}),                       # 1.0 is not 1
                 ("add", [x, y], {"alpha": True}),
                 ("add", [x, constant(np.float32(2.0))], {"alpha": 1}),  # scalar value
                 ("add", [x, constant(np.float32(3.0))], {"alpha": 1})]
    for op, ins, attrs in different:
        memo(op, ins, attrs)
    assert memo.asked == 1 + len(different)


def test_symbolic_dims_keyed_by_variable_identity():
    n1, n2 = td.var("n"), td.var("n")                     # same name, other variables
    a, b = Value((n1, 8), "float32"), Value((n2, 8), "float32")
    assert supports_key("exp", [a], {}) != supports_key("exp", [b], {})
    assert supports_key("exp", [a], {}) == supports_key("exp", [Value((n1, 8), "float32")], {})
    assert supports_key("exp", [Value((n1 * 2, 8), "float32")], {}) != \
        supports_key("exp", [Value((n1 * 3, 8), "float32")], {})


def test_unkeyable_attrs_are_asked_every_time_and_answers_are_kept():
    supports, calls = _counting(answer=False)
    memo = SupportsMemo(supports)
    x = Value((3,), "float32")
    marker = object()
    assert not memo("exp", [x], {"fn": marker})
    assert not memo("exp", [x], {"fn": marker})
    assert len(calls) == 2                                 # no key: no memo
    assert not memo("exp", [x], {}) and not memo("exp", [x], {})
    assert len(calls) == 3                                 # a False answer is kept too


class _Repeated(torch.nn.Module):
    def __init__(self, layers: int = 4, width: int = 24):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for lin in self.layers:
            x = torch.nn.functional.gelu(lin(x)) + x
        return x


def test_repeated_layers_import_with_fewer_questions(monkeypatch):
    import tdsl.frontend as fe
    from tdsl.graph.opset import supports as real
    calls = []

    def counting(op, inputs, attrs):
        calls.append(op)
        return real(op, inputs, attrs)
    monkeypatch.setattr(fe, "opset_supports", lambda: counting)
    model = _Repeated().eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    x = torch.randn(5, 24)
    cm = tdsl.compile(model, (x,))
    with torch.no_grad():
        ref = model(x)
    out = cm(x)
    assert float((out - ref).abs().max()) <= 1e-4 * max(1.0, float(ref.abs().max()))
    # four identical layers: each distinct question once (the first layer's), not four times
    ops = [n.op for n in cm.compiled.imported.graph.nodes]
    assert len(ops) == 16 and ops[:4] == ops[4:8]
    assert sorted(calls) == sorted(ops[:4]), (calls, ops)
