"""Running CUDA modules on a GPU through cuda-python's driver API.

Nothing here runs at import: ``get_driver()`` initializes the driver on first use
and raises ``NoCUDADeviceError`` (with the reason) when cuda-python, the NVIDIA
driver or a device is missing.  Kernels are loaded per module from a CUBIN built
by NVRTC for the device's own architecture (PTX for the target's arch only when
this NVRTC cannot emit code for the device's arch; a compile error is raised).
Arguments may be NumPy arrays (copied to the device and back) or CUDA arrays exposing
``__cuda_array_interface__`` (CuPy, PyTorch, Numba: used in place).

* Device: the one holding the device arrays (all must be on one device; device 0 for
  NumPy-only calls).  Each device has its primary context, made current in the calling
  thread by every entry point (contexts are per thread in the driver API).
* Stream: the arrays' stream (``__cuda_array_interface__["stream"]``, else PyTorch's
  current stream for torch tensors, else the legacy default stream); copies of NumPy
  arguments are asynchronous on it, and a call returns when that stream is done.
* Errors: a sticky error (illegal address, trap, launch failure...) is reported first;
  the dead context is reset (the next call gets a fresh one) and freeing the run's
  buffers does not mask it.
* Modules are unloaded when their ``CUDAModule`` is collected.
* ``time_evaluator``: the launches of one run are recorded once and replayed as a CUDA
  graph (no Python between the timed kernels); where graphs are unavailable the recorded
  launches are replayed directly (no host plan evaluation per run).
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import threading
import weakref
from typing import Any, Callable, Optional

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


def get_driver(ordinal: int = 0) -> "Driver":
    """The driver of device ``ordinal`` (its primary context current in this thread)."""
    ok, reason = device_status()
    if not ok:
        raise NoCUDADeviceError(reason)
    first: Driver = _STATE["driver"]
    if ordinal == first.ordinal:
        drv = first
    else:
        with _LOCK:
            drivers = _STATE.setdefault("drivers", {})
            drv = drivers.get(ordinal)
            if drv is None:
                drv = drivers[ordinal] = Driver(first.cu, ordinal)
    drv.make_current()
    return drv


#: Driver error codes after which the context is unusable (CUDA's "sticky" errors).
STICKY = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})


class Driver:
    """The primary CUDA context of one device, with loaded modules."""

    def __init__(self, cu: Any, ordinal: int = 0):
        self.cu = cu
        self.ordinal = ordinal
        self.generation = 0          # bumped when a sticky error resets the context
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
        if not 0 <= ordinal < count:
            raise CUDADriverError(f"CUDA device {ordinal} does not exist ({count} device(s))")
        self.device = self.check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = self.check(cu.cuDevicePrimaryCtxRetain(self.device),
                                  "cuDevicePrimaryCtxRetain")
        self.make_current()
        attr = cu.CUdevice_attribute
        major = self.check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device), "cuDeviceGetAttribute")
        minor = self.check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device), "cuDeviceGetAttribute")
        self.arch = f"sm_{major}{minor}"
        self.modules: dict[tuple, tuple[Any, dict[str, Any], int]] = {}  # key -> (mod, fns, refs)

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
            text = f"CUDA driver call {what} failed on device {self.ordinal}: {self._name(err)}"
            if int(err) in STICKY:
                self.reset()
                text += ("; this error leaves the CUDA context unusable, so it was reset "
                         "(its memory and modules are gone; the next call starts a fresh one)")
            raise CUDADriverError(text)
        if isinstance(result, tuple) and len(result) > 1:
            return result[1] if len(result) == 2 else result[1:]
        return None

    def make_current(self) -> None:
        """Make this device's context current in the calling thread (per-thread state)."""
        self.check(self.cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def reset(self) -> None:
        """After a sticky error: drop the modules, reset the primary context, retain a
        fresh one.  Buffers of the old context are not freed (they are gone)."""
        self.generation += 1
        self.modules.clear()
        cu = self.cu
        for call in (lambda: cu.cuDevicePrimaryCtxReset(self.device),
                     lambda: cu.cuDevicePrimaryCtxRetain(self.device)):
            try:
                result = call()
            except Exception:  # noqa: BLE001 - best effort: the original error is raised
                continue
            if isinstance(result, tuple) and len(result) > 1 and int(result[0]) == 0:
                self.context = result[1]
        try:
            cu.cuCtxSetCurrent(self.context)
        except Exception:  # noqa: BLE001
            pass

    def pointer_device(self, ptr: int) -> int:
        """The ordinal of the device holding ``ptr`` (unified addressing)."""
        attr = getattr(self.cu, "CUpointer_attribute", None)
        get = getattr(self.cu, "cuPointerGetAttribute", None)
        if attr is None or get is None:
            return self.ordinal
        try:
            result = get(attr.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        except Exception:  # noqa: BLE001 - not a CUDA pointer: judged by the launch
            return self.ordinal
        if int(result[0]) != 0:
            return self.ordinal
        return int(result[1])

    # ---- modules ------------------------------------------------------------------------
    def functions(self, module: Any) -> dict[str, Any]:
        """The CUfunction of each kernel of a CUDAModule (its image loaded once per
        context, unloaded when the last CUDAModule with that source is collected)."""
        key = (hashlib.sha256(module.source.encode()).hexdigest(), module.target.arch)
        loaded = getattr(module, "_tdsl_loaded", None)
        if loaded is None:
            loaded = set()
            try:
                module._tdsl_loaded = loaded
            except AttributeError:
                pass
        have = self.modules.get(key)
        if have is not None and (id(self), self.generation) in loaded:
            return have[1]
        if have is None:
            image = self._image(module)
            mod = self.check(self.cu.cuModuleLoadData(image), "cuModuleLoadData")
            funcs = {k.name: self.check(self.cu.cuModuleGetFunction(mod, k.name.encode()),
                                        f"cuModuleGetFunction({k.name})") for k in module.kernels}
            for k in module.kernels:
                self._opt_in_shared(funcs[k.name], k)
            have = (mod, funcs, 0)
        self.modules[key] = (have[0], have[1], have[2] + 1)
        loaded.add((id(self), self.generation))
        try:
            weakref.finalize(module, self._release_module, key, self.generation)
        except TypeError:
            pass
        return have[1]

    def _release_module(self, key: tuple, generation: int) -> None:
        if generation != self.generation:
            return                       # that context was reset: nothing to unload
        have = self.modules.get(key)
        if have is None:
            return
        if have[2] > 1:
            self.modules[key] = (have[0], have[1], have[2] - 1)
            return
        del self.modules[key]
        unload = getattr(self.cu, "cuModuleUnload", None)
        if unload is not None:
            try:
                self.cu.cuCtxSetCurrent(self.context)
                unload(have[0])
            except Exception:  # noqa: BLE001 - at garbage collection: never raise
                pass

    def _image(self, module: Any) -> bytes:
        want = nvrtc.arch_number(module.target.arch)
        have = nvrtc.arch_number(self.arch)
        if want > have:
            raise CUDADriverError(f"the module targets {module.target.arch} but the device is "
                                  f"{self.arch}; build with target='cuda -arch={self.arch}'")
        try:  # native code for this device: no driver-side PTX JIT (or PTX version limits)
            return nvrtc.compile_cuda(module.source, self.arch, "cubin")
        except NVRTCError as e:
            if "gpu-architecture" not in str(e) and "arch" not in str(e).lower():
                raise                     # the source does not compile: say so
            # this NVRTC is older than the device: PTX for the target, JIT-compiled by the driver
            return nvrtc.compile_cuda(module.source, module.target.arch, "ptx") + b"\0"

    # ---- memory and launches ----------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        return int(self.check(self.cu.cuMemAlloc(max(1, nbytes)), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        self.check(self.cu.cuMemFree(ptr), "cuMemFree")

    def htod(self, ptr: int, array: np.ndarray, stream: int = 0) -> None:
        if stream and hasattr(self.cu, "cuMemcpyHtoDAsync"):
            self.check(self.cu.cuMemcpyHtoDAsync(ptr, array.ctypes.data, array.nbytes, stream),
                       "cuMemcpyHtoDAsync")
            return
        self.check(self.cu.cuMemcpyHtoD(ptr, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")

    def dtoh(self, array: np.ndarray, ptr: int, stream: int = 0) -> None:
        if stream and hasattr(self.cu, "cuMemcpyDtoHAsync"):
            self.check(self.cu.cuMemcpyDtoHAsync(array.ctypes.data, ptr, array.nbytes, stream),
                       "cuMemcpyDtoHAsync")
            return
        self.check(self.cu.cuMemcpyDtoH(array.ctypes.data, ptr, array.nbytes), "cuMemcpyDtoH")

    def _opt_in_shared(self, function: Any, kernel: Any) -> None:
        """A kernel with dynamic shared memory above the 48 KiB default (the tensor-core
        GEMM's 64 KiB pipeline) may use it only once the function's
        ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` allows it."""
        nbytes = getattr(kernel, "dynamic_shared_bytes", 0)
        if nbytes > 48 * 1024:
            attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self.check(self.cu.cuFuncSetAttribute(function, attr, nbytes),
                       f"cuFuncSetAttribute({kernel.name}, max dynamic shared memory {nbytes})")

    def launch(self, function: Any, cfg: LaunchConfig, kinds: list[bool],
               stream: int = 0) -> None:
        """Launch with ``cfg.args``; ``kinds[i]`` is True for a pointer argument."""
        packed = pack_params(cfg.args, kinds)
        self.launch_packed(function, cfg.grid, cfg.block, packed, stream)

    def launch_packed(self, function: Any, grid: tuple, block: tuple, packed: tuple,
                      stream: int = 0, shared: int = 0) -> None:
        """``shared``: the bytes of dynamic shared memory (``extern __shared__``)."""
        self.check(self.cu.cuLaunchKernel(function, *grid, *block, shared, stream,
                                          ctypes.addressof(packed[0]), 0), "cuLaunchKernel")

    def synchronize(self, stream: int = 0) -> None:
        """Wait for ``stream`` (0: the whole context); a failed kernel is raised here."""
        if stream and hasattr(self.cu, "cuStreamSynchronize"):
            self.check(self.cu.cuStreamSynchronize(stream),
                       "cuStreamSynchronize (a kernel failed)")
            return
        self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")

    def event(self) -> Any:
        return self.check(self.cu.cuEventCreate(0), "cuEventCreate")

    def record(self, event: Any, stream: int = 0) -> None:
        self.check(self.cu.cuEventRecord(event, stream), "cuEventRecord")

    def elapsed_ms(self, start: Any, end: Any) -> float:
        self.check(self.cu.cuEventSynchronize(end), "cuEventSynchronize")
        return float(self.check(self.cu.cuEventElapsedTime(start, end), "cuEventElapsedTime"))

    def destroy(self, event: Any) -> None:
        self.check(self.cu.cuEventDestroy(event), "cuEventDestroy")


def pack_params(args: list, kinds: list[bool]) -> tuple:
    """cuLaunchKernel's ``kernelParams``: (array of pointers, the values they point to)."""
    holders = [ctypes.c_void_p(v) if is_ptr else ctypes.c_longlong(v)
               for v, is_ptr in zip(args, kinds)]
    slots = (ctypes.c_void_p * max(1, len(holders)))(*[ctypes.addressof(h) for h in holders])
    return (slots, holders)


class _Backend:
    """``host.execute`` on the device: intermediate buffers kept for the run's lifetime;
    with ``record`` set, each launch is also kept (function, sizes, packed parameters) so a
    timing loop can replay them without evaluating the host plan."""

    def __init__(self, drv: Driver, functions: dict[str, Any], stream: int = 0):
        self.drv = drv
        self.functions = functions
        self.stream = stream
        self.pool: dict[int, tuple[int, int]] = {}
        self.record: Optional[list] = None
        self.generation = drv.generation

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
        packed = pack_params(cfg.args, [p.buffer is not None for p in kernel.params])
        fn = self.functions[kernel.name]
        shared = kernel.dynamic_shared_bytes
        self.drv.launch_packed(fn, cfg.grid, cfg.block, packed, self.stream, shared)
        if self.record is not None:
            self.record.append((fn, cfg.grid, cfg.block, packed, shared))

    def release(self) -> None:
        if self.generation == self.drv.generation:   # else the context (and memory) is gone
            for ptr, _ in self.pool.values():
                try:
                    self.drv.free(ptr)
                except CUDADriverError:
                    break                 # a dead context: the error that killed it is raised
        self.pool.clear()


def _torch_stream(obj: Any) -> "int | None":
    """PyTorch's current stream on the tensor's device, for a torch CUDA tensor."""
    mod = type(obj).__module__ or ""
    if not mod.startswith("torch"):
        return None
    try:
        import torch
        return int(torch.cuda.current_stream(obj.device).cuda_stream)
    except Exception:  # noqa: BLE001 - not a usable torch tensor: the interface decides
        return None


def arrays_stream(arrays: tuple) -> int:
    """The stream the arrays' producer works on: ``__cuda_array_interface__["stream"]``
    (1 and 2 are the legacy and per-thread default streams, valid driver handles), else
    PyTorch's current stream for torch tensors, else 0 (the legacy default stream)."""
    for a in arrays:
        cai = getattr(a, "__cuda_array_interface__", None)
        if cai is None:
            continue
        stream = cai.get("stream") if isinstance(cai, dict) else None
        if stream:
            return int(stream)
        ts = _torch_stream(a)
        if ts is not None:
            return ts
    return 0


def arrays_device(probe: Driver, devs: list) -> int:
    """The device of the arguments' device arrays (all on one device), else device 0."""
    found = {probe.pointer_device(d.ptr) for d in devs if d is not None and d.ptr}
    if len(found) > 1:
        raise ShapeError(f"the CUDA array arguments live on different devices {sorted(found)}; "
                         f"copy them to one device")
    return found.pop() if found else probe.ordinal


class GPURun:
    """One set of checked arguments on the device: call it to run the kernels."""

    def __init__(self, drv: Driver, module: Any, arrays: tuple):
        from .module import bind_any
        arrs, self.sizes, devs = bind_any(module, arrays)
        drv = get_driver(arrays_device(drv, devs)) if any(d is not None for d in devs) else drv
        drv.make_current()
        self.drv = drv
        self.generation = drv.generation
        self.module = module
        self.stream = arrays_stream(arrays)
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
                    drv.htod(ptr, a, self.stream)
                    self.pointers[id(buf)] = ptr
            self.backend = _Backend(drv, drv.functions(module), self.stream)
        except BaseException:
            self.release()
            raise

    def __call__(self) -> None:
        self.drv.make_current()
        execute(self.module.plan, dict(self.sizes), dict(self.pointers), self.backend)

    def record(self) -> list:
        """Run once, keeping the launches (function, grid, block, packed parameters,
        dynamic shared bytes)."""
        self.backend.record = []
        try:
            self()
            return self.backend.record
        finally:
            self.backend.record = None

    def finish(self) -> None:
        """Wait for the stream (a failed kernel is raised here, before anything else) and
        copy written NumPy arguments back."""
        self.drv.make_current()
        self.drv.synchronize(self.stream)
        back = [(array, ptr) for array, ptr, written in self.copies if written]
        for array, ptr in back:
            self.drv.dtoh(array, ptr, self.stream)
        if back and self.stream:
            self.drv.synchronize(self.stream)   # the asynchronous copies have landed

    def release(self) -> None:
        """Free the run's buffers; after a sticky error (the context was reset) there is
        nothing to free, and a failing free never hides the error being raised."""
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.release()
        if self.generation == self.drv.generation:
            try:
                self.drv.make_current()
                for _, ptr, _ in self.copies:
                    self.drv.free(ptr)
            except CUDADriverError:
                pass
        self.copies = []


def _param_alignment(module: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    for k in module.kernels:
        for p in k.params:
            if p.buffer is not None and p.min_align > 1:
                out[id(p.buffer)] = max(out.get(id(p.buffer), 1), p.min_align)
    return out


def _graph_replay(drv: Driver, launches: list, number: int, stream: int, keep: list
                  ) -> "Callable[[], None] | None":
    """``number`` replays of ``launches`` captured into one CUDA graph on ``stream`` (a
    launch function; the graph objects are appended to ``keep`` for destruction), or None
    where graphs are unavailable (then the caller replays the launches itself)."""
    cu = drv.cu
    needed = ("cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphInstantiate",
              "cuGraphLaunch")
    if not stream or not all(hasattr(cu, n) for n in needed):
        return None
    try:
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        drv.check(cu.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
        try:
            for _ in range(number):
                for fn, grid, block, packed, shared in launches:
                    drv.launch_packed(fn, grid, block, packed, stream, shared)
        finally:
            graph = drv.check(cu.cuStreamEndCapture(stream), "cuStreamEndCapture")
        keep.append(("cuGraphDestroy", graph))
        exe = drv.check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        keep.append(("cuGraphExecDestroy", exe))
    except (CUDADriverError, AttributeError, TypeError):
        return None
    return lambda: drv.check(cu.cuGraphLaunch(exe, stream), "cuGraphLaunch")


def measure_events(drv: Driver, run: GPURun, number: int = 1, repeat: int = 1,
                   min_repeat_ms: float = 0) -> ProfileResult:
    """TVM's time_evaluator semantics (see ``tdsl.runtime.measure``), timed with CUDA events
    around ``number`` runs.  The launches of one run are recorded (after a warm-up, so the
    intermediate buffers exist) and replayed: as a CUDA graph where possible, so the timed
    region holds no Python, else launch by launch (no host plan per run)."""
    from tdsl.errors import BuildError
    if number < 1 or repeat < 1:
        raise BuildError(f"time_evaluator: number and repeat must be >= 1, got "
                         f"number={number}, repeat={repeat}")
    drv = run.drv
    drv.make_current()
    stream = run.stream
    own = None
    if not stream and hasattr(drv.cu, "cuStreamCreate"):
        try:   # graphs are captured on a stream of our own
            own = drv.check(drv.cu.cuStreamCreate(1), "cuStreamCreate")  # non-blocking
            stream = int(own) if isinstance(own, int) else own
        except (CUDADriverError, TypeError):
            own = None
    run.backend.stream = stream
    keep: list = []
    start, end = drv.event(), drv.event()
    try:
        run()
        drv.synchronize(stream)
        launches = run.record()
        drv.synchronize(stream)

        def replay_once() -> None:
            for fn, grid, block, packed, shared in launches:
                drv.launch_packed(fn, grid, block, packed, stream, shared)
        graphs: dict[int, Callable[[], None]] = {}
        results = []
        for _ in range(repeat):
            ms = 0.0
            while True:
                if ms > 0.0:
                    number = int(max(min_repeat_ms / (ms / number) + 1, number * 1.618))
                if number not in graphs:
                    g = _graph_replay(drv, launches, number, stream, keep)
                    graphs[number] = g if g is not None else \
                        (lambda n=number: [replay_once() for _ in range(n)] and None)
                timed = graphs[number]
                drv.record(start, stream)
                timed()
                drv.record(end, stream)
                ms = drv.elapsed_ms(start, end)
                if ms >= min_repeat_ms:
                    break
                ms = max(ms, 1e-6)
            results.append(ms / 1e3 / number)
        return ProfileResult(math.fsum(results) / len(results), tuple(results))
    finally:
        run.backend.stream = run.stream
        drv.destroy(start)
        drv.destroy(end)
        for name, obj in reversed(keep):
            try:
                getattr(drv.cu, name)(obj)
            except Exception:  # noqa: BLE001 - cleanup after timing
                pass
        if own is not None and hasattr(drv.cu, "cuStreamDestroy"):
            try:
                drv.cu.cuStreamDestroy(own)
            except Exception:  # noqa: BLE001
                pass
