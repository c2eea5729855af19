"""Every tutorial notebook runs top to bottom without an error (nbclient), and is stored
without outputs.

The notebooks run in a kernel of *this* Python (a kernelspec written to a temporary
directory), with the tutorials folder as the working directory.  Each notebook's run time is
printed (``pytest -s``); all seven stay well under five minutes together.
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
CELL_TIMEOUT = 300


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


def test_all_seven_lessons_exist() -> None:
    names = [p.stem for p in NOTEBOOKS]
    assert [n[:2] for n in names] == ["01", "02", "03", "04", "05", "06", "07"], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: cell {i} has stored outputs"
            assert cell.execution_count is None, f"{path.name}: cell {i} has an execution count"


#: notebooks that need an optional package beyond the "notebooks" extra
NEEDS = {"07_embedding": "torch"}


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
    print(f"\n{path.name}: {seconds:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs {errors}"
