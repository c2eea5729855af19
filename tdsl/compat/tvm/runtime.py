"""TVM's runtime objects over tdsl: ``Device``, ``NDArray``, ``Module``, ``load_module``.

An ``NDArray`` owns a host NumPy array; tdsl kernels take NumPy arrays directly
(a CUDA build copies them to the device and back), so passing an ``NDArray`` to a
kernel hands it the NumPy array underneath.
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Callable

import numpy as np

from tdsl.errors import ArgumentError

#: TVM's device type codes (DLPack's ``DLDeviceType``).
_TYPE_CODES = {"cpu": 1, "llvm": 1, "c": 1, "stackvm": 1, "ext_dev": 12, "cuda": 2, "gpu": 2,
               "nvptx": 2, "cl": 4, "opencl": 4, "vulkan": 7, "metal": 8, "rocm": 10}
_NAMES = {1: "cpu", 2: "cuda", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm", 12: "ext_dev"}


class Device:
    """A device (TVM's ``Device``): ``tvm.cpu(0)``, ``tvm.cuda(0)``, ``tvm.device("llvm")``."""

    def __init__(self, device_type: int, device_id: int = 0):
        self.device_type = int(device_type)
        self.device_id = int(device_id)

    @property
    def exist(self) -> bool:
        """Whether the device is present (the CPU always; a GPU when CUDA finds one)."""
        if self.device_type == 1:
            return True
        if self.device_type == 2:
            from tdsl.backends.cuda import driver
            return driver.device_status()[0] and self.device_id == 0
        return False

    def sync(self) -> None:
        """Wait for the device to finish (kernel calls already wait)."""

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Device) and other.device_type == self.device_type
                and other.device_id == self.device_id)

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    def __repr__(self) -> str:
        return f"{_NAMES.get(self.device_type, self.device_type)}({self.device_id})"


def device(dev_type: "str | int", dev_id: int = 0) -> Device:
    """``tvm.device("llvm", 0)``, ``tvm.device("cuda")``: a device by name or type code."""
    if isinstance(dev_type, str):
        kind = dev_type.split()[0].lower()
        if kind not in _TYPE_CODES:
            raise ArgumentError(f"tvm.device: unknown device type {dev_type!r}; use one of "
                                f"{sorted(_TYPE_CODES)}")
        return Device(_TYPE_CODES[kind], dev_id)
    return Device(int(dev_type), dev_id)


def cpu(dev_id: int = 0) -> Device:
    return Device(1, dev_id)


def cuda(dev_id: int = 0) -> Device:
    return Device(2, dev_id)


gpu = cuda


def cl(dev_id: int = 0) -> Device:
    """An OpenCL device: tdsl has no OpenCL backend, so it never exists."""
    return Device(4, dev_id)


class NDArray:
    """A tensor on a device (TVM's ``tvm.nd.NDArray``), holding a C-contiguous NumPy array."""

    def __init__(self, data: np.ndarray, dev: "Device | None" = None):
        # not ``np.ascontiguousarray``, which turns a 0-d array into shape (1,)
        data = np.asarray(data)
        self._data = data if data.flags.c_contiguous else data.copy(order="C")
        self.device = dev if dev is not None else cpu(0)

    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape)

    @property
    def dtype(self) -> str:
        return str(self._data.dtype)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def numpy(self) -> np.ndarray:
        """A copy of the contents as a NumPy array."""
        return self._data.copy()

    asnumpy = numpy

    def copyfrom(self, source: Any) -> "NDArray":
        src = source._data if isinstance(source, NDArray) else np.asarray(source)
        if tuple(src.shape) != self.shape:
            raise ArgumentError(f"copyfrom: shape {tuple(src.shape)} does not match the array's "
                                f"{self.shape}")
        self._data[...] = src.astype(self._data.dtype, copy=False)
        return self

    def copyto(self, target: Any) -> "NDArray":
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        if isinstance(target, Device):
            return NDArray(self._data.copy(), target)
        raise ArgumentError(f"copyto: expected an NDArray or a Device, got {type(target).__name__}")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._data if dtype is None else self._data.astype(dtype)

    def __setitem__(self, key: Any, value: Any) -> None:
        if not (isinstance(key, slice) and key == slice(None)):
            raise ArgumentError("NDArray supports only whole assignment: a[:] = value")
        self.copyfrom(value)

    def __repr__(self) -> str:
        return f"<tvm.nd.NDArray shape={self.shape}, {self.device}>\n{self._data!r}"


def _time_emulation(mod: Any, args: list, number: int, repeat: int) -> Any:
    """Seconds per emulated run (the shape TVM's evaluator returns; the figure is the
    emulator's, which says nothing about a GPU).  Each repeat runs once whatever ``number``
    says: ``number=400`` of a conv would keep the emulator busy for many minutes, for a
    figure no one can use."""
    from tdsl.runtime import ProfileResult
    results = []
    for _ in range(max(1, int(repeat))):
        start = time.perf_counter()
        mod.emulate(*args)
        results.append(time.perf_counter() - start)
    return ProfileResult(sum(results) / len(results), tuple(results))


def unwrap(value: Any) -> Any:
    """The NumPy array under an ``NDArray`` (anything else unchanged)."""
    return value._data if isinstance(value, NDArray) else value


