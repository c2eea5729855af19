"""The pre-trained cost model (autotune/pretrain.py) on synthetic records: no timing."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import tdsl as td
from tdsl import autotune, ops
from tdsl.autotune import pretrain
from tdsl.autotune.features import FEATURE_LEN
from tdsl.errors import TuningError


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """A private cache folder; no model named by the environment."""
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(pretrain.ENV, raising=False)


def _records(n_tasks=4, per=40, seed=0, sign=1.0):
    """Features and throughputs: throughput grows with feature 3 and falls with feature 7
    (``sign`` -1: the opposite, as on records the pre-training never saw)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 4, (n_tasks * per, FEATURE_LEN)).astype(np.float32)
    y = np.exp(sign * (X[:, 3] - 0.5 * X[:, 7])) * (1 + 0.05 * rng.random(len(X)))
    g = np.repeat([f"task{i}" for i in range(n_tasks)], per).astype(object)
    return X, y, g


def _saved(tmp_path, key=None, name="m.json"):
    X, y, g = _records()
    model = pretrain.train(X, y, g, rounds=15)
    return pretrain.save(model, tmp_path / name, key=key), model


def _task():
    A, B = td.placeholder((32, 24), name="A"), td.placeholder((24, 40), name="B")
    return autotune.create_auto_task([ops.matmul(A, B)])


def test_a_saved_model_loads_and_predicts_as_it_did(tmp_path):
    path, model = _saved(tmp_path)
    assert path.stat().st_size < 1_000_000
    pm = pretrain.load(path)
    X, _, _ = _records(seed=5)
    np.testing.assert_allclose(pm.cost_model().predict(X), model.predict(X), rtol=1e-6)
    assert pm.cpu_key == pretrain.cpu_key()
    # held-out records of the same law: ranked well
    Xt, yt, _ = _records(1, 60, seed=9)
    assert autotune.pairwise_accuracy(pm.cost_model().predict(Xt), yt) > 0.8


def test_the_tuner_starts_from_this_cpus_model(tmp_path):
    _, model = _saved(tmp_path)
    assert autotune.XGBTuner(_task()).pretrained is None          # none made yet
    pretrain.save(model, pretrain.default_path())                 # where the script puts it
    tuner = autotune.XGBTuner(_task())
    assert tuner.pretrained is not None and tuner.model.trained
    batch = tuner.next_batch(8)                                    # ranked, not only random
    assert batch and tuner.model.base is not None
    assert autotune.XGBTuner(_task(), pretrained="off").pretrained is None


def test_a_model_of_another_cpu_is_ignored_with_a_note(tmp_path):
    path, _ = _saved(tmp_path, key="othercpu-000000000000-f0")
    with pytest.warns(UserWarning, match="made on another CPU"):
        tuner = autotune.XGBTuner(_task(), pretrained=str(path))
    assert tuner.pretrained is None and not tuner.model.trained


def test_fine_tuning_changes_the_predictions_on_the_jobs_records(tmp_path):
    path, _ = _saved(tmp_path)
    pm = pretrain.load(path)
    model = pm.cost_model()
    Xj, yj, gj = _records(1, 60, seed=3, sign=-1.0)     # the job's law is the opposite
    before = model.predict(Xj)
    assert autotune.pairwise_accuracy(before, yj) < 0.3
    model.fit(Xj, yj, gj)
    after = model.predict(Xj)
    assert not np.allclose(before, after)
    assert autotune.pairwise_accuracy(after, yj) > 0.7
    # the base is left as it was: another tuner starts from the same model
    np.testing.assert_allclose(pm.cost_model().predict(Xj), before, rtol=1e-6)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad booster", "not ours"])
