"""A tuning job run as a separate process by the database tests.

usage: python -m tests.autotune.tune_job DB N_TRIAL BATCH SEED [M]
Prints the number of trials it measured.
"""
import sys

from tdsl import autotune
from tests.autotune.helpers import fast_option, small_matmul

if __name__ == "__main__":
    db, n, batch, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    m = int(sys.argv[5]) if len(sys.argv) > 5 else 32
    task = autotune.create_task(small_matmul, (32, m, 32))
    res = autotune.RandomTuner(task, seed=seed).tune(n, fast_option(), db=db, batch_size=batch)
    print("MEASURED", res.trials, "RESUMED", res.resumed, flush=True)
