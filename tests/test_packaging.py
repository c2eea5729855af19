"""Both a regular and an editable install import every subpackage of the one tdsl namespace.

The child venv is isolated from the base interpreter; it sees the *test run's* installed
dependencies (llvmlite, numpy, ...) through a ``.pth`` line naming this interpreter's
site-packages, so the test needs nothing installed outside the project's own venv.
"""
import site
import subprocess
import sys
import sysconfig
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


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a child process; on failure, fail the test with its stdout and stderr."""
    proc = subprocess.run(args, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args[:6])} ... exited {proc.returncode}\n"
                    f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc


def _make_venv_with_parent_deps(venv: Path) -> Path:
    """A plain venv whose sys.path also holds this interpreter's site-packages (the deps)."""
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    child_site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                      ).stdout.strip()
    parent_sites = [p for p in dict.fromkeys([sysconfig.get_paths()["purelib"],
                                              *site.getsitepackages()]) if Path(p).is_dir()]
    # Appended after the child's own site-packages, so the child's tdsl install wins; a plain
    # path line does not run the parent's .pth files, so the parent's editable tdsl stays out.
    (Path(child_site) / "_tdsl_test_parent_deps.pth").write_text("\n".join(parent_sites) + "\n")
    return py


@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_install_imports_every_subpackage(tmp_path: Path, editable: bool) -> None:
    py = _make_venv_with_parent_deps(tmp_path / "venv")
    args = [str(py), "-m", "pip", "install", "-q", "--no-deps",
            "--disable-pip-version-check"]
    args += ["-e", str(ROOT)] if editable else [str(ROOT)]
    _run(args, cwd=tmp_path)
    names = sorted(set(SUBPACKAGES) | set(_subpackages_on_disk()))
    code = "import importlib,sys\n" + "".join(f"importlib.import_module({n!r})\n" for n in names) \
        + "import tdsl; print(tdsl.__file__)\n" \
        + "import importlib.metadata as md, pathlib\n" \
        + "print(md.version('tdsl') == tdsl.__version__, md.metadata('tdsl')['License-Expression'])\n" \
        + "print((pathlib.Path(tdsl.__file__).parent / 'py.typed').is_file())\n" \
        + "print(any(f.name == 'LICENSE' for f in md.files('tdsl') or ()))\n"
    # -P: do not put the current directory on sys.path; run outside the repo.
    out = _run([str(py), "-P", "-c", code], cwd=tmp_path).stdout
    where, version_and_license, typed, license_file = out.strip().splitlines()
    expected = "site-packages" if not editable else str(ROOT)
    assert expected in where, f"tdsl imported from {where!r}, expected a path with {expected!r}"
    # the version is written once (tdsl/__init__.py); the SPDX license, LICENSE and py.typed ship
    assert version_and_license == "True Apache-2.0"
    assert typed == "True"
    if not editable:
        assert license_file == "True"


def test_project_metadata() -> None:
    """Extras: tqdm for the notebooks (their progress bars), threadpoolctl for the benchmarks
    (same BLAS thread count as the other contenders)."""
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    assert any(r.startswith("tqdm") for r in extras["notebooks"])
    assert any(r.startswith("threadpoolctl") for r in extras["benchmark"])
    assert "version" in meta.get("dynamic", []) and "version" not in meta
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_no_code_imports_the_top_level_folders_as_packages() -> None:
    """``backends``, ``autotune`` and ``schedule`` are tdsl's subpackages (``tdsl.backends``
    ...); importing them by their folder name from the repository root loads a second copy
    of each module -- its own caches, locks and exception classes (a test did, for
    ``backends.cuda``)."""
    import re
    root = Path(__file__).resolve().parents[1]
    bad = re.compile(r"^\s*(from|import)\s+(backends|autotune|schedule)(\.|\s|$)", re.M)
    hits = [str(p.relative_to(root)) for d in ("tests", "tdsl", "backends", "autotune",
                                               "schedule", "benchmarks", "docs", "scripts")
            for p in (root / d).rglob("*.py") if bad.search(p.read_text(errors="replace"))]
    assert not hits, hits
