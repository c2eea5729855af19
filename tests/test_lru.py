"""tdsl.lru: the bounded caches behind the JIT build cache and a tuning worker's task data."""
import pytest

from tdsl.errors import TDSLError
from tdsl.lru import LRU, env_entries


def test_lru_keeps_the_most_recently_used():
    size = [3]
    c = LRU(lambda: size[0])
    for k in "abcd":
        c.put(k, k.upper())
    assert "a" not in c and len(c) == 3
    assert c.get("b") == "B"          # b is now the most recent: c goes next
    c.put("e", "E")
    assert "c" not in c and "b" in c
    size[0] = 1                        # the capacity is read at each put
    c.put("f", "F")
    assert len(c) == 1 and c.get("f") == "F" and c.get("e") is None
    size[0] = 0
    c.put("g", "G")
    assert len(c) == 0
    c.clear()
    assert len(c) == 0


def test_env_entries(monkeypatch):
    monkeypatch.delenv("TDSL_TEST_ENTRIES", raising=False)
    assert env_entries("TDSL_TEST_ENTRIES", 7) == 7
    monkeypatch.setenv("TDSL_TEST_ENTRIES", " 12 ")
    assert env_entries("TDSL_TEST_ENTRIES", 7) == 12
    monkeypatch.setenv("TDSL_TEST_ENTRIES", "0")
    assert env_entries("TDSL_TEST_ENTRIES", 7) == 0
    for bad in ("-3", "x", "1e3"):
        monkeypatch.setenv("TDSL_TEST_ENTRIES", bad)
        with pytest.raises(TDSLError, match="TDSL_TEST_ENTRIES"):
            env_entries("TDSL_TEST_ENTRIES", 7)
