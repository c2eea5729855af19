"""What a task of a tuning job can hope for: its memory traffic, its arithmetic intensity,
the machine's streaming bandwidth and FMA peak (the floors of ``TaskScheduler``'s
gradient), and which tasks are alike (a throughput one reached, the others may hope for)."""
from __future__ import annotations

import math
import time
from typing import Callable, Sequence

from tdsl.errors import TDSLError
from tdsl.runtime.threads import default_num_threads

from .task import Task

#: the fraction of the CPU's FMA peak a kernel can hope for (loads, loop overhead: tuned
#: BLAS libraries reach 90-95%)
PEAK_FRACTION = 0.9
#: the fraction of a streaming ``c = a + b``'s bandwidth a kernel can hope for (one that
#: streams more arrays at once reaches less: a 4-input elementwise kernel 80-90%)
STREAM_FRACTION = 0.8


def _tag(task: Task) -> str:
    """The kind of a task: the tags of all its operations and its output dtype (the
    workload when one is untagged).  All of them, not the output's alone: a softmax and a
    GEMV with a tanh epilogue both end in an elementwise operation, and a softmax held to
    the GEMV's FLOP/s expected a gain every round (it took 160 of 192 trials)."""
    from tdsl.tensor import ComputeOp
    tags: set[str] = set()
    seen: set[int] = set()
    stack = [t for op in task.outputs for t in op.outputs]
    while stack:
        op = stack.pop().op
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(id(op))
        tag = str(getattr(op.tag, "value", op.tag) or "")
        if not tag:
            return f"untagged:{task.workload}"
        tags.add(tag)
        stack.extend(op.input_tensors)
    return "+".join(sorted(tags)) + f"|{task.outputs[-1].outputs[0].dtype}"


def _bytes(task: Task, written_twice: bool = False) -> int:
    """Bytes of the task's arguments: what a kernel must at least read and write;
    ``written_twice``: an output counts twice, as memory traffic (a CPU reads a line it is
    about to write: a write costs a read and a write)."""
    import numpy as np
    from tdsl.tensor import PlaceholderOp
    from .irutil import eval_int
    total = 0
    for t in task.args:
        n = math.prod(max(1, eval_int(s, task.sizes, 1)) for s in t.shape)
        k = 1 if isinstance(t.op, PlaceholderOp) or not written_twice else 2
        total += k * n * np.dtype(str(t.dtype) if str(t.dtype) != "bool" else "bool").itemsize
    return max(1, total)


def last_level_cache_bytes() -> int:
    """The largest CPU cache's size (Linux sysfs), else 32 MiB."""
    import glob
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            text = open(path).read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=32 << 20)


def stream_bandwidth(nbytes: int, threads: int = 1,
                     clock: Callable[[], float] = time.perf_counter) -> float:
    """Bytes per second of memory traffic of ``c = a + b`` over three float32 arrays of
    ``nbytes`` in all, split among ``threads`` threads, best of three: the rate a kernel
    streaming data of that size can reach.  Counted as a task's traffic is (``_bytes``
    with ``written_twice``): each input read once, the output read and written.  ``clock``
    (seconds) is a parameter so that tests can check the arithmetic with their own."""
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor
    n = max(threads * 1024, nbytes // 12)
    a, b = np.ones(n, np.float32), np.full(n, 2.0, np.float32)
    c = np.empty_like(a)
    reps = max(1, (96 << 20) // (12 * n))           # at least ~96 MB moved per pass
    cuts = [k * n // threads for k in range(threads + 1)]

    def part(k: int) -> None:
        lo, hi = cuts[k], cuts[k + 1]
        for _ in range(reps):
            np.add(a[lo:hi], b[lo:hi], out=c[lo:hi])   # numpy lets the GIL go meanwhile
    best = math.inf
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(4):                             # the first pass maps the pages
            t = clock()
            list(pool.map(part, range(threads)))
            best = min(best, clock() - t)
    return 4 * c.nbytes * reps / best


#: a dtype's share of the float32 peak (vector lanes of that width); others: no compute floor
_PEAK_SHARE = {"float32": 1.0, "float64": 0.5}


def _bandwidth(nbytes: int, threads: "int | None") -> float:
    """``stream_bandwidth`` with ``threads`` (None: this machine's default)."""
    return stream_bandwidth(nbytes, threads or default_num_threads())


def _peak(threads: "int | None") -> float:
    """The CPU's float32 FMA peak (FLOP/s) with ``threads`` threads (None: this machine's
    default); 0 when unknown."""
    threads = threads or default_num_threads()
    try:
        from tdsl.backends.llvm.peak import peak_flops
        return peak_flops("float32", threads)
    except (ImportError, TDSLError):    # no LLVM JIT here: no compute floor, the job goes on
        return 0.0


def _intensity(task: Task) -> float:
    """FLOP per byte of the task's arguments: what bounds its throughput (a GEMV and a
    large matmul have the same tag but not the same reachable FLOP/s)."""
    return task.flop / _bytes(task)


def _similar(tasks: Sequence[Task]) -> list[list[int]]:
    """For each task, the tasks similar to it (itself included): the same kind and an
    arithmetic intensity within a factor of two -- the throughput one of them reached
    is one the others may hope for (the forward gradient's second estimate)."""
    tags = [_tag(t) for t in tasks]
    inten = [_intensity(t) for t in tasks]
    return [[j for j in range(len(tasks)) if tags[j] == tags[i] and
             0.5 <= (inten[j] or 1e-30) / (inten[i] or 1e-30) <= 2.0]
            for i in range(len(tasks))]
