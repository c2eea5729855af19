"""Where tuning time goes (``TuneResult.phases``), and the build-time mechanisms: candidates
making too much code are illegal before any build, and the builder starts the largest
builds first."""
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune.codesize import emitted_nodes
from tdsl.autotune.measure import LocalBuilder, MeasureErrorNo, MeasureInput
from tdsl.autotune.phases import PhaseTimes
from tdsl.autotune.workers import JobOutcome, JobResult
from tests.autotune.helpers import fast_option, small_matmul


class _Clock:
    """A clock that moves only when told (whole seconds: the sums are exact)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def advance(self, s):
        self.now += s


def test_phase_times_are_exclusive_and_add_up():
    clock = _Clock()
    ph = PhaseTimes(clock)
    t0 = clock()
    with ph("search"):
        clock.advance(2)
        with ph("lower"):
            clock.advance(3)
            with ph("features"):
                clock.advance(1)
            clock.advance(4)
        clock.advance(2)
    with pytest.raises(RuntimeError):           # a phase left by an exception still counts
        with ph("lower"):
            clock.advance(5)
            raise RuntimeError
    clock.advance(7)                            # outside every phase: counted nowhere
    ph.add("build", 6)
    assert ph.seconds == {"search": 4, "lower": 12, "features": 1, "build": 6}, \
        "the nested phases were counted twice, or a paused phase kept counting"
    assert sum(ph.seconds.values()) - 6 == clock() - t0 - 7


def test_a_tuning_run_reports_its_phases(tmp_path):
    task = autotune.create_task(small_matmul, (32, 32, 32))
    opt = fast_option()
    try:
        res = autotune.XGBTuner(task).tune(12, opt, db=str(tmp_path / "t.db"), batch_size=6)
    finally:
        opt.close()
    ph = res.phases
    for name in ("lower", "build", "run", "train", "remeasure"):
        assert ph.get(name, 0) > 0, (name, ph)
    assert sum(ph.values()) <= res.seconds + 1e-6
    text = res.breakdown()
    assert "build" in text and "the tuner's own work" in text
    # a second run of the same tuner reports its own time only
    opt = fast_option()
    try:
        again = autotune.XGBTuner(task).tune(12, opt, db=str(tmp_path / "t.db"))
    finally:
        opt.close()
    assert "build" not in again.phases     # nothing new to measure
    assert sum(again.phases.values()) <= again.seconds + 1e-6


def test_emitted_nodes_counts_unrolled_copies():
    A = td.placeholder((64, 16), "float32", name="A")
    B = td.compute((64, 16), lambda i, j: A[i, j] * 2.0, name="B")
    s = td.create_schedule(B.op)
    plain = emitted_nodes(td.lower(s, [A, B]))
    s = td.create_schedule(B.op)
    s[B].unroll(B.op.axis[1])
    unrolled = emitted_nodes(td.lower(s, [A, B]))
    # the inner loop's body is emitted 16 times instead of once
    assert (unrolled - plain) % 15 == 0 and unrolled > 8 * plain, (plain, unrolled)


def _conv_task():
    X = td.placeholder((1, 16, 14, 14), "float32", name="X")
    W = td.placeholder((16, 16, 3, 3), "float32", name="W")
    from tdsl import ops
    return autotune.create_auto_task([X, W, ops.conv2d(X, W, padding=1)])


def test_a_candidate_making_too_much_code_is_illegal_before_any_build():
    task = _conv_task()
    names = task.space.names
    unroll = [n for n in names if n.endswith(".unroll")][0]
    point = list(task.space.default())
    point[names.index(unroll)] = 2
    big = task.candidate(tuple(point))
    assert big.valid, big.error
    size = emitted_nodes(big.func)
    task.max_emitted_nodes = size - 1
    c = task.candidate(tuple(point))
    assert not c.valid and c.error.startswith("CodeSizeError"), c.error
    assert str(size) in c.error
    task.max_emitted_nodes = size
    assert task.candidate(tuple(point)).valid


def test_the_default_limit_refuses_what_would_time_out_the_builder():
    """The unrolled conv2d tiles that took over 30 s to build in the suite are refused."""
    from tdsl import ops
    X = td.placeholder((1, 64, 56, 56), "float32", name="X")
    W = td.placeholder((64, 64, 3, 3), "float32", name="W")
    # these tiles' accumulator (112 KiB) is over the L1 bound of the sketch
    # (AccumulatorFits): lift that bound so the point reaches the code-size check
    task = autotune.create_auto_task([X, W, ops.conv2d(X, W, padding=1)], l1d_bytes=1 << 30)
    cfg = {"S1": [1, 7, 2, 4], "S2": [1, 1, 7, 8], "S3": [1, 1, 2, 32], "R0": [8, 8],
           "R1": [1, 3], "R2": [1, 3], "unroll": 2, "auto_unroll": 512}
    point = list(task.space.default())
    for i, (name, knob) in enumerate(task.space.knobs.items()):
        short = name.split(".", 1)[1]
        if short in cfg:
            point[i] = [e.value for e in knob.entities].index(cfg[short])
    c = task.candidate(tuple(point))
    assert not c.valid and c.error.startswith("CodeSizeError"), c.error


class _RecordingPool:
    def __init__(self):
        self.order = []

    def map(self, fn, jobs, timeout, on_result=None):
        self.order = [j[2] for j in jobs]          # the traces, in the order started
        return [JobResult(JobOutcome.OK, (f"/lib/{j[2]}.so", None, "", [])) for j in jobs]

    def close(self):
        pass


@pytest.mark.parametrize("longest_first", [True, False])
def test_the_builder_starts_the_largest_candidates_first(longest_first):
    task = autotune.create_task(small_matmul, (16, 16, 16))
    sizes = [5, 300, 20, 7000, 1]
    inputs = [MeasureInput(task, {}, f"t{i}", f"h{i}", size) for i, size in enumerate(sizes)]
    b = LocalBuilder(longest_first=longest_first)
    pool = b._pool = _RecordingPool()
    out = b.build(inputs)
    want = ["t3", "t1", "t2", "t0", "t4"] if longest_first else [f"t{i}" for i in range(5)]
    assert pool.order == want
    # results come back in the order of the inputs
    assert [r.artifact for r in out] == [f"/lib/t{i}.so" for i in range(5)]
    assert all(r.error_no is MeasureErrorNo.NO_ERROR for r in out)
