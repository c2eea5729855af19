"""The ``tdsl`` command line: tuning jobs and tuning records.

::

    tdsl tune ops.py:matmul --target llvm --trials 500 --db tune.db
    tdsl tune mypkg.ops:conv --trials 200 --db tune.db --scheduler-address tcp://10.0.0.5:8786
    tdsl tune my_ops.py --all --trials 400 --timeout 1800 --db model.db
    tdsl tune-model my_model.py:factory --trials 400 --db model.db
    tdsl records show tune.db [--task KEY] [--limit 20] [--json]
    tdsl records best tune.db [--json]
    tdsl records export tune.db records.jsonl      (no file: JSON lines to stdout)
    tdsl records import tune.db records.jsonl
    tdsl plot --db tune.db --out curve.png
    tdsl cache info [--json]
    tdsl cache clear
    tdsl --version                                  (also: python -m tdsl ...)

The database may be given by position (as above) or with ``--db`` (default ``tune.db``).

The tuned function is called with no arguments (or with ``--args`` as JSON) and
returns the tensors to tune (inputs then outputs, or just the outputs), a
``(schedule, tensors)`` pair, an ``autotune.Task``, or is an ``@autotune.template``.

``--all`` tunes every operator the file (or module) declares, as one job under one
budget (``autotune.tune_tasks``: trials go where they lower the job's weighted
latency most): each ``@autotune.template`` and each public function defined there
(not imported) that takes no required argument and returns tensors as above.
Duplicates (the same computation and sizes) are one task.  ``--weights
name=3,other=1`` says how often each kernel runs (default 1).

``tune-model`` calls the factory with no arguments; it returns ``(model, example_inputs)``
(a PyTorch module or function of tensors, and a tensor or tuple of them), and every kernel
of the compiled model is tuned as one job (``autotune.tune_model``); then
``tdsl.compile(model, inputs, options={"db": "model.db"})`` uses the records.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from typing import Any, Sequence

DEFAULT_DB = "tune.db"


def _module(where: str) -> Any:
    """The module of a ``tdsl tune`` spec: a file (imported under its own name) or a
    module name (importable from the current folder)."""
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
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())      # as `python -m` would
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as e:
        raise SystemExit(f"tdsl tune: cannot import {where!r}: {e}") from None


def _load(spec: str) -> Any:
    if ":" not in spec:
        raise SystemExit(f"tdsl tune: expected <file.py|module>:<function>, got {spec!r} "
                         f"(or <file.py|module> --all to tune every operator it declares)")
    where, name = spec.rsplit(":", 1)
    module = _module(where)
    try:
        return getattr(module, name)
    except AttributeError:
        raise SystemExit(f"tdsl tune: {where!r} has no attribute {name!r}") from None


def _declared(spec: str) -> list[tuple[str, Any]]:
    """(name, object) of every operator a file or module declares: its templates and its
    public functions (defined there, not imported) with no required parameter, in the
    order they are defined."""
    import inspect
    from tdsl import autotune
    where = spec.rsplit(":", 1)[0] if ":" in spec and not os.path.exists(spec) else spec
    module = _module(where)
    out = []
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        if isinstance(obj, autotune.Template):
            out.append((name, obj))
        elif inspect.isfunction(obj) and obj.__module__ == module.__name__:
            params = inspect.signature(obj).parameters.values()
            if all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                   for p in params):
                out.append((name, obj))
    if not out:
        raise SystemExit(f"tdsl tune --all: {where!r} declares no operator (a template, or a "
                         f"function with no required argument returning tensors)")
    return out


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


def _option(ns: argparse.Namespace) -> Any:
    from tdsl import autotune
    if ns.scheduler_address:
        from tdsl.autotune.distributed import DaskRunner
        return autotune.measure_option(runner=DaskRunner(
            ns.scheduler_address, timeout=ns.run_timeout, repeat=ns.repeat,
            min_repeat_ms=ns.min_repeat_ms))
    return autotune.measure_option(
        builder=autotune.LocalBuilder(n_parallel=ns.build_workers),
        runner=autotune.LocalRunner(timeout=ns.run_timeout, repeat=ns.repeat,
                                    min_repeat_ms=ns.min_repeat_ms))


def _weights(text: "str | None") -> dict:
    """``matmul=3,softmax=1`` -> {"matmul": 3.0, "softmax": 1.0}."""
    out = {}
    for part in (text or "").split(","):
        if part.strip():
            if "=" not in part:
                raise SystemExit(f"tdsl tune: --weights expects name=number,..., got {part!r}")
            k, v = part.split("=", 1)
            try:
                out[k.strip()] = float(v)
            except ValueError:
                raise SystemExit(f"tdsl tune: --weights: {v!r} is not a number") from None
    return out


def cmd_tune(ns: argparse.Namespace) -> int:
    from tdsl import autotune
    from tdsl.autotune.progress import progress_bar, summary
    args = json.loads(ns.args) if ns.args else []
    sizes = _sizes(ns.sizes)
    if any(len(v) > 1 for v in sizes.values()):
        raise SystemExit("tdsl tune: give one size per symbolic dimension here; use "
                         "autotune.tune_dynamic for several")
    if ns.all:
        return _tune_all(ns, args, sizes)
    if ns.weights:
        raise SystemExit("tdsl tune: --weights goes with --all")
    obj = _load(ns.function)
    task = _task(obj, args, ns.target, sizes)
    option = _option(ns)
    db = autotune.open_database(ns.db)
    tuner = autotune.XGBTuner(task, seed=ns.seed, transfer_from=db if ns.transfer else None) \
        if ns.tuner == "xgb" else autotune.RandomTuner(task, seed=ns.seed)
    bar = progress_bar(ns.trials, desc=task.name, use_tqdm=not ns.no_progress_bar)
    try:
        result = tuner.tune(ns.trials, option, callbacks=[bar], db=db,
                            batch_size=ns.batch_size or 24,
                            early_stopping=ns.early_stopping, timeout=ns.timeout)
    finally:
        bar.close()
        option.close()
    print(summary(result, task))
    return 0 if result.best is not None else 1


def _tune_all(ns: argparse.Namespace, args: list, sizes: dict) -> int:
    """``tdsl tune FILE --all``: every declared operator, one job (``tune_tasks``)."""
    from tdsl import autotune
    from tdsl.errors import TDSLError
    declared = _declared(ns.function)
    weights = _weights(ns.weights)
    unknown = sorted(set(weights) - {name for name, _ in declared})
    if unknown:
        raise SystemExit(f"tdsl tune --all: --weights names {unknown} that the file does not "
                         f"declare (it declares {[n for n, _ in declared]})")
    tasks: list = []
    task_weights: list = []
    by_key: dict = {}
    for name, obj in declared:
        try:
            task = _task(obj, args if isinstance(obj, autotune.Template) else [], ns.target,
                         sizes)
        except (TDSLError, TypeError, ValueError, AttributeError) as e:
            print(f"skipping {name}: not a workload ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        w = weights.get(name, 1.0)
        if task.key in by_key:             # the same computation and sizes: one task
            task_weights[by_key[task.key]] += w
            continue
        by_key[task.key] = len(tasks)
        tasks.append(task)
        task_weights.append(w)
    if not tasks:
        raise SystemExit(f"tdsl tune --all: no operator of {ns.function!r} could be tuned")
    print(f"tuning {len(tasks)} tasks: {', '.join(t.name for t in tasks)}", file=sys.stderr)
    job = autotune.tune_tasks(tasks, trials=ns.trials, time_budget=ns.timeout, db=ns.db,
                              weights=task_weights, measure_option=_option(ns),
                              batch_size=ns.batch_size or 8, tuner=ns.tuner, seed=ns.seed,
                              early_stopping=ns.early_stopping,
                              progress=not ns.no_progress_bar, transfer=ns.transfer)
    print(job.summary())
    return 0 if all(b is not None for b in job.best) else 1


def cmd_tune_model(ns: argparse.Namespace) -> int:
    """``tdsl tune-model FILE:factory``: every kernel of the factory's model, one job."""
    from tdsl import autotune
    made = _load(ns.factory)()
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        raise SystemExit(f"tdsl tune-model: {ns.factory} must return (model, example_inputs), "
                         f"got {type(made).__name__}")
    model, inputs = made
    job = autotune.tune_model(model, inputs, trials=ns.trials, time_budget=ns.timeout,
                              db=ns.db, target=ns.target, measure_option=_option(ns),
                              batch_size=ns.batch_size, tuner=ns.tuner, seed=ns.seed,
                              progress=not ns.no_progress_bar)
    print(job.summary())
    return 0 if all(b is not None for b in job.best) else 1


