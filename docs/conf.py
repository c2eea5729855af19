"""Sphinx configuration of the tdsl documentation site (built by ``bash scripts/docs.sh``).

Sphinx, because autodoc reads tdsl's docstrings as they are written (reStructuredText inline
markup), ``-W`` turns every warning into an error, and myst-nb renders the lesson notebooks
with their stored outputs and plots without pandoc; the theme (alabaster) ships with Sphinx.
"""
import tdsl

project = "tdsl"
author = "the tdsl authors"
copyright = "the tdsl authors, Apache-2.0"
version = release = tdsl.__version__

extensions = ["sphinx.ext.autodoc", "myst_nb"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "jupyter_execute", "**/.ipynb_checkpoints", "README.md"]

# The lessons are rendered with the outputs stored in tutorials/*.ipynb (executed by
# docs/execute_lessons.py and checked by tests/tutorials): building the site runs no lesson.
nb_execution_mode = "off"
nb_output_stderr = "show"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"exclude-members": "__init__, __new__"}

html_theme = "alabaster"
html_title = f"tdsl {release}"
html_theme_options = {"page_width": "1180px", "sidebar_width": "240px",
                      "description": "a tensor-program compiler for Python"}
html_static_path: list = []
