"""The CUDA backend: lowered IR to CUDA C, NVRTC to PTX, the CUDA driver to run it,
and a CPU emulation harness to verify kernels where no GPU is present.

``build(func, target)`` checks the GPU legality of the lowered function (block and
grid sizes, shared and local memory, unbound stages, barriers under divergent
conditions; ``limits.py``), splits it into host code and kernels, and renders the
CUDA C.  Where NVRTC is installed it also assembles the source for the target's arch
and checks the registers ptxas gave each kernel against the register file (so a
source NVRTC rejects fails at build).  Nothing here needs a GPU or a driver.
"""
from __future__ import annotations

from tdsl.errors import BuildError
from tdsl.stmt import PrimFunc
from tdsl.target import Target, TargetKind, as_target

from . import nvrtc
from .codegen import generate
from .cubin import check_assembled
from .errors import (CUDADriverError, EmulationError, NoCUDADeviceError, NVRTCError,
                     GlobalMemoryRaceError, SharedMemoryRaceError)
from .kernels import split_kernels
from .module import CUDAModule

__all__ = ["build", "CUDAModule", "NoCUDADeviceError", "CUDADriverError", "NVRTCError",
           "EmulationError", "SharedMemoryRaceError", "GlobalMemoryRaceError", "has_device", "wmma_intrin"]


def build(func: PrimFunc, target: "Target | str" = "cuda") -> CUDAModule:
    """Compile a lowered function for an NVIDIA GPU (CUDA C; PTX on demand)."""
    tgt = as_target(target)
    if tgt.kind is not TargetKind.CUDA:
        raise BuildError(f"tdsl.backends.cuda.build: target {tgt} is not a CUDA target")
    if not isinstance(func, PrimFunc):
        raise BuildError(f"tdsl.backends.cuda.build: expected a lowered PrimFunc, got "
                         f"{type(func).__name__}")
    plan, kernels = split_kernels(func, tgt)
    source = generate(kernels, tgt)
    if nvrtc.is_available():   # registers per thread are known only once ptxas has run
        check_assembled(kernels, source, tgt)
    return CUDAModule(func, tgt, source, kernels, plan)


def has_device() -> bool:
    """True if a CUDA driver and at least one device are usable in this process."""
    from .driver import device_status
    return device_status()[0]


def wmma_intrin():  # noqa: ANN201 - re-exported lazily to keep imports light
    """The 16x16x16 fp16 x fp16 + fp32 tensor-core intrinsic (see ``wmma.py``)."""
    from .wmma import wmma_m16n16k16
    return wmma_m16n16k16()