def _fmt(r: Any) -> str:
    cost = f"{r.cost * 1e3:10.4f} ms {r.gflops:8.1f} GFLOP/s" if r.valid else \
        f"{'':>10}    {r.error_no.name}"
    threads = f" t{r.threads}" if r.threads else ""
    return f"{r.id:6d} {r.task_key[:10]}{threads} {cost}  {json.dumps(r.config)[:90]}"


def _record_json(r: Any) -> dict:
    """A record as the listings' ``--json`` shows it: nothing shortened."""
    return {"id": r.id, "task_key": r.task_key, "valid": r.valid,
            "cost_s": r.cost if r.valid else None, "gflops": r.gflops if r.valid else None,
            "error": None if r.valid else r.error_no.name, "config": r.config,
            "threads": r.threads, "notes": list(r.notes)}


def _db_and_file(ns: argparse.Namespace) -> tuple[str, "str | None"]:
    """The database and (export/import) the JSON-lines file, from the positionals and
    ``--db``: ``[DB] [FILE]`` for export/import, ``[DB]`` for show/best."""
    pos = list(ns.paths)
    db = ns.db
    if ns.action in ("export", "import"):
        need_file = ns.action == "import"
        if len(pos) > 2:
            raise SystemExit(f"tdsl records {ns.action}: expected [DB] [FILE], got {pos}")
        if len(pos) == 2 or (len(pos) == 1 and db is None and not need_file):
            given = pos.pop(0)
        else:
            given = None
        path = pos[0] if pos else None
        if need_file and path is None:
            raise SystemExit("tdsl records import: give the JSON-lines file to import")
    else:
        if len(pos) > 1:
            raise SystemExit(f"tdsl records {ns.action}: expected at most one database, got {pos}")
        given, path = (pos[0] if pos else None), None
    if given is not None and db is not None and given != db:
        raise SystemExit(f"tdsl records: two databases given ({given!r} and --db {db!r})")
    return given or db or DEFAULT_DB, path


