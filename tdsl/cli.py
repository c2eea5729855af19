"""The ``tdsl`` command line: tuning jobs and tuning records.

::

    tdsl tune ops.py:matmul --target llvm --trials 500 --db tune.db
    tdsl tune mypkg.ops:conv --trials 200 --db tune.db --scheduler-address tcp://10.0.0.5:8786
    tdsl records show --db tune.db [--task KEY] [--limit 20]
    tdsl records best --db tune.db
    tdsl records export --db tune.db records.jsonl
    tdsl records import --db tune.db records.jsonl
    tdsl plot --db tune.db --out curve.png

The tuned function is called with no arguments (or with ``--args`` as JSON) and
returns the tensors to tune (inputs then outputs, or just the outputs), a
``(schedule, tensors)`` pair, an ``autotune.Task``, or is an ``@autotune.template``.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from typing import Any, Sequence


def _load(spec: str) -> Any:
    if ":" not in spec:
        raise SystemExit(f"tdsl tune: expected <file.py|module>:<function>, got {spec!r}")
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py") or os.path.sep in where:
        path = os.path.abspath(where)
        if not os.path.exists(path):
            raise SystemExit(f"tdsl tune: no such file {where!r}")
        mod_name = "_tdsl_tune_" + os.path.splitext(os.path.basename(path))[0]
        spec_ = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec_)
        sys.modules[mod_name] = module
        sys.path.insert(0, os.path.dirname(path))
        spec_.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())      # as `python -m` would
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as e:
            raise SystemExit(f"tdsl tune: cannot import {where!r}: {e}") from None
    try:
        return getattr(module, name)
    except AttributeError:
        raise SystemExit(f"tdsl tune: {where!r} has no attribute {name!r}") from None


def _sizes(text: "str | None") -> dict:
    """``n=64,128;m=32`` → {"n": [64, 128], "m": [32]}."""
    out: dict = {}
    for part in (text or "").split(";"):
        if part.strip():
            k, v = part.split("=", 1)
            out[k.strip()] = [int(x) for x in v.split(",") if x.strip()]
    return out


def _task(obj: Any, args: Sequence[Any], target: str, sizes: dict) -> Any:
    from tdsl import autotune
    from tdsl.schedule import Schedule
    single = {k: v[0] for k, v in sizes.items()}
    if isinstance(obj, autotune.Template):
        return autotune.create_task(obj, args, target, sizes=single)
    value = obj(*args) if callable(obj) else obj
    if isinstance(value, autotune.Task):
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Schedule):
        value = value[1]
    return autotune.create_auto_task(list(value), target, sizes=single)


def cmd_tune(ns: argparse.Namespace) -> int:
    from tdsl import autotune
    from tdsl.autotune.progress import progress_bar, summary
    obj = _load(ns.function)
    args = json.loads(ns.args) if ns.args else []
    sizes = _sizes(ns.sizes)
    if any(len(v) > 1 for v in sizes.values()):
        raise SystemExit("tdsl tune: give one size per symbolic dimension here; use "
                         "autotune.tune_dynamic for several")
    task = _task(obj, args, ns.target, sizes)
    if ns.scheduler_address:
        from tdsl.autotune.distributed import DaskRunner
        option = autotune.measure_option(runner=DaskRunner(
            ns.scheduler_address, timeout=ns.run_timeout, repeat=ns.repeat,
            min_repeat_ms=ns.min_repeat_ms))
    else:
        option = autotune.measure_option(
            builder=autotune.LocalBuilder(n_parallel=ns.build_workers),
            runner=autotune.LocalRunner(timeout=ns.run_timeout, repeat=ns.repeat,
                                        min_repeat_ms=ns.min_repeat_ms))
    db = autotune.open_database(ns.db)
    tuner = autotune.XGBTuner(task, seed=ns.seed, transfer_from=db if ns.transfer else None) \
        if ns.tuner == "xgb" else autotune.RandomTuner(task, seed=ns.seed)
    bar = progress_bar(ns.trials, desc=task.name, use_tqdm=not ns.no_progress_bar)
    try:
        result = tuner.tune(ns.trials, option, callbacks=[bar], db=db, batch_size=ns.batch_size,
                            early_stopping=ns.early_stopping, timeout=ns.timeout)
    finally:
        bar.close()
        option.close()
    print(summary(result, task))
    return 0 if result.best is not None else 1


def _fmt(r: Any) -> str:
    cost = f"{r.cost * 1e3:10.4f} ms {r.gflops:8.1f} GFLOP/s" if r.valid else \
        f"{'':>10}    {r.error_no.name}"
    return f"{r.id:6d} {r.task_key[:10]} {cost}  {json.dumps(r.config)[:90]}"


def cmd_records(ns: argparse.Namespace) -> int:
    from tdsl import autotune
    from tdsl.autotune.database import read_jsonl
    recs = read_jsonl(ns.path) if ns.action == "import" else None   # checked before opening
    db = autotune.Database(ns.db, create=ns.action == "import")      # readers never create
    if ns.action == "show":
        for key, desc, target, n in db.tasks():
            if ns.task and not key.startswith(ns.task):
                continue
            print(f"task {key}  {desc}  [{target}]  {n} records")
            recs = db.records(key)
            for r in recs[-ns.limit:] if ns.limit else recs:
                print("  " + _fmt(r))
    elif ns.action == "best":
        for key, desc, target, n in db.tasks():
            if ns.task and not key.startswith(ns.task):
                continue
            best = db.best(key)
            line = _fmt(best[0]) if best else "no valid record"
            print(f"{desc} [{target}] ({n} records)\n  {line}")
    elif ns.action == "export":
        n = db.export_jsonl(ns.path, ns.task)
        print(f"exported {n} records to {ns.path}")
    elif ns.action == "import":
        n = db.add_new(recs)
        print(f"imported {n} records into {ns.db}"
              + (f" ({len(recs) - n} already there)" if len(recs) > n else ""))
    return 0


def cmd_plot(ns: argparse.Namespace) -> int:
    import matplotlib
    matplotlib.use("Agg")
    from tdsl.autotune.plot import plot_tuning_curve
    ax = plot_tuning_curve(ns.db, ns.task)
    ax.figure.savefig(ns.out, dpi=100, bbox_inches="tight")
    print(f"wrote {ns.out}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdsl", description="tdsl tuning jobs and records")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tune", help="tune a computation or template")
    t.add_argument("function", help="<file.py|module>:<function>")
    t.add_argument("--target", default="llvm")
    t.add_argument("--trials", type=int, default=200)
    t.add_argument("--db", default="tune.db")
    t.add_argument("--args", default=None, help="JSON list of arguments for the function")
    t.add_argument("--sizes", default=None, help="symbolic sizes, e.g. 'n=256;m=64'")
    t.add_argument("--tuner", choices=["xgb", "random"], default="xgb")
    t.add_argument("--batch-size", type=int, default=24)
    t.add_argument("--early-stopping", type=int, default=None)
    t.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    t.add_argument("--run-timeout", type=float, default=10.0, help="seconds per candidate")
    t.add_argument("--repeat", type=int, default=3, help="timed repeats per candidate")
    t.add_argument("--min-repeat-ms", type=float, default=25.0,
                   help="each repeat runs the kernel at least this long")
    t.add_argument("--build-workers", type=int, default=None)
    t.add_argument("--scheduler-address", default=None,
                   help="Dask scheduler (tcp://host:port) to measure on its workers")
    t.add_argument("--no-transfer", dest="transfer", action="store_false")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-progress-bar", action="store_true")
    t.set_defaults(run=cmd_tune)
    r = sub.add_parser("records", help="inspect tuning records")
    rsub = r.add_subparsers(dest="action", required=True)
    for action, text in (("show", "list the records of each task"),
                         ("best", "the best record of each task"),
                         ("export", "write the records to a JSON-lines file"),
                         ("import", "add the records of a JSON-lines file")):
        a = rsub.add_parser(action, help=text)
        if action in ("export", "import"):
            a.add_argument("path", help="JSON-lines file")
        else:
            a.add_argument("--limit", type=int, default=20)
        a.add_argument("--db", default="tune.db")
        a.add_argument("--task", default=None, help="task key (prefix)")
        a.set_defaults(run=cmd_records)
    pl = sub.add_parser("plot", help="plot the tuning curve of a database")
    pl.add_argument("--db", default="tune.db")
    pl.add_argument("--task", default=None)
    pl.add_argument("--out", default="tuning_curve.png")
    pl.set_defaults(run=cmd_plot)
    return p


def main(argv: "Sequence[str] | None" = None) -> int:
    from tdsl.errors import TDSLError
    ns = parser().parse_args(argv)
    try:
        return ns.run(ns)
    except TDSLError as e:
        print(f"tdsl: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
