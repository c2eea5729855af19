"""A tuning job run as a separate process by the lease tests.

usage: python -m tests.autotune.lease_job DB N_TRIAL SEED LOG
Appends ``pid start end`` to LOG for every stretch in which its runner timed candidates.
"""
import os
import sys
import time

from tdsl import autotune
from tests.autotune.helpers import small_matmul


class LoggingRunner(autotune.LocalRunner):
    """A LocalRunner that logs when it times (in the tuner process, around each batch)."""

    def __init__(self, log, **kw):
        super().__init__(**kw)
        self.log = log

    def run(self, *args, **kw):
        start = time.time()
        try:
            return super().run(*args, **kw)
        finally:
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()} {start} {time.time()}\n")


if __name__ == "__main__":
    db, n, seed, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    task = autotune.create_task(small_matmul, (32, 32, 32))
    opt = autotune.measure_option(builder=autotune.LocalBuilder(n_parallel=1),
                                  runner=LoggingRunner(log, timeout=10.0, repeat=2,
                                                       min_repeat_ms=2.0))
    res = autotune.RandomTuner(task, seed=seed).tune(n, opt, db=db, batch_size=3,
                                                     remeasure_top=2, remeasure_rounds=1)
    print("MEASURED", res.trials, flush=True)
