"""The documentation site: every schedule primitive has a generated page (its example runs,
its refusal is refused), every public name is in the API reference, and -- when Sphinx and
myst-nb are installed (the ``docs`` extra) -- the whole site builds with warnings as errors.
CI builds the site with ``bash scripts/docs.sh`` (see .ci/run)."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_schedule_primitive_has_a_page(tmp_path):
    from tdsl.schedule.trace import SCHEDULE_PRIMITIVES, STAGE_PRIMITIVES
    gen = _load("gen_primitives")
    documented = {p[0] for p in gen.PRIMITIVES}
    missing = (STAGE_PRIMITIVES | SCHEDULE_PRIMITIVES) - documented
    assert not missing, f"add a page for {sorted(missing)} in docs/gen_primitives.py"
    assert gen.main(str(tmp_path)) == 0
    split = (tmp_path / "split.md").read_text()
    assert "## Before" in split and "## After" in split and "j.inner" in split
    assert "ScheduleError: split: stage 'B'" in split
    assert "rfactor" in (tmp_path / "index.md").read_text()


def test_api_pages_cover_every_public_name(tmp_path):
    import tdsl
    gen = _load("gen_pages")
    gen.api_pages(tmp_path)
    text = "\n".join(p.read_text() for p in (tmp_path / "api").glob("*.md"))
    for name in gen.public_names(tdsl):
        assert f"tdsl.{name}" in text, name
    for name in ("tdsl.testing.benchmark", "tdsl.ops.dense", "tdsl.autotune.auto_schedule",
                 "tdsl.backends.llvm.load_module", "tdsl.Stage"):
        assert name in text, name


def test_cli_page_and_example_header(tmp_path):
    gen = _load("gen_pages")
    gen.cli_page(tmp_path)
    gen.example_header(tmp_path)
    cli = (tmp_path / "cli.md").read_text()
    assert "$ tdsl --help" in cli and "## tdsl cache clear" in cli
    header = (tmp_path / "example_kernel.h").read_text()
    assert "int32_t linear(" in header and "TDSL_ERR_NULL_POINTER" in header
    assert "GOMP_parallel" in header and "CPU '" in header


def test_tvm_page_shows_the_readme_section_and_compat_readme(tmp_path):
    gen = _load("gen_pages")
    root = tmp_path / "repo"
    (root / "tdsl" / "compat" / "tvm").mkdir(parents=True)
    (root / "README.md").write_text("# tdsl\n\n## Coming from TVM\n\nAdd `import tdsl.compat.tvm."
                                    "alias`; see [the list](docs/x.md).\n\n## Errors\n\nno\n")
    (root / "tdsl" / "compat" / "tvm" / "README.md").write_text("# Compat\n\n## Left out\n")
    gen.tvm_page(tmp_path, root)
    page = (tmp_path / "tvm_compat.md").read_text()
    assert "import tdsl.compat.tvm.alias" in page and "see the list." in page
    assert "## Errors" not in page and "## Compat" in page and "### Left out" in page


@pytest.mark.skipif(importlib.util.find_spec("sphinx") is None
                    or importlib.util.find_spec("myst_nb") is None,
                    reason="the docs build needs the docs extra (pip install -e '.[docs]')")
def test_site_builds_with_warnings_as_errors(tmp_path):
    src = tmp_path / "docs"
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build", "_generated",
                                                             "jupyter_execute"))
    gen = src / "_generated"
    (gen / "lessons").mkdir(parents=True)
    for nb in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb")):
        shutil.copy(nb, gen / "lessons")
    assert _load("gen_pages").main(str(gen)) == 0
    assert _load("gen_primitives").main(str(gen / "primitives")) == 0
    out = tmp_path / "html"
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                        str(src), str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    index = (out / "index.html").read_text()
    assert "08_ops_fusion.html" in index and "primitives/index.html" in index
    lesson = (out / "_generated" / "lessons" / "09_reductions.html").read_text()
    assert "<img" in lesson and "ScheduleError" in lesson          # a plot and outputs
    assert (out / "_generated" / "primitives" / "rfactor.html").exists()
