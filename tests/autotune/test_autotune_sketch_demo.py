"""The demo (``python -m tdsl.demo``) runs end to end on a small matmul and reports the
interleaved re-measurement next to the tuner's own figure."""
from tdsl import demo


def test_demo_runs_and_reports_an_interleaved_remeasurement(tmp_path, capsys):
    rc = demo.main(["--size", "64", "--trials", "8", "--seconds", "30", "--batch", "8",
                    "--db", str(tmp_path / "demo.db")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "re-measured here, interleaved with NumPy" in out
    assert "tdsl tuned" in out and "NumPy" in out