class EmulatedCUDAWarning(UserWarning):
    """A CUDA build called where there is no GPU ran on tdsl's CPU emulator."""


def _emulation_notice() -> None:
    """The notice that a CUDA build runs on the emulator: results are computed (and checked
    for races), timings say nothing about a GPU.  A warning issued from this one line, so
    Python's default filter shows it once per process however many calls there are."""
    from tdsl.backends.cuda import driver
    reason = driver.device_status()[1].split(";")[0]
    warnings.warn(f"tvm.cuda(0): {reason or 'no CUDA device'}; tdsl runs the CUDA kernels on "
                  f"its CPU emulator instead: results are emulated and timings are "
                  f"meaningless", EmulatedCUDAWarning, stacklevel=1)


class Module:
    """A built function (TVM's ``runtime.Module``) over a tdsl module: call it on
    ``NDArray``s or NumPy arrays; ``time_evaluator``, ``save``, ``export_library``."""

    def __init__(self, mod: Any):
        self._mod = mod

    @property
    def entry_name(self) -> str:
        return self._mod.entry_name

    @property
    def type_key(self) -> str:
        return "llvm" if self._mod.type_key == "module" else self._mod.type_key

    @property
    def imported_modules(self) -> list:
        """Device modules: tdsl keeps the kernels of a CUDA build in the module itself."""
        return [self] if getattr(self._mod, "type_key", "") == "cuda" else []

    def _emulated(self) -> bool:
        """A CUDA build with no GPU to run it: calls go to the emulator."""
        return getattr(self._mod, "type_key", "") == "cuda" and not cuda(0).exist

    def __call__(self, *args: Any) -> Any:
        """Run the function; a CUDA build where ``tvm.cuda(0).exist`` is False runs on the
        CPU emulator (with one ``EmulatedCUDAWarning``)."""
        if self._emulated():
            _emulation_notice()
            return self._mod.emulate(*[unwrap(a) for a in args])
        return self._mod(*[unwrap(a) for a in args])

    def emulate(self, *args: Any) -> None:
        """Run a CUDA build's kernels on the CPU (tdsl's emulation harness), with or without
        a GPU; results land in the ``NDArray``s."""
        if not hasattr(self._mod, "emulate"):
            raise ArgumentError("emulate() runs CUDA builds; call a CPU module directly")
        self._mod.emulate(*[unwrap(a) for a in args])

    def get_function(self, name: str, query_imports: bool = False) -> "Module":
        self._mod.get_function(name)
        return self

    __getitem__ = get_function

    @property
    def entry_func(self) -> "Module":
        return self

    def time_evaluator(self, func_name: "str | None" = None, dev: Any = None, number: int = 10,
                       repeat: int = 1, min_repeat_ms: float = 0, limit_zero_time_iterations: int = 100,
                       cooldown_interval_ms: float = 0, repeats_to_cooldown: int = 1,
                       f_preproc: str = "") -> Callable[..., Any]:
        """A function timing this kernel (TVM's defaults: ``number=10, repeat=1``)."""
        if self._emulated():
            _emulation_notice()
            return lambda *args: _time_emulation(self._mod, [unwrap(a) for a in args],
                                                 number, repeat)
        evaluator = self._mod.time_evaluator(func_name, dev, number=number, repeat=repeat,
                                             min_repeat_ms=min_repeat_ms)
        return lambda *args: evaluator(*[unwrap(a) for a in args])

    def get_source(self, fmt: str = "") -> str:
        return self._mod.get_source(fmt) if fmt else self._mod.get_source()

    def save(self, path: str, fmt: str = "") -> None:
        """Write the object file (``.o``), LLVM IR (``.ll``) or assembly (``.s``); for a CUDA
        build, ``.cu`` is the CUDA C and ``.ptx`` the PTX."""
        if str(path).endswith((".ptx", ".cu")):
            with open(path, "w") as f:
                f.write(self._mod.get_source("ptx" if str(path).endswith(".ptx") else ""))
            return
        self._mod.save(path)

    def export_library(self, file_name: str, fcompile: Any = None, **kwargs: Any) -> None:
        """Write a shared library (``fcompile`` and its options are not used: tdsl links with
        the system compiler)."""
        self._mod.export_library(file_name)

    def import_module(self, other: Any) -> None:
        """Accepted for device modules of tdsl's own builds (which need no import)."""

    @property
    def tdsl_module(self) -> Any:
        """The tdsl module underneath."""
        return self._mod

    def __repr__(self) -> str:
        return f"Module({self.type_key}, {self.entry_name!r})"


def load_module(path: str, fmt: str = "") -> Module:
    """Load a shared library written by ``export_library`` (or linked from ``save``'s object)."""
    import tdsl
    return Module(tdsl.load_module(path))


def enabled(target: str) -> bool:
    """Whether tdsl can build for ``target`` (``llvm`` always; ``cuda`` with a GPU)."""
    kind = str(target).split()[0]
    return kind in ("llvm", "cpu", "c") or (kind in ("cuda", "gpu") and cuda(0).exist)


ndarray = NDArray
__all__ = ["Device", "NDArray", "Module", "EmulatedCUDAWarning", "device", "cpu", "cuda", "gpu",
           "cl", "load_module", "enabled", "unwrap"]
