"""A cost model that arrives trained: pre-trained on records of many operators, per CPU.

::

    python -m tdsl.autotune.pretrain                  # measure the built-in workloads, train
    python -m tdsl.autotune.pretrain --db a.db b.db   # train from stored tuning records too
    python -m tdsl.autotune.pretrain --info           # where the model is looked up

An ``XGBTuner`` starts with an untrained model: its first batches are random.  A model
trained on the records of many operators and shapes *on this CPU* ranks candidates of an
operator it has never seen from the first batch (trees over the same per-store features),
and ``XGBoostCostModel.fit`` fine-tunes it on the job's own records as they come (more trees
on top of its scores).  The script measures random candidates (and the untuned programs)
of ``pretrain_workloads.WORKLOADS`` with ``RandomTuner`` into a database, adds the records
of any ``--db``, trains an ``XGBoostCostModel`` (``DEFAULT_OBJECTIVE``) on all of them
(labels: throughput relative to the best of its task) and writes it to the user's cache folder.
A workload's records stored with features of an older ``FEATURE_VERSION`` get this version's
features from their programs, lowered again (``dataset``; nothing is timed again).

The file (JSON: a header and the booster in base64 UBJSON, ~0.1-0.6 MB) is keyed by the
CPU: its name and LLVM feature string and ``features.FEATURE_VERSION`` (``cpu_key``); a
model of another CPU or of other features ranks on the wrong costs and is ignored with a
warning.  ``find`` looks in ``$TDSL_PRETRAINED`` (a file; ``off`` turns pre-trained models
off), then ``<cache root>/cost-models/<cpu key>.json`` (``disk_cache.root``: $TDSL_CACHE_DIR,
$XDG_CACHE_HOME/tdsl or ~/.cache/tdsl), then a file of that name shipped in this package's
``pretrained/`` folder (none is shipped today: a model is only good for the CPU it was
measured on).  A file that cannot be read is a ``TuningError`` when it was named explicitly
and is ignored with a warning when it was found by looking.
"""
from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from tdsl.errors import TuningError

from .cost_model import DEFAULT_OBJECTIVE, XGBoostCostModel
from .features import FEATURE_LEN, FEATURE_VERSION

FORMAT = "tdsl-pretrained-cost-model"
FORMAT_VERSION = 1
ENV = "TDSL_PRETRAINED"
#: trees of the pre-trained model (about 4 KB each)
ROUNDS = 100


def cpu_info() -> tuple[str, str]:
    """(CPU name, sorted LLVM feature flags) of this machine."""
    try:
        from tdsl.backends.llvm.machine import host_info
        _, name, feats = host_info()
    except ImportError:                         # no llvmlite: key by the platform only
        import platform
        return platform.machine() or "unknown", ""
    return name, ",".join(sorted(f for f in feats.split(",") if f))


def cpu_key(info: "tuple[str, str] | None" = None) -> str:
    """The key a pre-trained model is filed under: CPU name, a hash of its features, the
    features' version (``skylake-avx512-3f9a01c2d4e5-f5``)."""
    name, feats = info or cpu_info()
    digest = hashlib.sha1(feats.encode()).hexdigest()[:12]
    return f"{name}-{digest}-f{FEATURE_VERSION}"


@dataclass
class PretrainedModel:
    """A pre-trained booster and where it comes from."""

    booster_raw: bytes
    cpu_key: str
    objective: str = DEFAULT_OBJECTIVE
    meta: dict = field(default_factory=dict)
    path: str = ""

    def booster(self) -> Any:
        """A fresh ``xgboost.Booster`` (each tuner fine-tunes its own copy)."""
        import xgboost as xgb
        b = xgb.Booster()
        b.load_model(bytearray(self.booster_raw))
        return b

    def cost_model(self, **kwargs: Any) -> XGBoostCostModel:
        """An ``XGBoostCostModel`` starting from this booster (with the analytic prior when
        the booster was trained with it: its trees are a residual of that prior)."""
        kwargs.setdefault("prior", bool(self.meta.get("prior", False)))
        return XGBoostCostModel(self.objective, base=self.booster(), **kwargs)