def cmd_records(ns: argparse.Namespace) -> int:
    from tdsl import autotune
    from tdsl.autotune.database import best_records, read_jsonl
    db_path, path = _db_and_file(ns)
    recs = read_jsonl(path) if ns.action == "import" else None      # checked before opening
    db = autotune.Database(db_path, create=ns.action == "import")    # readers never create
    listing: list = []
    if ns.action == "show":
        for key, desc, target, n in db.tasks():
            if ns.task and not key.startswith(ns.task):
                continue
            recs = db.records(key)
            recs = recs[-ns.limit:] if ns.limit else recs
            if ns.json:
                listing.append({"task_key": key, "description": desc, "target": target,
                                "count": n, "records": [_record_json(r) for r in recs]})
                continue
            print(f"task {key}  {desc}  [{target}]  {n} records")
            for r in recs:
                print("  " + _fmt(r))
    elif ns.action == "best":
        for key, desc, target, n in db.tasks():
            if ns.task and not key.startswith(ns.task):
                continue
            # a record answers for its thread count: the best of each count
            recs = db.records(key)
            best = [b for t in sorted({r.threads for r in recs if r.valid})
                    for b in best_records([r for r in recs if r.threads == t], 1)]
            if ns.json:
                listing.append({"task_key": key, "description": desc, "target": target,
                                "count": n, "best": _record_json(best[0]) if best else None,
                                "best_by_threads": {str(b.threads): _record_json(b)
                                                    for b in best}})
                continue
            lines = "\n  ".join(_fmt(b) for b in best) if best else "no valid record"
            print(f"{desc} [{target}] ({n} records)\n  {lines}")
    elif ns.action == "export":
        if path is None or path == "-":
            n = 0
            for r in db.records(ns.task):
                print(json.dumps(r.to_json()))
                n += 1
            print(f"exported {n} records", file=sys.stderr)
        else:
            n = db.export_jsonl(path, ns.task)
            print(f"exported {n} records to {path}")
    elif ns.action == "import":
        n = db.add_new(recs)
        print(f"imported {n} records into {db_path}"
              + (f" ({len(recs) - n} already there)" if len(recs) > n else ""))
    if ns.json:
        print(json.dumps(listing, indent=1))
    return 0


