"""benchmarks/attention.py and its timer: ``--cpu-time`` reads the calling thread's CPU
time through ``timing.interleaved``'s ``clock`` (a one-thread measurement that a shared
machine's other jobs do not inflate), refuses more than one thread, and the script's rows
come out (its fused and unfused kernels checked against PyTorch on the way)."""
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the benchmark times PyTorch's SDPA")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _module(name):
    saved = list(sys.path)
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path[:] = saved
    return mod


def test_interleaved_reads_the_clock_it_is_given():
    """A clock that advances 2.5 per call of ``a`` and 1 per call of ``b``: the samples are
    those per-call amounts, whatever wall time passed."""
    timing = _module("timing")
    now = [0.0]

    def tick(dt):
        def fn():
            now[0] += dt
        return fn
    res = timing.interleaved({"a": tick(2.5), "b": tick(1.0)}, rounds=3, min_sample_s=0,
                             settle_s=0, numbers={"a": 4, "b": 2}, clock=lambda: now[0])
    assert res["a"]["samples_s"] == [2.5] * 3 and res["b"]["samples_s"] == [1.0] * 3
    assert res["a"]["median_s"] == 2.5 and res["b"]["calls_per_sample"] == 2


def test_cpu_time_needs_one_thread(monkeypatch, capsys):
    bench = _module("attention")
    monkeypatch.setattr(sys, "argv", ["attention.py", "--cpu-time", "--threads", "1", "2"])
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert e.value.code == 2
    assert "--cpu-time measures one thread" in capsys.readouterr().err


def test_cpu_time_rows(monkeypatch, capsys):
    """A causal row at a length that doesn't divide the key block, with the unfused
    version (the script asserts both against PyTorch before timing them)."""
    bench = _module("attention")
    monkeypatch.setattr(sys, "argv", [
        "attention.py", "--cpu-time", "--threads", "1", "--seqs", "40", "--causal", "yes",
        "--no-decode", "--rounds", "1", "--min-sample-s", "0", "--unfused-from", "40"])
    bench.main()
    out = capsys.readouterr().out
    assert "thread CPU time" in out
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:4] == ["1", "40", "40", "True"]]
    assert len(rows) == 1 and all(float(x) > 0 for x in rows[0][4:7]), out
