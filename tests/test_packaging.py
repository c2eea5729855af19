"""Both a regular and an editable install import every subpackage of the one tdsl namespace."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ["tdsl", "tdsl.schedule", "tdsl.autotune", "tdsl.backends", "tdsl.backends.llvm",
               "tdsl.backends.cuda", "tdsl.arith", "tdsl.lowering", "tdsl.runtime"]


def _subpackages_on_disk() -> list[str]:
    """Every package folder in the four code folders, as its tdsl.* name."""
    roots = {"tdsl": "tdsl", "schedule": "tdsl.schedule", "autotune": "tdsl.autotune",
             "backends": "tdsl.backends"}
    names = []
    for folder, pkg in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            names.append(".".join([pkg, *rel.parts]) if rel.parts else pkg)
    return sorted(names)


@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_install_imports_every_subpackage(tmp_path: Path, editable: bool) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    args = [str(py), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check"]
    args += ["-e", str(ROOT)] if editable else [str(ROOT)]
    subprocess.run(args, check=True, cwd=tmp_path)
    names = sorted(set(SUBPACKAGES) | set(_subpackages_on_disk()))
    code = "import importlib,sys\n" + "".join(f"importlib.import_module({n!r})\n" for n in names) \
        + "import tdsl; print(tdsl.__file__)"
    # -P: do not put the current directory on sys.path; run outside the repo.
    out = subprocess.run([str(py), "-P", "-c", code], check=True, cwd=tmp_path,
                         capture_output=True, text=True).stdout
    if not editable:
        assert "site-packages" in out, out
