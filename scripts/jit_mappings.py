"""How many memory mappings JIT-compiled kernels hold (Linux): builds N distinct small
kernels, runs each against NumPy, drops them, and prints /proc/self/maps line counts.

usage: python scripts/jit_mappings.py [N]   (TDSL_JIT_CACHE_ENTRIES sets the cache size)

Each linked kernel holds about three mappings until released; Linux allows 65530 per
process (vm.max_map_count).  After the drop, only the in-memory build cache's kernels
(at most TDSL_JIT_CACHE_ENTRIES) should remain; after clear_memory(), none.
"""
from __future__ import annotations

import gc
import os
import sys

import numpy as np


def maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def main(n: int) -> int:
    if not os.path.exists("/proc/self/maps"):
        print("needs /proc/self/maps (Linux)")
        return 0
    os.environ.setdefault("TDSL_CACHE_DIR", "off")   # measure linking, not the disk cache
    import tdsl as td
    from tdsl.backends.llvm import cache

    def kernel(k: int):
        m = td.var("m")
        A = td.placeholder((m,), name="A")
        B = td.compute((m,), lambda i: A[i] * (k + 1.5) + float(k), name="B")
        return td.build(td.create_schedule(B.op), [A, B], target="llvm")

    rng = np.random.default_rng(0)
    a = rng.standard_normal(33).astype("float32")
    b = np.empty_like(a)
    kernel(-1)(a, b)
    gc.collect()
    base = maps()
    mods = []
    for k in range(n):
        mods.append(kernel(k))
        mods[-1](a, b)
        np.testing.assert_allclose(b, a * np.float32(k + 1.5) + np.float32(k), rtol=1e-5,
                                   atol=1e-6 * (k + 2))
    held = maps()
    del mods
    gc.collect()
    dropped = maps()
    cache.clear_memory()
    gc.collect()
    cleared = maps()
    print(f"{n} kernels, cache of {cache.memory_entries()}: baseline {base} mappings, "
          f"{held} while held (+{(held - base) / n:.2f} per kernel), {dropped} after the drop, "
          f"{cleared} after clear_memory()")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
