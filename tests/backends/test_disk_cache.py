"""The on-disk caches (LLVM objects, CUDA emulator harnesses): where they live
(``TDSL_CACHE_DIR``, else ``XDG_CACHE_HOME``, else ``~/.cache``) and their LRU size cap."""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from tdsl import disk_cache
from tdsl.backends.cuda import emulator
from tdsl.backends.llvm import build, cache
from tdsl.errors import TDSLError

from tests.backends.llvm_irbuild import elementwise

RNG = np.random.default_rng(7)


@pytest.fixture
def xdg(tmp_path, monkeypatch) -> Path:
    """Caches under a private XDG_CACHE_HOME, TDSL_CACHE_DIR unset, no cap override."""
    monkeypatch.delenv("TDSL_CACHE_DIR", raising=False)
    monkeypatch.delenv("TDSL_CACHE_MAX_SIZE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "tdsl"


def _fill(folder: Path, key: str, sizes: dict, age_s: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    t = time.time() - age_s
    for suffix, n in sizes.items():
        p = folder / f"{key}{suffix}"
        p.write_bytes(b"x" * n)
        os.utime(p, (t, t))


# ---- where ---------------------------------------------------------------------------------------
def test_caches_honour_xdg_cache_home(xdg, monkeypatch, tmp_path):
    assert disk_cache.root() == xdg
    assert cache.cache_dir() == xdg / "llvm"
    assert emulator.cache_dir() == str(xdg / "cuda-emu")
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "mine"))      # the tdsl variable wins
    assert cache.cache_dir() == tmp_path / "mine" / "llvm"
    assert emulator.cache_dir() == str(tmp_path / "mine" / "cuda-emu")
    monkeypatch.delenv("TDSL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")     # invalid per the XDG spec
    assert disk_cache.root() == Path.home() / ".cache" / "tdsl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert disk_cache.root() == Path.home() / ".cache" / "tdsl"


def test_cache_off_disables_the_build_cache_only(monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", "off")
    assert cache.cache_dir() is None
    assert emulator.cache_dir().startswith(tempfile.gettempdir())   # it must compile somewhere


def test_a_build_writes_into_the_xdg_cache(xdg):
    m = build(elementwise("xdg_add", "float32", lambda a, b: a * b + a))
    assert list((xdg / "llvm").glob("*.o")) and list((xdg / "llvm").glob("*.json"))
    x, y = RNG.standard_normal(9).astype("float32"), RNG.standard_normal(9).astype("float32")
    z = np.zeros(9, "float32")
    m(x, y, z)
    np.testing.assert_allclose(z, x * y + x, rtol=1e-6)


# ---- how large -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [("", disk_cache.DEFAULT_MAX_BYTES), ("1000", 1000),
                                           ("512k", 512 * 1024), ("300M", 300 * 2**20),
                                           ("1.5G", int(1.5 * 2**30)), ("2MiB", 2 * 2**20),
                                           ("0", 0)])
def test_max_size_from_the_environment(monkeypatch, text, expected):
    monkeypatch.setenv("TDSL_CACHE_MAX_SIZE", text)
    assert disk_cache.max_bytes() == expected


def test_a_bad_max_size_is_an_error(monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_MAX_SIZE", "lots")
    with pytest.raises(TDSLError, match="TDSL_CACHE_MAX_SIZE='lots'"):
        disk_cache.max_bytes()


def test_prune_evicts_least_recently_used_entries_whole(tmp_path):
    d = tmp_path / "llvm"
    _fill(d, "old", {".o": 400, ".json": 100}, age_s=3000)
    _fill(d, "mid", {".o": 400, ".json": 100}, age_s=2000)
    _fill(d, "new", {".o": 400, ".json": 100}, age_s=1000)
    _fill(d, "now", {".o": 400, ".json": 100}, age_s=0)          # in its grace period
    assert disk_cache.usage(d) == (8, 2000)
    freed = disk_cache.prune(d, limit=1100)
    assert freed == 1000
    assert sorted(p.name for p in d.iterdir()) == ["new.json", "new.o", "now.json", "now.o"]
    # even a cap of one byte keeps what is in use right now, and what `keep` protects
    _fill(d, "emu-h", {".h": 10, ".h.gch": 10}, age_s=5000)
    disk_cache.prune(d, limit=1, keep=lambda key: key.startswith("emu-"))
    assert sorted(p.name for p in d.iterdir()) == ["emu-h.h", "emu-h.h.gch", "now.json", "now.o"]
    assert disk_cache.prune(d, limit=0) == 0                     # 0: no cap


def test_builds_keep_the_llvm_cache_under_its_cap(xdg, monkeypatch):
    d = xdg / "llvm"
    for i in range(5):
        _fill(d, f"stale{i}", {".o": 100_000, ".json": 1000}, age_s=10_000 - i)
    monkeypatch.setenv("TDSL_CACHE_MAX_SIZE", "250k")
    build(elementwise("capped_add", "float32", lambda a, b: a + b + b))
    names = {p.name.split(".")[0] for p in d.iterdir()}
    assert names.isdisjoint({"stale0", "stale1", "stale2"})       # the oldest went first
    assert {"stale3", "stale4"} <= names
    assert disk_cache.usage(d)[1] <= 250 * 1024


def test_a_disk_hit_marks_its_entry_used(xdg):
    build(elementwise("touched_add", "float32", lambda a, b: a - b * a))
    d = xdg / "llvm"
    old = time.time() - 10_000
    for p in d.iterdir():
        os.utime(p, (old, old))
    cache.clear_memory()
    before = cache.stats["disk_hits"]
    build(elementwise("touched_add", "float32", lambda a, b: a - b * a))
    assert cache.stats["disk_hits"] == before + 1
    assert all(p.stat().st_mtime > old + 5_000 for p in d.iterdir())
