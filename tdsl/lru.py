"""``LRU``: a thread-safe mapping that keeps only its most recently used entries, and
``env_entries``: such a cache's size from an environment variable.

tdsl's process-wide in-memory caches (JIT-compiled kernels, a tuning worker's task data) use
it, so that a long tuning run or test session holds a bounded number of entries instead of
everything it ever made.  The size is read at each insertion (tools and tests can change it).
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

from tdsl.errors import TDSLError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def env_entries(variable: str, default: int) -> int:
    """The entry count set by environment variable ``variable`` (an integer >= 0), or
    ``default`` when it is unset or empty."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise TDSLError(f"{variable}={os.environ[variable]!r}: expected a number of entries "
                        f"(an integer >= 0; 0 keeps none)")
    return value


class LRU(Generic[K, V]):
    """At most ``capacity()`` entries; a ``get`` hit marks its entry used, a ``put`` evicts
    the least recently used entries beyond the capacity (0: keeps nothing)."""

    def __init__(self, capacity: Callable[[], int]):
        self._capacity = capacity
        self._items: "OrderedDict[K, V]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> "V | None":
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: K, value: V) -> None:
        limit = self._capacity()   # outside the lock: it may read the environment
        evicted = []               # dropped after the lock: their finalizers may run then
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > limit:
                evicted.append(self._items.popitem(last=False))
        del evicted

    def clear(self) -> None:
        with self._lock:
            items, self._items = self._items, OrderedDict()
        del items

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items
