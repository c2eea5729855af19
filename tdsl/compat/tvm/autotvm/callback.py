"""Tuner callbacks: ``progress_bar(total)`` and ``log_to_file(path)``."""
from __future__ import annotations

from typing import Any

from tdsl.autotune.progress import progress_bar as _progress_bar

from .record import log_to_file


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G") -> Any:
    """Trials done and best GFLOP/s, updated after each batch."""
    return _progress_bar(int(total), desc=prefix.strip() or "tuning")


__all__ = ["progress_bar", "log_to_file"]
