#!/usr/bin/env bash
# Builds the documentation site into docs/_build (open docs/_build/index.html).
#
# Sphinx with myst-nb; warnings are errors.  The pages that come from the code (API
# reference, schedule primitives, CLI help, an exported C header) are generated first,
# running the code they show; the lessons are rendered with the outputs stored in
# tutorials/*.ipynb (refresh them with: python docs/execute_lessons.py).
# Uses .venv (created when missing) and installs the "docs" extra into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -c "import sphinx, myst_nb, tdsl" 2>/dev/null \
    || .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[docs]"
GEN=docs/_generated
rm -rf "$GEN"
mkdir -p "$GEN/lessons"
cp tutorials/[0-9][0-9]_*.ipynb "$GEN/lessons/"
.venv/bin/python docs/gen_pages.py "$GEN"
.venv/bin/python docs/gen_primitives.py "$GEN/primitives"
.venv/bin/python -m sphinx -W --keep-going -q -b html docs docs/_build "$@"
rm -rf docs/jupyter_execute      # myst-nb's scratch copy of the notebooks
echo "documentation: docs/_build/index.html"
