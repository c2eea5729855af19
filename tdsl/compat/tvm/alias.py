"""``import tdsl.compat.tvm.alias`` makes ``import tvm`` (and ``tvm.te``, ``tvm.testing``,
``tvm.autotvm``...) resolve to ``tdsl.compat.tvm``.

It installs a meta-path finder that maps every ``tvm`` / ``tvm.X`` import to the module
``tdsl.compat.tvm`` / ``tdsl.compat.tvm.X``; the same module object answers both names.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

_PREFIX = "tdsl.compat.tvm"


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, real: str):
        self.real = real

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(self.real)

    def exec_module(self, module: Any) -> None:
        """Nothing to run: ``create_module`` returned the already imported real module."""


class TVMAliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``tvm`` and ``tvm.*`` as the matching ``tdsl.compat.tvm`` modules."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "tvm" and not fullname.startswith("tvm."):
            return None
        real = _PREFIX + fullname[3:]
        real_spec = importlib.util.find_spec(real)
        if real_spec is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(real),
            is_package=real_spec.submodule_search_locations is not None)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, TVMAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, TVMAliasFinder())


install()
