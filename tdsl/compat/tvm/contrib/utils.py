"""``tvm.contrib.utils``: ``tempdir()``, a temporary directory removed when dropped."""
from __future__ import annotations

import os
import shutil
import tempfile


class TempDirectory:
    """A temporary directory; ``relpath(name)`` is a path inside it."""

    def __init__(self, custom_path: "str | None" = None, keep_for_debug: bool = False):
        if custom_path:
            os.makedirs(custom_path, exist_ok=True)
            self.temp_dir = custom_path
            self._owned = False
        else:
            self.temp_dir = tempfile.mkdtemp(prefix="tdsl_tvm_")
            self._owned = not keep_for_debug

    def relpath(self, name: str) -> str:
        return os.path.join(self.temp_dir, name)

    def listdir(self) -> list[str]:
        return sorted(os.listdir(self.temp_dir))

    def remove(self) -> None:
        if self._owned and os.path.isdir(self.temp_dir):
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        self._owned = False

    def __enter__(self) -> "TempDirectory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __del__(self) -> None:
        self.remove()


def tempdir(custom_path: "str | None" = None, keep_for_debug: bool = False) -> TempDirectory:
    return TempDirectory(custom_path, keep_for_debug)


__all__ = ["tempdir", "TempDirectory"]