# ---- file ----------------------------------------------------------------------------------
def save(model: XGBoostCostModel, path: "str | Path", meta: "dict | None" = None,
         key: "str | None" = None) -> Path:
    """Write ``model`` (trained) as a pre-trained model file for ``key`` (this CPU's)."""
    booster = model._booster
    if booster is None:
        raise TuningError("pretrain.save: the model is not trained")
    raw = bytes(booster.save_raw("ubj"))
    doc = {"format": FORMAT, "version": FORMAT_VERSION, "cpu_key": key or cpu_key(),
           "cpu": cpu_info()[0], "feature_version": FEATURE_VERSION,
           "feature_len": FEATURE_LEN, "objective": model.objective,
           "prior": bool(model.uses_prior), "meta": meta or {},
           "booster": base64.b64encode(raw).decode("ascii")}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)                       # readers never see half a file
    return path


def _read(path: Path) -> PretrainedModel:
    """Parse a model file; TuningError naming the file and what is wrong with it."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TuningError(f"pre-trained cost model {str(path)!r} cannot be read: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TuningError(f"pre-trained cost model {str(path)!r}: not a {FORMAT} file")
    if doc.get("version") != FORMAT_VERSION:
        raise TuningError(f"pre-trained cost model {str(path)!r}: format version "
                          f"{doc.get('version')!r}, this tdsl reads {FORMAT_VERSION}")
    try:
        raw = base64.b64decode(doc["booster"], validate=True)
        model = PretrainedModel(raw, str(doc["cpu_key"]), str(doc.get("objective", "reg")),
                                dict(doc.get("meta") or {}), str(path))
        model.meta.update(feature_version=doc["feature_version"],
                          feature_len=doc["feature_len"], prior=bool(doc.get("prior", False)))
        model.booster()                         # a booster xgboost can load
    except (KeyError, TypeError, ValueError) as e:
        raise TuningError(f"pre-trained cost model {str(path)!r} is corrupted: "
                          f"{type(e).__name__}: {e}") from None
    except Exception as e:                      # xgboost.core.XGBoostError on a bad booster
        if type(e).__name__ != "XGBoostError":
            raise
        raise TuningError(f"pre-trained cost model {str(path)!r} is corrupted: the booster "
                          f"does not load ({str(e).splitlines()[0]})") from None
    return model


@functools.lru_cache(maxsize=8)
def _read_cached(path: str, mtime_ns: int, size: int) -> PretrainedModel:
    return _read(Path(path))


def _matches(model: PretrainedModel, objective: str) -> "str | None":
    """Why ``model`` cannot serve here (None: it can)."""
    if model.cpu_key != cpu_key():
        return f"it was made on another CPU ({model.cpu_key}; this one is {cpu_key()})"
    if model.meta.get("feature_version") != FEATURE_VERSION or \
            model.meta.get("feature_len") != FEATURE_LEN:
        return "it was made with other candidate features"
    if model.objective != objective:
        return f"its objective is {model.objective!r}, the tuner's {objective!r}"
    return None


def load(path: "str | Path", objective: str = DEFAULT_OBJECTIVE, explicit: bool = True
         ) -> Optional[PretrainedModel]:
    """The model in ``path`` if it serves this CPU and ``objective``, else None (with a
    warning saying why).  An unreadable file: ``TuningError`` when ``explicit``, else a
    warning and None."""
    p = Path(path)
    try:
        st = p.stat()
        model = _read_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)
    except (OSError, TuningError) as e:
        err = e if isinstance(e, TuningError) else TuningError(
            f"pre-trained cost model {str(p)!r} cannot be read: {e}")
        if explicit:
            raise err from None
        warnings.warn(f"{err}; tuning starts from an untrained model", stacklevel=3)
        return None
    why = _matches(model, objective)
    if why is not None:
        warnings.warn(f"pre-trained cost model {str(p)!r} ignored: {why}; tuning starts from "
                      f"an untrained model (python -m tdsl.autotune.pretrain makes one here)",
                      stacklevel=3)
        return None
    return model


def default_path() -> Path:
    """Where ``python -m tdsl.autotune.pretrain`` writes this CPU's model."""
    from tdsl.disk_cache import root
    return root() / "cost-models" / f"{cpu_key()}.json"


