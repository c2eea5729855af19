"""Misspelled keywords of the public API are errors naming the keyword and the valid ones,
never silently ignored (``time_evaluator(nubmer=100)`` used to run once)."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune
from tdsl.autotune.measure_jobs import InterpreterModule
from tdsl.keywords import check_keywords


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def _add_one():
    A = td.placeholder((16,), "float32", name="A")
    B = td.compute((16,), lambda i: A[i] + 1.0, name="B")
    return td.create_schedule(B.op), [A, B]


@pytest.fixture(scope="module")
def built():
    s, args = _add_one()
    return td.build(s, args, target="llvm")


def test_time_evaluator_refuses_misspelled_keywords(built):
    with pytest.raises(td.ArgumentError) as e:
        built.time_evaluator(nubmer=100, repaet=50)
    msg = str(e.value)
    assert "time_evaluator" in msg and "'nubmer' (did you mean 'number'?)" in msg
    assert "'repaet' (did you mean 'repeat'?)" in msg
    assert "valid keywords: func_name, dev, number, repeat, min_repeat_ms" in msg
    assert isinstance(e.value, td.TDSLError) and isinstance(e.value, TypeError)
    # the spelled-right call still works and really runs `number` times per repeat
    a = np.random.default_rng(0).random(16, dtype=np.float32) + 0.5
    res = built.time_evaluator(number=3, repeat=2)(a, np.empty_like(a))
    assert len(res.results) == 2


def test_export_library_refuses_misspelled_keywords(built, tmp_path):
    with pytest.raises(td.ArgumentError, match=r"export_library: unknown keyword argument "
                                               r"'optons' \(did you mean 'options'\?\).*"
                                               r"valid keywords: path, cc, options"):
        built.export_library(str(tmp_path / "k.so"), optons=["-O2"])
    assert not (tmp_path / "k.so").exists()
    built.export_library(str(tmp_path / "k.so"))
    loaded = td.load_module(str(tmp_path / "k.so"))
    with pytest.raises(td.ArgumentError, match="'options'"):
        loaded.export_library(str(tmp_path / "copy.so"), options=["-O2"])
    with pytest.raises(td.ArgumentError, match="'nubmer'"):
        loaded.time_evaluator(nubmer=3)


def test_build_lower_and_tuning_entry_points_refuse_misspelled_keywords():
    s, args = _add_one()
    with pytest.raises(td.ArgumentError, match="build: .*'targte' \\(did you mean 'target'"):
        td.build(s, args, targte="llvm")
    with pytest.raises(td.ArgumentError, match="lower: .*'nmae'"):
        td.lower(s, args, nmae="f")
    with pytest.raises(td.ArgumentError, match="auto_schedule: .*'trails' \\(did you mean "
                                                "'trials'"):
        autotune.auto_schedule([args[1]], trails=4)
    with pytest.raises(td.ArgumentError, match="tune_dynamic: .*'erly_stopping'"):
        autotune.tune_dynamic(args, trials=1, erly_stopping=3)
    with pytest.raises(td.ArgumentError, match="LocalRunner: .*'repet'"):
        autotune.LocalRunner(repet=3)
    with pytest.raises(td.ArgumentError, match="LocalBuilder: .*'n_paralel'"):
        autotune.LocalBuilder(n_paralel=2)
    with pytest.raises(td.ArgumentError, match="measure_option: .*'runer'"):
        autotune.measure_option(runer=None)


def test_interpreter_module_time_evaluator_is_checked_too():
    s, args = _add_one()
    mod = InterpreterModule(td.lower(s, args))
    with pytest.raises(td.ArgumentError, match="'min_repeat'"):
        mod.time_evaluator(min_repeat=5)


def test_check_keywords_refuses_functions_with_kwargs():
    with pytest.raises(TypeError, match="takes \\*\\*kwargs"):
        check_keywords(lambda **kw: kw)
