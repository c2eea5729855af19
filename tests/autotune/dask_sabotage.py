"""Dask worker preload for the distributed tests: some candidates (chosen by config in
``$TDSL_TEST_SABOTAGE``, a JSON list of [config, what]) misbehave in the isolated process
that runs them: ``segv`` (killed by SIGSEGV, like a kernel writing through a null
pointer), ``hang`` (never returns; first writes its pid to ``hang.pid`` in
``$TDSL_TEST_SABOTAGE_DIR``), ``kill-worker-once`` (kills the Dask worker the first
time, then runs normally), ``kill-worker`` (kills the Dask worker every time);
``segv-build`` (given the candidate's trace instead of its config): its build process is
killed by SIGSEGV."""
import json
import os
import signal
import time

from tdsl.autotune import measure_jobs

_orig = getattr(measure_jobs, "_orig_run_job", measure_jobs.run_job)
measure_jobs._orig_run_job = _orig
_orig_build = getattr(measure_jobs, "_orig_build_job", measure_jobs.build_job)
measure_jobs._orig_build_job = _orig_build


def _plan(config):
    for cfg, what in json.loads(os.environ.get("TDSL_TEST_SABOTAGE", "[]")):
        if cfg == config:
            return what
    return None


def run_job(payload, key, sizes, target, artifact, trace, config, opts, best_cost, pre_run,
            name):
    what = _plan(config)
    if what == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif what == "hang":
        # the test reads this to tell whether the hung process is still running
        path = os.path.join(os.environ["TDSL_TEST_SABOTAGE_DIR"], "hang.pid")
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
        time.sleep(3600)
    elif what in ("kill-worker", "kill-worker-once"):
        marker = os.path.join(os.environ["TDSL_TEST_SABOTAGE_DIR"],
                              json.dumps(config, sort_keys=True).replace("/", "_"))
        if what == "kill-worker" or not os.path.exists(marker):
            open(marker, "a").close()
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)
    return _orig(payload, key, sizes, target, artifact, trace, config, opts, best_cost, pre_run,
                 name)


def build_job(payload, key, trace, target, path, name):
    if _plan(trace) == "segv-build":
        os.kill(os.getpid(), signal.SIGSEGV)
    return _orig_build(payload, key, trace, target, path, name)


measure_jobs.run_job = run_job
measure_jobs.build_job = build_job