def search_paths() -> list[Path]:
    """Where ``find`` looks, in order (see the module docstring)."""
    out = []
    env = os.environ.get(ENV, "").strip()
    if env and env.lower() not in ("off", "0", "none", "false"):
        out.append(Path(env).expanduser())
    out.append(default_path())
    out.append(Path(__file__).parent / "pretrained" / f"{cpu_key()}.json")
    return out


def find(objective: str = DEFAULT_OBJECTIVE) -> Optional[PretrainedModel]:
    """This CPU's pre-trained model, if one is found (``$TDSL_PRETRAINED=off``: None)."""
    if os.environ.get(ENV, "").strip().lower() in ("off", "0", "none", "false"):
        return None
    for p in search_paths():
        if p.is_file():
            return load(p, objective, explicit=p == search_paths()[0] and
                        bool(os.environ.get(ENV, "").strip()))
    return None


def resolve(spec: Any, objective: str = DEFAULT_OBJECTIVE) -> Optional[PretrainedModel]:
    """What a tuner's ``pretrained=`` means: ``"auto"`` (``find``), None/False/``"off"``
    (none), a path (``load``, explicit) or a ``PretrainedModel`` (checked against this
    CPU)."""
    if spec is None or spec is False or (isinstance(spec, str) and spec.lower() == "off"):
        return None
    if isinstance(spec, str) and spec == "auto":
        return find(objective)
    if isinstance(spec, PretrainedModel):
        why = _matches(spec, objective)
        if why is not None:
            warnings.warn(f"pre-trained cost model ignored: {why}", stacklevel=3)
            return None
        return spec
    if isinstance(spec, (str, Path)):
        return load(spec, objective, explicit=True)
    raise TuningError(f"pretrained= must be 'auto', 'off', None, a path or a PretrainedModel, "
                      f"got {type(spec).__name__}")


