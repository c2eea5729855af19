"""Shared pieces of the autotune tests: a small template, fast measure options, hooks."""
from __future__ import annotations

import os
import time

import numpy as np

import tdsl as td
import tdsl.interpreter
from tdsl import autotune


def check_schedule(sch, task, ins, expect, interpreter: bool, err_msg: str = "",
                   target: str = "llvm") -> None:
    """Build ``sch`` for ``task`` with LLVM (and run its lowered IR in the interpreter when
    ``interpreter``) on ``ins``; each result must match ``expect``."""
    out = np.zeros(expect.shape, str(task.args[-1].dtype))
    td.build(sch, task.args, target=target)(*ins, out)
    np.testing.assert_allclose(out, expect, rtol=2e-4, atol=2e-4, err_msg=err_msg)
    if interpreter:
        out2 = np.zeros_like(out)
        tdsl.interpreter.run(td.lower(sch, task.args), *ins, out2)
        np.testing.assert_allclose(out2, expect, rtol=2e-4, atol=2e-4, err_msg=err_msg)


@autotune.template("small_matmul")
def small_matmul(n, m, k):
    A = td.placeholder((n, k), "float32", name="A")
    B = td.placeholder((k, m), "float32", name="B")
    r = td.reduce_axis((0, k), name="r")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = td.create_schedule(C.op)
    cfg = autotune.get_config()
    i, j = s[C].op.axis
    cfg.define_split("tile_i", i, num_outputs=2)
    cfg.define_split("tile_j", j, num_outputs=2)
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io, jo, r, ii, ji)
    return s, [A, B, C]


def fast_option(**runner_kw) -> autotune.MeasureOption:
    kw = {"timeout": 10.0, "repeat": 2, "min_repeat_ms": 2.0}
    kw.update(runner_kw)
    return autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=1),
                                   runner=autotune.LocalRunner(**kw))


def crash_or_hang(config: dict) -> None:
    """Runs in the isolated runner process before a candidate: misbehaves for some tiles."""
    tj = config.get("tile_j")
    if config.get("tile_i") != [16, 1]:
        return
    if tj == [8, 2]:
        os.abort()                 # like a segfaulting kernel
    if tj == [4, 4]:
        time.sleep(120)            # like a kernel that never returns


def slow_reference(config: dict) -> None:
    """Runs before the reference output is computed: makes it take 3 s."""
    if config.get("__reference__"):
        time.sleep(3.0)


def hang_if_naive(config: dict) -> None:
    """A ``pre_run`` hook: the unscheduled program (the naive default) never returns."""
    if config.get("__default__") == "default":
        time.sleep(120)