def cmd_cache(ns: argparse.Namespace) -> int:
    from tdsl import disk_cache
    caches = disk_cache.info()
    if ns.action == "info":
        if ns.json:
            print(json.dumps(caches, indent=1))
            return 0
        cap = caches[0]["max_bytes"]
        print(f"cache root: {disk_cache.root()}  (cap per cache: "
              f"{_mb(cap) if cap else 'none'}; set {disk_cache.ENV_MAX_SIZE})")
        for c in caches:
            where = c["path"] or f"off ({disk_cache.ENV_DIR}=off)"
            print(f"  {c['name']:9s} {c['files']:6d} files {_mb(c['bytes']):>10s}  {where}  "
                  f"-- {c['description']}")
        return 0
    removed = []
    for name in disk_cache.FOLDERS:
        files, size = disk_cache.clear(disk_cache.folder(name))
        removed.append({"name": name, "files": files, "bytes": size})
    if ns.json:
        print(json.dumps(removed, indent=1))
    else:
        for r in removed:
            print(f"cleared {r['name']}: {r['files']} files, {_mb(r['bytes'])}")
    return 0


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def cmd_plot(ns: argparse.Namespace) -> int:
    import matplotlib
    matplotlib.use("Agg")
    from tdsl.autotune.plot import plot_tuning_curve
    ax = plot_tuning_curve(ns.db, ns.task)
    ax.figure.savefig(ns.out, dpi=100, bbox_inches="tight")
    print(f"wrote {ns.out}")
    return 0


