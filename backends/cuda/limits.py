"""The GPU's resource limits, one named check per limit.

A kernel that breaks one of these compiles (NVRTC emits PTX for it) and runs under the
CPU emulator, but the driver refuses to load or launch it on every GPU of the arch.
So they are checked before anything runs: at build where the figures are constants
(block and grid sizes of constant extent, shared and local arrays, the registers ptxas
gave each thread), and on the host at launch where they depend on symbolic sizes.
The limits themselves are data: ``tdsl.target.GPUArch``.  Build-time checks raise
``BuildError``, launch-time checks ``ShapeError``; each names the kernel, the limit
and the figures.
"""
from __future__ import annotations

from typing import Optional, Sequence

from tdsl.errors import BuildError, ShapeError
from tdsl.target import GPUArch

_XYZ = "xyz"


def check_block_dims(kernel: str, dims: Sequence[Optional[int]], gpu: GPUArch) -> None:
    """Each constant block dimension within its limit (x, y <= 1024, z <= 64)."""
    for d, (v, lim) in enumerate(zip(dims, gpu.max_block_dim)):
        if v is not None and v > lim:
            raise BuildError(f"CUDA kernel '{kernel}': threadIdx.{_XYZ[d]} is bound to a loop of "
                             f"extent {v}, over CUDA's limit of {lim} for blockDim.{_XYZ[d]}; "
                             f"split it further")


def check_threads_per_block(kernel: str, dims: Sequence[Optional[int]], gpu: GPUArch) -> None:
    """The product of constant block dimensions within the threads a block may have."""
    if all(v is not None for v in dims):
        total = dims[0] * dims[1] * dims[2]  # type: ignore[operator]
        if total > gpu.max_threads_per_block:
            raise BuildError(f"CUDA kernel '{kernel}' has {dims[0]}x{dims[1]}x{dims[2]} = {total} "
                             f"threads per block, over the limit of {gpu.max_threads_per_block}; "
                             f"bind smaller loops to threadIdx.x/y/z")


def check_grid_dims(kernel: str, dims: Sequence[Optional[int]], gpu: GPUArch) -> None:
    """Each constant grid dimension within its limit (x < 2^31, y, z <= 65535)."""
    for d, (v, lim) in enumerate(zip(dims, gpu.max_grid_dim)):
        if v is not None and v > lim:
            raise BuildError(f"CUDA kernel '{kernel}': blockIdx.{_XYZ[d]} is bound to a loop of "
                             f"extent {v}, over CUDA's limit of {lim} for gridDim.{_XYZ[d]}; bind "
                             f"a larger tile to blockIdx.{_XYZ[d]} or use another block axis")


def max_threads(bounds: Sequence[Optional[int]], gpu: GPUArch) -> int:
    """The most threads a block of the kernel can have: each dimension at its proven upper
    bound (None: unknown, the device limit), the product capped by the device limit.
    This is the kernel's ``__launch_bounds__``, so ptxas fits its registers to it."""
    total = 1
    for v, lim in zip(bounds, gpu.max_block_dim):
        total *= lim if v is None else max(1, min(v, lim))
    return min(total, gpu.max_threads_per_block)


def check_shared_memory(kernel: str, nbytes: int, detail: str, gpu: GPUArch) -> None:
    """Static shared memory within 48 KiB.  tdsl declares shared arrays statically, and a
    static ``__shared__`` declaration cannot use the opt-in (dynamic) range above it."""
    if nbytes > gpu.static_shared_bytes:
        optin = (f"; sm_{gpu.sm} allows up to {gpu.max_shared_bytes_optin} bytes only as opt-in "
                 f"dynamic shared memory, which tdsl emits only for its tensor-core GEMM"
                 if gpu.max_shared_bytes_optin > gpu.static_shared_bytes else "")
        raise BuildError(f"CUDA kernel '{kernel}' uses {nbytes} bytes of shared memory ({detail}), "
                         f"over the {gpu.static_shared_bytes} bytes of static shared memory a block "
                         f"may have on sm_{gpu.sm}{optin}; use smaller tiles")


def check_dynamic_shared_memory(kernel: str, nbytes: int, gpu: GPUArch) -> None:
    """Static plus dynamic shared memory within the arch's opt-in maximum per block (the
    launcher sets ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` above 48 KiB)."""
    if nbytes > gpu.max_shared_bytes_optin:
        raise BuildError(f"CUDA kernel '{kernel}' uses {nbytes} bytes of shared memory, over the "
                         f"{gpu.max_shared_bytes_optin} bytes a block may have on sm_{gpu.sm} "
                         f"(with the opt-in for dynamic shared memory)")


def check_local_memory(kernel: str, nbytes: int, detail: str, gpu: GPUArch) -> None:
    """Per-thread (local) arrays within CUDA's 512 KiB of local memory per thread."""
    if nbytes > gpu.max_local_bytes_per_thread:
        raise BuildError(f"CUDA kernel '{kernel}' needs {nbytes} bytes of local memory per thread "
                         f"({detail}), over CUDA's limit of {gpu.max_local_bytes_per_thread} bytes "
                         f"per thread; compute_at the stage at a deeper loop so each thread keeps "
                         f"a smaller tile")


def check_registers(kernel: str, registers: int, threads: int, gpu: GPUArch) -> None:
    """Registers per thread (from the cubin) x the most threads per block within the
    register file a block may use; a launch over it fails with LAUNCH_OUT_OF_RESOURCES."""
    if registers * threads > gpu.registers_per_block:
        raise BuildError(f"CUDA kernel '{kernel}': ptxas gave it {registers} registers per thread; "
                         f"x {threads} threads per block = {registers * threads} registers, over the "
                         f"{gpu.registers_per_block} a block may use on sm_{gpu.sm}, so every launch "
                         f"would fail; bind fewer threads or keep smaller per-thread tiles")


def check_launch(kernel: str, grid: Sequence[int], block: Sequence[int], launch_bound: int,
                 gpu: GPUArch) -> None:
    """The evaluated launch sizes of one call within the per-dimension limits, and the
    threads per block within the kernel's ``__launch_bounds__``."""
    for d, (g, lim) in enumerate(zip(grid, gpu.max_grid_dim)):
        if g > lim:
            raise ShapeError(f"kernel '{kernel}' needs gridDim.{_XYZ[d]} = {g} blocks, over "
                             f"CUDA's limit of {lim}; bind a larger tile to blockIdx.{_XYZ[d]} or "
                             f"use another block axis")
    for d, (b, lim) in enumerate(zip(block, gpu.max_block_dim)):
        if b > lim:
            raise ShapeError(f"kernel '{kernel}' needs blockDim.{_XYZ[d]} = {b} threads, over "
                             f"CUDA's limit of {lim} for blockDim.{_XYZ[d]}; split the loop bound "
                             f"to threadIdx.{_XYZ[d]} by a constant factor")
    threads = block[0] * block[1] * block[2]
    if threads > launch_bound:
        limit = ("CUDA allows at most" if launch_bound >= gpu.max_threads_per_block else
                 "the kernel was compiled with __launch_bounds__ of")
        raise ShapeError(f"kernel '{kernel}' launches {block[0]}x{block[1]}x{block[2]} = "
                         f"{threads} threads per block; {limit} {launch_bound}")
