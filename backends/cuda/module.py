"""``CUDAModule``: the built CUDA function.

Calling it runs the kernels on the GPU through the CUDA driver (``driver.py``);
without a driver or device that raises ``NoCUDADeviceError``.  ``emulate`` runs
the same source on the CPU under the emulation harness, with the same argument
checks.  ``get_source()`` is the CUDA C, ``get_source("ptx")`` NVRTC's PTX.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence


from tdsl.errors import BuildError, DTypeError
from tdsl.keywords import check_keywords
from tdsl.runtime import Module, ProfileResult
from tdsl.stmt import PrimFunc
from tdsl.target import Target

from . import emulator, nvrtc
from .kernels import KernelInfo


class CUDAModule(Module):
    """A CUDA build of a PrimFunc: host plan + kernels + their CUDA C source."""

    type_key = "cuda"

    def __init__(self, func: PrimFunc, target: Target, source: str, kernels: list[KernelInfo],
                 plan: Any):
        super().__init__(func, func.name)
        self.target = target
        self.source = source
        self.kernels = kernels
        self.plan = plan

    # ---- inspection ------------------------------------------------------------------------
    def get_source(self, fmt: str = "") -> str:
        """``""``/``"cuda"``/``"cu"``: the CUDA C; ``"ptx"``: PTX from NVRTC for the target's
        arch (``ptx(arch)`` picks another one)."""
        if fmt in ("", "cuda", "cu", "c"):
            return self.source
        if fmt == "ptx":
            return self.ptx()
        raise BuildError(f"get_source: unknown format {fmt!r}; use 'cuda' or 'ptx'")

    def ptx(self, arch: "str | None" = None) -> str:
        return nvrtc.compile_cuda(self.source, arch or self.target.arch, "ptx").decode()

    def cubin(self, arch: "str | None" = None) -> bytes:
        """The kernels assembled by NVRTC for one GPU architecture (``sm_80`` ...)."""
        return nvrtc.compile_cuda(self.source, arch or self.target.arch, "cubin")

    @property
    def kernel_names(self) -> list[str]:
        return [k.name for k in self.kernels]

    def launch_config(self, *arrays: Any) -> list[tuple[str, tuple, tuple]]:
        """(kernel, grid, block) of each launch a call on ``arrays`` makes (host-side only)."""
        from .host import launch_config
        arrs, sizes = self.bind(arrays)[:2]
        ptrs = {id(b): 0 for b in self.func.params}
        for k in self.kernels:
            for b in k.hoisted:
                ptrs[id(b)] = 0
        out = []
        for k in self.kernels:
            for p in k.params:
                if p.buffer is not None:
                    ptrs.setdefault(id(p.buffer), 0)
            cfg = launch_config(k, dict(sizes), ptrs)
            out.append((k.name, cfg.grid, cfg.block))
        return out

    # ---- running on the CPU ----------------------------------------------------------------------
    def emulate(self, *arrays: Any, source: "str | None" = None, check_races: bool = True) -> None:
        """Run the kernels on the CPU under the emulation harness, writing outputs in place.

        ``arrays`` are NumPy arrays (or CPU DLPack tensors), checked exactly as for a call.
        ``source`` emulates another CUDA text with the same kernels and signatures (e.g. an
        edited ``get_source()``).  Raises ``SharedMemoryRaceError`` when two threads of a block
        touch one shared location between barriers, ``GlobalMemoryRaceError`` when two blocks
        of a launch (or two threads of a block between barriers) touch one global location,
        one of them writing, and ``EmulationError`` for other kernel bugs (out-of-bounds
        indices, a result that differs when the blocks run in reverse order, ...).
        ``check_races=False`` turns the shadow tracking and the second block order off.
        """
        for i, a in enumerate(arrays):
            if hasattr(a, "__cuda_array_interface__"):
                raise DTypeError(f"emulate: argument {i} is a CUDA device array; the emulator runs "
                                 f"on the CPU, so pass a NumPy array (e.g. cupy.asnumpy(x) or "
                                 f"x.cpu().numpy())")
        arrs, sizes = self.bind(arrays)[:2]
        emulator.run(self.plan, self.kernels, self.source if source is None else source,
                     self.func.params, arrs, sizes, check_races)

    def emulate_bank_use(self, *arrays: Any,
                         source: "str | None" = None) -> "dict[str, emulator.BankUse]":
        """Emulate the kernels on ``arrays`` (as ``emulate``, without race tracking) and return
        the shared-memory bank use of the tensor-core primitives' accesses -- ``ldmatrix``,
        ``ldmatrix.trans``, the 16-byte ``cp.async`` tile fills and the element-wise tile
        stores (``st.shared``: gathered tiles, tails) -- judged from the
        addresses the kernels computed (the static report's IR walk cannot see into the
        tensor-core templates).  Kinds no kernel made are absent.  ``source``: as for
        ``emulate``."""
        arrs, sizes = self.bind(arrays)[:2]
        return emulator.bank_use(self.plan, self.kernels, self.source if source is None else
                                 source, self.func.params, arrs, sizes)

    # ---- running on the GPU ------------------------------------------------------------------------
    def __call__(self, *arrays: Any) -> None:
        from .driver import GPURun, get_driver
        drv = get_driver()
        run = GPURun(drv, self, arrays)
        try:
            run()
            run.finish()
        finally:
            run.release()

    def _launcher(self, *args: Any) -> Callable[[], None]:
        raise BuildError("CUDAModule runs through __call__/time_evaluator (device arrays need "
                         "the driver)")

    def sync(self) -> None:
        from .driver import get_driver
        get_driver().synchronize()   # the whole context of device 0, current in this thread

    @check_keywords
    def time_evaluator(self, func_name: "str | None" = None, dev: Any = None, number: int = 1,
                       repeat: int = 1, min_repeat_ms: float = 0) -> Callable[..., ProfileResult]:
        """A function timing the kernels on the GPU with CUDA events (seconds per run).

        Arguments are checked and copied to the device once; only the launches are timed.
        """
        if func_name is not None:
            self.get_function(func_name)

        def evaluator(*arrays: Any) -> ProfileResult:
            from .driver import GPURun, get_driver, measure_events
            drv = get_driver()
            run = GPURun(drv, self, arrays)
            try:
                result = measure_events(drv, run, number, repeat, min_repeat_ms)
                run.finish()
                return result
            finally:
                run.release()
        return evaluator

    @check_keywords
    def export_library(self, path: str, cc: str = "gcc",
                       options: "list[str] | None" = None) -> None:
        raise BuildError("export_library is not available for CUDA modules yet; save "
                         "get_source() or get_source('ptx') instead")

    def __repr__(self) -> str:
        return f"<CUDAModule '{self.entry_name}' kernels={self.kernel_names} {self.target}>"


def bind_any(module: CUDAModule, arrays: Sequence[Any]) -> tuple[list, dict, list]:
    """Check arguments that may be CUDA device arrays: returns (checked arrays, sizes,
    per-argument DeviceArray or None)."""
    from tdsl.runtime.device_arrays import as_device_array
    devs = [as_device_array(a) for a in arrays]
    shadows = [d.shadow() if d is not None else a for a, d in zip(arrays, devs)]
    arrs, sizes = module.bind(shadows)[:2]
    return arrs, sizes, devs