# ---- training ------------------------------------------------------------------------------
def dataset(records: Iterable[Any], tasks: "Mapping[str, Any] | None" = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, throughputs (0: failed) and task keys of the records that carry this
    version's features (records measured by a tuner do).  A valid record of another
    feature version whose task is in ``tasks`` (task key -> ``Task``) gets this version's
    features from its program, lowered again (no timing); the others are left out."""
    from .features import extract_features
    X, y, g = [], [], []
    for r in records:
        f = r.features
        if f is None or r.feature_version != FEATURE_VERSION or len(f) != FEATURE_LEN:
            task = (tasks or {}).get(r.task_key)
            if task is None or not r.valid:
                continue
            c = task.lower_trace(r.trace)
            if not c.valid:
                continue
            f = extract_features(c.func, task.sizes)
        c = r.cost
        X.append(np.asarray(f, dtype=np.float32))
        y.append(1.0 / c if r.valid and math.isfinite(c) and c > 0 else 0.0)
        g.append(r.task_key)
    if not X:
        return np.zeros((0, FEATURE_LEN), np.float32), np.zeros(0), np.zeros(0, dtype=object)
    return np.stack(X), np.asarray(y), np.asarray(g, dtype=object)


def train(X: np.ndarray, y: np.ndarray, groups: np.ndarray, rounds: int = ROUNDS,
          nthread: int = 1) -> XGBoostCostModel:
    """An ``XGBoostCostModel`` (``DEFAULT_OBJECTIVE``) fitted on records of many tasks."""
    if len(np.unique(groups)) < 2 or int((y > 0).sum()) < 8:
        raise TuningError(f"pretrain: too few records to train on ({int((y > 0).sum())} valid "
                          f"of {len(np.unique(groups))} tasks; want at least 8 of 2)")
    model = XGBoostCostModel(DEFAULT_OBJECTIVE, num_rounds=rounds, nthread=nthread)
    model.fit(X, y, groups)
    return model


def measure(db: Any, names: Sequence[str], trials: int, threads: int = 1,
            seed: int = 0, log: Any = print) -> None:
    """``trials`` records of each named workload into ``db`` (resumes): its untuned programs
    and random candidates, timed with ``threads`` threads."""
    from . import measure_option, LocalBuilder, LocalRunner
    from .auto_schedule import create_auto_task
    from .database import open_database
    from .pretrain_workloads import WORKLOADS
    from .tuner import RandomTuner
    database = open_database(db)
    for name in names:
        task = create_auto_task(WORKLOADS[name](), "llvm", name=name)
        if len(database.records(task.key)) >= trials:
            continue
        t0 = time.perf_counter()
        opt = measure_option(LocalBuilder(), LocalRunner(number=1, repeat=3, min_repeat_ms=5,
                                                         n_threads=threads, timeout=20))
        try:
            RandomTuner(task, seed=seed).tune(trials, opt, db=database, remeasure_top=0)
        finally:
            opt.close()
        log(f"  {name}: {len(database.records(task.key))} records "
            f"({time.perf_counter() - t0:.0f} s)")


def main(argv: "Sequence[str] | None" = None) -> int:
    from .pretrain_workloads import WORKLOADS
    ap = argparse.ArgumentParser(prog="python -m tdsl.autotune.pretrain",
                                 description="Pre-train the tuner's cost model on this CPU.")
    ap.add_argument("--db", nargs="*", default=[],
                    help="tuning databases whose records to train on as well")
    ap.add_argument("--records", default=None,
                    help="database the measured records go to (default: next to the model)")
    ap.add_argument("--workloads", default="all",
                    help=f"comma-separated, 'all' or 'none' (known: {', '.join(WORKLOADS)})")
    ap.add_argument("--exclude", default="", help="workloads left out (held-out evaluation)")
    ap.add_argument("--trials", type=int, default=48, help="records per workload")
    ap.add_argument("--threads", type=int, default=1, help="threads of the timed kernels")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="trees of the model")
    ap.add_argument("--out", default=None, help=f"model file (default {default_path()})")
    ap.add_argument("--info", action="store_true", help="print where models are looked up")
    a = ap.parse_args(argv)
    if a.info:
        print(f"cpu key: {cpu_key()}")
        for p in search_paths():
            print(f"  {p} {'(found)' if p.is_file() else ''}")
        return 0
    names = list(WORKLOADS) if a.workloads == "all" else \
        [] if a.workloads == "none" else [n for n in a.workloads.split(",") if n]
    skip = {n for n in a.exclude.split(",") if n}
    unknown = [n for n in list(names) + list(skip) if n not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workloads {unknown}; known: {list(WORKLOADS)}")
    names = [n for n in names if n not in skip]
    out = Path(a.out) if a.out else default_path()
    records_db = a.records or str(out.with_suffix(".records.db"))
    from .database import open_database
    t0 = time.perf_counter()
    if names:
        print(f"measuring {len(names)} workloads x {a.trials} records into {records_db}",
              flush=True)
        measure(records_db, names, a.trials, a.threads,
                log=lambda s: print(s, flush=True))
    from .auto_schedule import create_auto_task
    tasks = {t.key: t for t in (create_auto_task(WORKLOADS[n](), "llvm") for n in names)}
    recs = [r for r in open_database(records_db).records() if r.task_key in tasks] \
        if names else []
    for db in a.db:
        recs += list(open_database(db, create=False).records())
    X, y, g = dataset(recs, tasks)      # the workloads' records of older features: recomputed
    model = train(X, y, g, a.rounds)
    path = save(model, out, meta={"records": int(len(y)), "tasks": int(len(np.unique(g))),
                                  "workloads": names, "databases": list(a.db),
                                  "made": time.strftime("%Y-%m-%d %H:%M:%S"),
                                  "threads": a.threads})
    print(f"trained on {len(y)} records of {len(np.unique(g))} tasks in "
          f"{time.perf_counter() - t0:.0f} s: {path} ({path.stat().st_size / 1e3:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
