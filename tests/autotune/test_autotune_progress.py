"""``auto_schedule(progress=True)``: one progress bar over the trial count given once."""
from __future__ import annotations

import io

import pytest

from tdsl import autotune
from tests.autotune.autotune_ops import OPERATORS
from tests.autotune.helpers import fast_option


@pytest.mark.parametrize("use_tqdm", [True, False])
def test_progress_bar_counts_the_trials(tmp_path, monkeypatch, use_tqdm):
    from tdsl.autotune import progress as progress_mod
    stream = io.StringIO()
    made = []
    real = progress_mod.progress_bar

    def recording(total, desc="tuning", stream_=None, use_tqdm_=True):
        bar = real(total, desc, stream, use_tqdm)
        made.append(bar)
        return bar
    monkeypatch.setattr(progress_mod, "progress_bar", recording)
    args, _ = OPERATORS["matmul"](32, 32, 32)
    autotune.auto_schedule(args, target="llvm", trials=4, batch_size=4, progress=True,
                           db=str(tmp_path / "t.db"), measure_option=fast_option())
    assert len(made) == 1 and made[0].total == 4 and made[0].done == 4
    text = stream.getvalue()
    assert ("4/4" in text) and "GFLOP/s" in text


def test_no_progress_by_default(tmp_path, capsys):
    args, _ = OPERATORS["matmul"](32, 32, 32)
    autotune.auto_schedule(args, target="llvm", trials=2, batch_size=2,
                           db=str(tmp_path / "t.db"), measure_option=fast_option())
    err = capsys.readouterr().err
    assert "trial" not in err and "loop not vectorized" not in err