def test_a_corrupted_file_is_a_tuning_error_or_a_warning_never_a_crash(tmp_path, damage):
    path, _ = _saved(tmp_path)
    doc = json.loads(path.read_text())
    if damage == "garbage":
        path.write_bytes(b"\x00\xff not json")
    elif damage == "truncated":
        path.write_text(path.read_text()[:len(path.read_text()) // 2])
    elif damage == "bad booster":
        doc["booster"] = "aGVsbG8gd29ybGQ="            # base64 of something else
        path.write_text(json.dumps(doc))
    else:
        path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(TuningError, match="pre-trained cost model"):
        pretrain.load(path)                                      # named: an error
    with pytest.raises(TuningError, match="pre-trained cost model"):
        autotune.XGBTuner(_task(), pretrained=str(path))
    pretrain.default_path().parent.mkdir(parents=True, exist_ok=True)
    pretrain.default_path().write_bytes(path.read_bytes())
    with pytest.warns(UserWarning, match="untrained model"):     # found: a warning
        tuner = autotune.XGBTuner(_task())
    assert tuner.pretrained is None


def test_the_environment_names_or_turns_off_the_model(tmp_path, monkeypatch):
    path, model = _saved(tmp_path)
    monkeypatch.setenv(pretrain.ENV, str(path))
    assert autotune.XGBTuner(_task()).pretrained is not None
    pretrain.save(model, pretrain.default_path())
    monkeypatch.setenv(pretrain.ENV, "off")
    assert autotune.XGBTuner(_task()).pretrained is None
    with pytest.raises(TuningError, match="pretrained="):
        pretrain.resolve(3)


def test_training_needs_records_of_several_tasks():
    X, y, g = _records(1, 20)
    with pytest.raises(TuningError, match="too few records"):
        pretrain.train(X, y, g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pretrain.dataset([])[0].shape == (0, FEATURE_LEN)


def test_the_file_says_whether_its_trees_are_a_residual_of_the_prior(tmp_path):
    path, model = _saved(tmp_path)
    assert model.uses_prior
    pm = pretrain.load(path)
    assert pm.meta["prior"] is True and pm.cost_model().prior
    X, _, _ = _records(1, 20, seed=5)
    np.testing.assert_allclose(pm.cost_model().predict(X), model.predict(X), rtol=1e-5)
    # a booster trained without the prior is used without it
    X, y, g = _records()
    plain = pretrain.XGBoostCostModel("reg-log", num_rounds=15, prior=False)
    plain.fit(X, y, g)
    p2 = pretrain.load(pretrain.save(plain, tmp_path / "plain.json"))
    assert p2.meta["prior"] is False and not p2.cost_model().prior
    np.testing.assert_allclose(p2.cost_model().predict(X), plain.predict(X), rtol=1e-5)


def test_a_pretrained_tuner_fills_its_first_batch_with_the_models_picks(tmp_path):
    """No random share in the first batch (the model was trained on many operators of this
    CPU): the search is asked for all 8, whatever ``epsilon`` is."""
    path, _ = _saved(tmp_path)
    asked = []
    tuner = autotune.XGBTuner(_task(), pretrained=str(path), epsilon=0.25)
    propose = tuner.search.propose
    tuner.search.propose = lambda pool, model, n, *a, **k: asked.append(n) or \
        propose(pool, model, n, *a, **k)
    tuner.next_batch(8)
    assert asked == [8]


def test_a_tuner_starting_from_a_file_takes_its_prior_setting(tmp_path):
    """XGBTuner fine-tunes the file's trees on the same footing they were trained on: with
    the analytic prior where the file says so, without it where not (a booster trained
    without the prior, read with one, would predict around a shifted margin)."""
    X, y, g = _records()
    plain = pretrain.XGBoostCostModel("reg-log", num_rounds=15, prior=False)
    plain.fit(X, y, g)
    without = pretrain.save(plain, tmp_path / "plain.json")
    with_prior, _ = _saved(tmp_path)
    assert autotune.XGBTuner(_task(), pretrained=str(without)).model.prior is False
    assert autotune.XGBTuner(_task(), pretrained=str(with_prior)).model.prior is True
