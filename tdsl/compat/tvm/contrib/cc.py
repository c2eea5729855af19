"""``tvm.contrib.cc``: link object files into a shared library with the system compiler."""
from __future__ import annotations

import subprocess
from typing import Any, Sequence

from tdsl.errors import BuildError


def create_shared(output: str, objects: "str | Sequence[str]", options: "Sequence[str] | None" = None,
                  cc: str = "gcc", cwd: Any = None, ccache_env: Any = None) -> None:
    """``cc -shared -fPIC -o output objects... options...``."""
    objs = [objects] if isinstance(objects, str) else list(objects)
    cmd = [cc, "-shared", "-fPIC", "-o", str(output)] + [str(o) for o in objs] + list(options or [])
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise BuildError(f"create_shared: {' '.join(cmd)} failed:\n{proc.stderr}")


def create_executable(output: str, objects: "str | Sequence[str]",
                      options: "Sequence[str] | None" = None, cc: str = "gcc") -> None:
    objs = [objects] if isinstance(objects, str) else list(objects)
    cmd = [cc, "-o", str(output)] + [str(o) for o in objs] + list(options or [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"create_executable: {' '.join(cmd)} failed:\n{proc.stderr}")


create_shared.output_format = "so"  # type: ignore[attr-defined]
__all__ = ["create_shared", "create_executable"]
