"""Running CUDA modules on a GPU through cuda-python's driver API.

Nothing here runs at import: ``get_driver()`` initializes the driver on first use
and raises ``NoCUDADeviceError`` (with the reason) when cuda-python, the NVIDIA
driver or a device is missing.  Kernels are loaded per module from a CUBIN built
by NVRTC for the device's own architecture (PTX for the target's arch as a
fallback, which the driver compiles).  Arguments may be NumPy arrays (copied to
the device and back) or CUDA arrays exposing ``__cuda_array_interface__`` (CuPy,
PyTorch, Numba: used in place).  Work goes to the default stream; a call returns
when the device is done.
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import threading
from typing import Any

import numpy as np

from tdsl.errors import ShapeError
from tdsl.runtime import ProfileResult
from tdsl.stmt import Buffer

from . import nvrtc
from .errors import CUDADriverError, NoCUDADeviceError, NVRTCError
from .host import LaunchConfig, execute

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


def _import_driver() -> Any:
    try:
        from cuda.bindings import driver
        return driver
    except ImportError:
        try:
            from cuda import cuda as driver  # type: ignore[no-redef]  # cuda-python < 12.6
            return driver
        except ImportError:
            raise NoCUDADeviceError("no CUDA device found: cuda-python is not installed "
                                    "(pip install 'cuda-python>=12,<13'); use emulate() to run "
                                    "the kernels on the CPU") from None


def device_status() -> tuple[bool, str]:
    """(usable, reason): whether a CUDA driver and device can be used here (cached)."""
    with _LOCK:
        if "driver" in _STATE:
            return True, ""
        if "reason" in _STATE:
            return False, _STATE["reason"]
        try:
            _STATE["driver"] = Driver(_import_driver())
            return True, ""
        except NoCUDADeviceError as e:
            _STATE["reason"] = str(e)
            return False, str(e)


def get_driver() -> "Driver":
    ok, reason = device_status()
    if not ok:
        raise NoCUDADeviceError(reason)
    return _STATE["driver"]


class Driver:
    """The process's CUDA context on device 0, with loaded modules."""

    def __init__(self, cu: Any):
        self.cu = cu
        try:
            result = cu.cuInit(0)
        except (RuntimeError, OSError) as e:  # libcuda missing: cuda-python raises, no code
            raise NoCUDADeviceError(f"no CUDA device found: the NVIDIA driver library could not "
                                    f"be loaded ({e}); use emulate() to run the kernels on the "
                                    f"CPU") from None
        if int(result[0]) != 0:
            raise NoCUDADeviceError(f"no CUDA device found: cuInit failed with "
                                    f"{self._name(result[0])}; use emulate() to run the kernels "
                                    f"on the CPU")
        count = self.check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
        if count < 1:
            raise NoCUDADeviceError("no CUDA device found: the driver reports 0 devices; use "
                                    "emulate() to run the kernels on the CPU")
        self.device = self.check(cu.cuDeviceGet(0), "cuDeviceGet")
        self.context = self.check(cu.cuDevicePrimaryCtxRetain(self.device),
                                  "cuDevicePrimaryCtxRetain")
        self.make_current()
        attr = cu.CUdevice_attribute
        major = self.check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device), "cuDeviceGetAttribute")
        minor = self.check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device), "cuDeviceGetAttribute")
        self.arch = f"sm_{major}{minor}"
        self.modules: dict[tuple, dict[str, Any]] = {}

    # ---- errors -------------------------------------------------------------------------
    def _name(self, err: Any) -> str:
        try:
            _, s = self.cu.cuGetErrorString(err)
            return f"{err!r} ({s.decode() if isinstance(s, bytes) else s})"
        except Exception:  # noqa: BLE001 - describing an error must not raise another
            return repr(err)

    def check(self, result: Any, what: str) -> Any:
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            raise CUDADriverError(f"CUDA driver call {what} failed: {self._name(err)}")
        if isinstance(result, tuple) and len(result) > 1:
            return result[1] if len(result) == 2 else result[1:]
        return None

    def make_current(self) -> None:
        self.check(self.cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    # ---- modules ------------------------------------------------------------------------
    def functions(self, module: Any) -> dict[str, Any]:
        """The CUfunction of each kernel of a CUDAModule (its image loaded once)."""
        key = (hashlib.sha256(module.source.encode()).hexdigest(), module.target.arch)
        funcs = self.modules.get(key)
        if funcs is not None:
            return funcs
        image = self._image(module)
        mod = self.check(self.cu.cuModuleLoadData(image), "cuModuleLoadData")
        funcs = {k.name: self.check(self.cu.cuModuleGetFunction(mod, k.name.encode()),
                                    f"cuModuleGetFunction({k.name})") for k in module.kernels}
        self.modules[key] = funcs
        return funcs

    def _image(self, module: Any) -> bytes:
        want = nvrtc.arch_number(module.target.arch)
        have = nvrtc.arch_number(self.arch)
        if want > have:
            raise CUDADriverError(f"the module targets {module.target.arch} but the device is "
                                  f"{self.arch}; build with target='cuda -arch={self.arch}'")
        try:  # native code for this device: no driver-side PTX JIT (or PTX version limits)
            return nvrtc.compile_cuda(module.source, self.arch, "cubin")
        except NVRTCError:
            return nvrtc.compile_cuda(module.source, module.target.arch, "ptx") + b"\0"

    # ---- memory and launches ----------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        return int(self.check(self.cu.cuMemAlloc(max(1, nbytes)), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        self.check(self.cu.cuMemFree(ptr), "cuMemFree")

    def htod(self, ptr: int, array: np.ndarray) -> None:
        self.check(self.cu.cuMemcpyHtoD(ptr, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")

    def dtoh(self, array: np.ndarray, ptr: int) -> None:
        self.check(self.cu.cuMemcpyDtoH(array.ctypes.data, ptr, array.nbytes), "cuMemcpyDtoH")

    def launch(self, function: Any, cfg: LaunchConfig, kinds: list[bool]) -> None:
        """Launch with ``cfg.args``; ``kinds[i]`` is True for a pointer argument."""
        holders = [ctypes.c_void_p(v) if is_ptr else ctypes.c_longlong(v)
                   for v, is_ptr in zip(cfg.args, kinds)]
        slots = (ctypes.c_void_p * max(1, len(holders)))(
            *[ctypes.addressof(h) for h in holders])
        self.check(self.cu.cuLaunchKernel(function, *cfg.grid, *cfg.block, 0, 0,
                                          ctypes.addressof(slots), 0), "cuLaunchKernel")

    def synchronize(self) -> None:
        self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")

    def event(self) -> Any:
        return self.check(self.cu.cuEventCreate(0), "cuEventCreate")

    def record(self, event: Any) -> None:
        self.check(self.cu.cuEventRecord(event, 0), "cuEventRecord")

    def elapsed_ms(self, start: Any, end: Any) -> float:
        self.check(self.cu.cuEventSynchronize(end), "cuEventSynchronize")
        return float(self.check(self.cu.cuEventElapsedTime(start, end), "cuEventElapsedTime"))

    def destroy(self, event: Any) -> None:
        self.check(self.cu.cuEventDestroy(event), "cuEventDestroy")


class _Backend:
    """``host.execute`` on the device: intermediate buffers kept for the run's lifetime."""

    def __init__(self, drv: Driver, functions: dict[str, Any]):
        self.drv = drv
        self.functions = functions
        self.pool: dict[int, tuple[int, int]] = {}

    def alloc(self, buffer: Buffer, nbytes: int) -> int:
        have = self.pool.get(id(buffer))
        if have is not None and have[1] >= nbytes:
            return have[0]
        if have is not None:
            self.drv.free(have[0])
        ptr = self.drv.alloc(nbytes)
        self.pool[id(buffer)] = (ptr, nbytes)
        return ptr

    def free(self, ptr: int) -> None:
        """Kept until ``release``: timing loops do not pay for cuMemAlloc."""

    def launch(self, kernel: Any, cfg: LaunchConfig) -> None:
        self.drv.launch(self.functions[kernel.name], cfg, [p.buffer is not None for p in kernel.params])

    def release(self) -> None:
        for ptr, _ in self.pool.values():
            self.drv.free(ptr)
        self.pool.clear()


class GPURun:
    """One set of checked arguments on the device: call it to run the kernels."""

    def __init__(self, drv: Driver, module: Any, arrays: tuple):
        from .module import bind_any
        drv.make_current()
        self.drv = drv
        self.module = module
        arrs, self.sizes, devs = bind_any(module, arrays)
        self.pointers: dict[int, int] = {}
        self.copies: list[tuple[np.ndarray, int, bool]] = []
        align = _param_alignment(module)
        written = module._written
        try:
            for i, (buf, a, dev) in enumerate(zip(module.func.params, arrs, devs)):
                if dev is not None:
                    need = align.get(id(buf), 1)
                    if dev.ptr % need:
                        raise ShapeError(f"argument {i} ('{buf.name}'): device pointer "
                                         f"{dev.ptr:#x} is not {need}-byte aligned, which the "
                                         f"kernel's tensor-core loads need; pass a fresh array")
                    self.pointers[id(buf)] = dev.ptr
                else:
                    ptr = drv.alloc(a.nbytes)
                    self.copies.append((a, ptr, i in written))
                    drv.htod(ptr, a)
                    self.pointers[id(buf)] = ptr
            self.backend = _Backend(drv, drv.functions(module))
        except BaseException:
            self.release()
            raise

    def __call__(self) -> None:
        execute(self.module.plan, dict(self.sizes), dict(self.pointers), self.backend)

    def finish(self) -> None:
        """Wait for the device and copy written NumPy arguments back."""
        self.drv.synchronize()
        for array, ptr, written in self.copies:
            if written:
                self.drv.dtoh(array, ptr)

    def release(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.release()
        for _, ptr, _ in self.copies:
            self.drv.free(ptr)
        self.copies = []


def _param_alignment(module: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    for k in module.kernels:
        for p in k.params:
            if p.buffer is not None and p.min_align > 1:
                out[id(p.buffer)] = max(out.get(id(p.buffer), 1), p.min_align)
    return out


def measure_events(drv: Driver, run: GPURun, number: int = 1, repeat: int = 1,
                   min_repeat_ms: float = 0) -> ProfileResult:
    """TVM's time_evaluator semantics (see ``tdsl.runtime.measure``), timed with CUDA events."""
    from tdsl.errors import BuildError
    if number < 1 or repeat < 1:
        raise BuildError(f"time_evaluator: number and repeat must be >= 1, got "
                         f"number={number}, repeat={repeat}")
    start, end = drv.event(), drv.event()
    try:
        run()
        drv.synchronize()
        results = []
        for _ in range(repeat):
            ms = 0.0
            while True:
                if ms > 0.0:
                    number = int(max(min_repeat_ms / (ms / number) + 1, number * 1.618))
                drv.record(start)
                for _ in range(number):
                    run()
                drv.record(end)
                ms = drv.elapsed_ms(start, end)
                if ms >= min_repeat_ms:
                    break
                ms = max(ms, 1e-6)
            results.append(ms / 1e3 / number)
        return ProfileResult(math.fsum(results) / len(results), tuple(results))
    finally:
        drv.destroy(start)
        drv.destroy(end)
