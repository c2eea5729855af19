"""benchmarks/time_to_quality.py on synthetic jobs (no timing)."""
from __future__ import annotations

import math
import os
import sys
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import time_to_quality as ttq  # noqa: E402


def _rec(h):
    return SimpleNamespace(prog_hash=h)


SECS = [{"a0": 4.0, "a1": 2.0, "a2": 1.0}, {"b0": 10.0, "b1": 5.0}]


def test_curve_uses_the_retimed_seconds_and_is_inf_until_every_task_has_a_program():
    best_at = [(1.0, 2, 0, _rec("a0")), (2.0, 4, 1, _rec("b0")), (3.0, 12, 0, _rec("a1")),
               (5.0, 20, 1, _rec("b1"))]
    pts = ttq.curve(best_at, [2, 1], SECS, final=(6.0, 20, [_rec("a2"), _rec("b1")]))
    assert pts[0][2] == math.inf
    assert [p[2] for p in pts[1:]] == [18.0, 14.0, 9.0, 7.0]
    assert ttq.reach(pts, 14.0) == (3.0, 12)
    assert ttq.reach(pts, 6.9) is None
    assert ttq.final(pts) == 7.0


def test_report_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    curves = {"gradient": [(1.0, 8, 20.0), (2.0, 16, 9.0)],
              "sequential": [(1.0, 8, math.inf), (2.0, 16, 12.0), (3.0, 24, 10.0)]}
    lines = ttq.report(curves)
    assert "16 trials, 2 s" in lines[1]           # gradient gets below sequential's 10.0
    assert "not reached" in lines[2]              # sequential never within 5% of 9.0
    out = tmp_path / "c.png"
    ttq.plot(curves, str(out), "t")
    assert out.stat().st_size > 1000