def _version() -> str:
    from tdsl import __version__
    return __version__


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` for options that take a value and have a default."""

    def _get_help_string(self, action: argparse.Action) -> "str | None":
        if action.default is None or action.default == [] or action.nargs == 0 \
                or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def parser() -> argparse.ArgumentParser:
    fmt = _HelpWithDefaults
    p = argparse.ArgumentParser(prog="tdsl", description="tdsl tuning jobs, records and caches",
                                formatter_class=fmt)
    p.add_argument("--version", action="version", version=f"tdsl {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tune", help="tune a computation or template", formatter_class=fmt)
    t.add_argument("function", help="<file.py|module>:<function>, or <file.py|module> with "
                   "--all")
    t.add_argument("--all", action="store_true", help="tune every operator the file declares, "
                   "as one job under one budget (--trials in total, --timeout)")
    t.add_argument("--weights", default=None, help="with --all: how often each kernel runs, "
                   "e.g. 'matmul=3,softmax=1' (default 1 each)")
    t.add_argument("--target", default="llvm", help="target to tune for ('llvm', 'cuda', "
                   "'llvm -mcpu=...')")
    t.add_argument("--trials", type=int, default=200, help="candidates to measure")
    t.add_argument("--db", default=DEFAULT_DB, help="SQLite database the records go to "
                   "(a killed job resumes from it)")
    t.add_argument("--args", default=None, help="JSON list of arguments for the function")
    t.add_argument("--sizes", default=None, help="symbolic sizes, e.g. 'n=256;m=64'")
    t.add_argument("--tuner", choices=["xgb", "random"], default="xgb",
                   help="search: XGBoost cost model or random")
    t.add_argument("--batch-size", type=int, default=None, help="candidates measured per "
                   "round (default 24; 8 with --all, where a round tunes one task)")
    t.add_argument("--early-stopping", type=int, default=None,
                   help="stop after this many trials without improvement")
    t.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    t.add_argument("--run-timeout", type=float, default=10.0, help="seconds per candidate")
    t.add_argument("--repeat", type=int, default=3, help="timed repeats per candidate")
    t.add_argument("--min-repeat-ms", type=float, default=25.0,
                   help="each repeat runs the kernel at least this long")
    t.add_argument("--build-workers", type=int, default=None,
                   help="parallel compile processes (default: one per CPU)")
    t.add_argument("--scheduler-address", default=None,
                   help="Dask scheduler (tcp://host:port) to measure on its workers")
    t.add_argument("--no-transfer", dest="transfer", action="store_false",
                   help="do not pre-train the cost model on other tasks' records")
    t.add_argument("--seed", type=int, default=0, help="random seed of the search")
    t.add_argument("--no-progress-bar", action="store_true", help="no progress bar on stderr")
    t.set_defaults(run=cmd_tune)
    m = sub.add_parser("tune-model", help="tune every kernel of a PyTorch model",
                       formatter_class=fmt)
    m.add_argument("factory", help="<file.py|module>:<function> returning (model, "
                   "example_inputs)")
    m.add_argument("--target", default="llvm", help="target to tune for")
    m.add_argument("--trials", type=int, default=None, help="candidates to measure in all "
                   "(default: no limit; give --trials and/or --timeout)")
    m.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    m.add_argument("--db", default=DEFAULT_DB, help="SQLite database the records go to "
                   "(a killed job resumes from it)")
    m.add_argument("--tuner", choices=["xgb", "random"], default="xgb",
                   help="search: XGBoost cost model or random")
    m.add_argument("--batch-size", type=int, default=8, help="candidates measured per round")
    m.add_argument("--run-timeout", type=float, default=10.0, help="seconds per candidate")
    m.add_argument("--repeat", type=int, default=3, help="timed repeats per candidate")
    m.add_argument("--min-repeat-ms", type=float, default=25.0,
                   help="each repeat runs the kernel at least this long")
    m.add_argument("--build-workers", type=int, default=None,
                   help="parallel compile processes (default: one per CPU)")
    m.add_argument("--scheduler-address", default=None,
                   help="Dask scheduler (tcp://host:port) to measure on its workers")
    m.add_argument("--seed", type=int, default=0, help="random seed of the search")
    m.add_argument("--no-progress-bar", action="store_true", help="no progress bar on stderr")
    m.set_defaults(run=cmd_tune_model)
    r = sub.add_parser("records", help="inspect tuning records", formatter_class=fmt)
    rsub = r.add_subparsers(dest="action", required=True)
    for action, text in (("show", "list the records of each task"),
                         ("best", "the best record of each task"),
                         ("export", "write the records as JSON lines (to FILE or stdout)"),
                         ("import", "add the records of a JSON-lines file")):
        a = rsub.add_parser(action, help=text, description=text, formatter_class=fmt)
        if action in ("export", "import"):
            a.add_argument("paths", nargs="*", metavar="[DB] FILE" if action == "import"
                           else "[DB] [FILE]", help="database, then JSON-lines file")
            a.set_defaults(json=False)
        else:
            a.add_argument("paths", nargs="*", metavar="DB", help=f"database (default: "
                           f"--db, else {DEFAULT_DB})")
            a.add_argument("--limit", type=int, default=20, help="records per task (0: all)")
            a.add_argument("--json", action="store_true", help="print JSON, nothing shortened")
        a.add_argument("--db", default=None, help=f"database (same as DB; default {DEFAULT_DB})")
        a.add_argument("--task", default=None, help="task key (prefix)")
        a.set_defaults(run=cmd_records)
    pl = sub.add_parser("plot", help="plot the tuning curve of a database", formatter_class=fmt)
    pl.add_argument("--db", default=DEFAULT_DB, help="tuning database")
    pl.add_argument("--task", default=None, help="task key (prefix; default: every task)")
    pl.add_argument("--out", default="tuning_curve.png", help="image file to write")
    pl.set_defaults(run=cmd_plot)
    c = sub.add_parser("cache", help="the build cache and the CUDA emulator cache",
                       formatter_class=fmt)
    csub = c.add_subparsers(dest="action", required=True)
    for action, text in (("info", "where the caches are and how large"),
                         ("clear", "delete every cached file")):
        a = csub.add_parser(action, help=text, description=text, formatter_class=fmt)
        a.add_argument("--json", action="store_true", help="print JSON")
        a.set_defaults(run=cmd_cache)
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
