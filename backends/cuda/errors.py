"""Errors of the CUDA backend (all ``tdsl.TDSLError``s)."""
from __future__ import annotations

from tdsl.errors import TDSLError


class NoCUDADeviceError(TDSLError, RuntimeError):
    """Running on the GPU was asked for, but no CUDA driver or device is usable here.

    Building and inspecting (``get_source``) still work; ``emulate`` runs the same
    kernels on the CPU.
    """


class CUDADriverError(TDSLError, RuntimeError):
    """A CUDA driver call failed (out of memory, launch failure, bad image...)."""


class NVRTCError(TDSLError, RuntimeError):
    """NVRTC is missing or rejected the generated source (the log is in the message)."""


class EmulationError(TDSLError, RuntimeError):
    """The CPU emulation of a kernel found a bug: a divergent or missing barrier, an
    out-of-bounds shared-memory access, a read of uninitialized shared memory, a trap."""


class SharedMemoryRaceError(EmulationError):
    """Two threads of a block touched one shared-memory location between two barriers,
    at least one of them writing.

    ``buffer`` is the shared array, ``offset`` the element, ``kind`` one of
    ``"read-after-write"``, ``"write-after-read"``, ``"write-after-write"``;
    ``first``/``second`` are the two threads (``threadIdx`` as (x, y, z), or a warp for
    warp-collective operations) in the order they touched it, ``block`` the ``blockIdx``.
    """

    def __init__(self, message: str, *, buffer: str, offset: int, kind: str,
                 first: tuple, second: tuple, block: tuple, kernel: str):
        super().__init__(message)
        self.buffer = buffer
        self.offset = offset
        self.kind = kind
        self.first = first
        self.second = second
        self.block = block
        self.kernel = kernel


class GlobalMemoryRaceError(EmulationError):
    """One global-memory location touched, at least once writing, by two blocks of one
    launch (blocks run in no fixed order and cannot wait for each other) or by two threads
    of a block between two barriers.

    ``buffer`` is the kernel parameter, ``offset`` the byte offset, ``kind`` as for
    ``SharedMemoryRaceError``; ``first``/``second`` are (blockIdx, thread) pairs in the
    order the emulator saw them.
    """

    def __init__(self, message: str, *, buffer: str, offset: int, kind: str,
                 first: tuple, second: tuple, kernel: str):
        super().__init__(message)
        self.buffer = buffer
        self.offset = offset
        self.kind = kind
        self.first = first
        self.second = second
        self.kernel = kernel
