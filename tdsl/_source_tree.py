"""Importing tdsl from a source checkout that is not installed (``PYTHONPATH=.``).

``setup.py`` maps the checkout's top-level ``schedule``, ``autotune`` and ``backends``
folders into the ``tdsl`` namespace; an install (editable or not) does that mapping.  A
bare checkout on ``sys.path`` has none, so ``install()`` adds a finder for those three
names, placed after every other finder (an installed tdsl still wins).  Their submodules
are then found through the packages' ``__path__`` as usual.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Any, Optional

#: tdsl subpackage -> the checkout folder it lives in (setup.py's ROOTS)
FOLDERS = {"tdsl.schedule": "schedule", "tdsl.autotune": "autotune",
           "tdsl.backends": "backends"}


class SourceTreeFinder(importlib.abc.MetaPathFinder):
    """Finds ``tdsl.schedule``, ``tdsl.autotune`` and ``tdsl.backends`` in ``root``."""

    def __init__(self, root: str):
        self.root = root

    def find_spec(self, name: str, path: Any = None, target: Any = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        folder = FOLDERS.get(name)
        if folder is None:
            return None
        init = os.path.join(self.root, folder, "__init__.py")
        if not os.path.isfile(init):
            return None
        return importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[os.path.dirname(init)])


def install(package_dir: str) -> None:
    """Add the finder when ``package_dir`` (tdsl's folder) sits in a checkout whose
    subpackages are top-level folders (once per process)."""
    root = os.path.dirname(os.path.abspath(package_dir))
    if os.path.isdir(os.path.join(package_dir, "schedule")) or \
            not os.path.isfile(os.path.join(root, "setup.py")) or \
            any(isinstance(f, SourceTreeFinder) for f in sys.meta_path):
        return
    sys.meta_path.append(SourceTreeFinder(root))
