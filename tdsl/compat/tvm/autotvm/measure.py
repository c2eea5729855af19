"""``autotvm.measure_option``, ``LocalBuilder``, ``LocalRunner`` with TVM's keywords, mapped to
tdsl's isolated-process builder and runner."""
from __future__ import annotations

from typing import Any

from tdsl import autotune
from tdsl.autotune.measure import MeasureErrorNo, MeasureInput, MeasureResult  # noqa: F401
from tdsl.errors import TuningError


def LocalBuilder(timeout: float = 10, n_parallel: "int | None" = None, build_kwargs: Any = None,  # noqa: N802
                 build_func: str = "default", do_fork: bool = False, runtime: Any = None) -> Any:
    """Compiles candidates in worker processes (``build_func``/``runtime`` are TVM-only)."""
    if build_func not in ("default", "ndk"):
        raise TuningError(f"LocalBuilder: build_func {build_func!r} is not supported by tdsl.compat")
    return autotune.LocalBuilder(n_parallel=n_parallel, timeout=float(timeout))


def LocalRunner(timeout: float = 10, number: int = 4, repeat: int = 3,  # noqa: N802
                min_repeat_ms: float = 0, cooldown_interval: float = 0.1,
                enable_cpu_cache_flush: bool = False, module_loader: Any = None) -> Any:
    """Times each candidate in an isolated process (TVM's defaults; cooldown and cache flush
    are not done)."""
    return autotune.LocalRunner(timeout=float(timeout), number=int(number), repeat=int(repeat),
                                min_repeat_ms=float(min_repeat_ms))


class LocalRPCMeasureContext:
    """TVM's local RPC tracker and server for measuring: tdsl measures locally in isolated
    processes without RPC, so this is ``LocalRunner`` under TVM's name (``.runner``)."""

    def __init__(self, priority: int = 1, n_parallel: int = 1, timeout: float = 10,
                 number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.1, enable_cpu_cache_flush: bool = False,
                 module_loader: Any = None):
        self.runner = LocalRunner(timeout=timeout, number=number, repeat=repeat,
                                  min_repeat_ms=min_repeat_ms)

    def __enter__(self) -> "LocalRPCMeasureContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        """Nothing to stop: no tracker or server was started."""


def RPCRunner(*args: Any, **kwargs: Any) -> Any:  # noqa: N802
    raise TuningError("autotvm.RPCRunner: remote devices are not supported by tdsl.compat; use "
                      "LocalRunner (or tdsl.autotune.DaskRunner for a cluster)")


def measure_option(builder: Any = "local", runner: Any = "local") -> Any:
    """``measure_option(builder=LocalBuilder(), runner=LocalRunner(number=5))``;
    ``"local"`` means the default one."""
    if builder == "local" or builder is None:
        builder = LocalBuilder()
    if runner == "local" or runner is None:
        runner = LocalRunner()
    if isinstance(builder, str) or isinstance(runner, str):
        raise TuningError(f"measure_option: unknown builder/runner {builder!r}/{runner!r}")
    return autotune.measure_option(builder=builder, runner=runner)


__all__ = ["measure_option", "LocalBuilder", "LocalRunner", "RPCRunner", "LocalRPCMeasureContext",
           "MeasureInput", "MeasureResult", "MeasureErrorNo"]
