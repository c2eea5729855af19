"""Every tutorial notebook runs top to bottom without an error (nbclient), and is stored
WITH its outputs (executed by ``docs/execute_lessons.py``), so that a reader browsing the
repository or the documentation site sees the results and plots.

The notebooks run in a kernel of *this* Python (a kernelspec written to a temporary
directory), with the tutorials folder as the working directory.  Each notebook's run time is
printed (``pytest -s``); each takes about a minute.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the tutorial tests need nbformat "
                                                  "(pip install -e '.[notebooks]')")
nbclient = pytest.importorskip("nbclient", reason="the tutorial tests need nbclient "
                                                  "(pip install -e '.[notebooks]')")
pytest.importorskip("ipykernel", reason="the tutorial tests need ipykernel "
                                        "(pip install -e '.[notebooks]')")

TUTORIALS = Path(__file__).resolve().parents[2] / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))
KERNEL = "tdsl-tests-python"
#: a guard against a hung cell only (a lesson takes about a minute on a quiet laptop)
CELL_TIMEOUT = 600


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kernelspec that starts this interpreter's ipykernel, found through JUPYTER_PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-X", "faulthandler", "-m", "ipykernel_launcher", "-f",
                 "{connection_file}"],
        # a kernel that dies prints its native stack to stderr (captured with the failure)
        "display_name": "tdsl tests", "language": "python"}))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(root) + (os.pathsep + old if old else "")
    yield KERNEL
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


def test_all_ten_lessons_exist() -> None:
    names = [p.stem for p in NOTEBOOKS]
    assert [n[:2] for n in names] == [f"{i:02d}" for i in range(1, 11)], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_outputs(path: Path) -> None:
    """Executed top to bottom in one run, no errors, and no tqdm redraw fragments."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), \
        f"{path.name}: not executed top to bottom in one run (execution counts {counts}); " \
        f"run python docs/execute_lessons.py {path.name[:2]}"
    assert sum(bool(c.outputs) for c in code) >= len(code) // 2, f"{path.name}: few outputs"
    for i, cell in enumerate(code):
        for out in cell.outputs:
            assert out.get("output_type") != "error", f"{path.name}: cell {i} stored an error"
            if out.get("output_type") == "stream":
                assert "\r" not in out["text"], f"{path.name}: cell {i} has redraw fragments"


#: lessons that show IR with display() (HTML), and lessons that time contenders
SHOWS_IR = ("01", "02", "03", "04", "08", "09")
TIMES = ("01", "02", "03", "04", "06", "08", "09", "10")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_lessons_render_ir_as_html_and_time_fairly(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    source = "\n".join(c.source for c in code)
    if path.name[:2] in SHOWS_IR:
        assert any("text/html" in o.get("data", {}) for c in code for o in c.outputs), \
            f"{path.name}: no IR rendered with display()"
        assert "print(td.lower" not in source
    if path.name[:2] in TIMES:
        assert "benchmark(" in source, f"{path.name}: time contenders with tdsl.testing.benchmark"
    assert ").min" not in source, f"{path.name}: a best-of-N timing (use medians)"
    assert "perf_counter() - t0)" not in source, f"{path.name}: a hand-rolled timing loop"


#: notebooks that need an optional package beyond the "notebooks" extra
NEEDS = {"07_embedding": "torch", "10_models": "torch"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, kernel_name: str) -> None:
    need = NEEDS.get(path.stem)
    if need is not None:
        pytest.importorskip(need, reason=f"{path.name} needs {need} (pip install {need})")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=kernel_name, timeout=CELL_TIMEOUT,
                                     resources={"metadata": {"path": str(TUTORIALS)}})
    t0 = time.perf_counter()
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail(f"{path.name} failed:\n{e}", pytrace=False)
    seconds = time.perf_counter() - t0
    print(f"\n{path.name}: {seconds:.1f} s")    # printed, not asserted: the load varies
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs {errors}"
