"""Compiling CUDA C with NVRTC (through cuda-python's raw ``cuda.bindings.nvrtc`` calls).

NVRTC comes from PyPI's ``nvidia-cuda-nvrtc-cu12`` wheel (or CUDA 13's
``nvidia-cuda-nvrtc`` with cuda-bindings 13: the calls used are the same) and needs no
GPU and no driver.  ``compile_cuda`` returns PTX (``--gpu-architecture=compute_XX``) or a CUBIN
(``sm_XX``, assembled by NVRTC itself); results are cached per process by source,
architecture and format.
"""
from __future__ import annotations

import functools
import re
from typing import Any

from .errors import NVRTCError

_OPTIONS = ("--std=c++17",)
#: NVRTC 12.9+ caches compilations through the driver's compute cache: a cached compile
#: prints no ptxas ``-v`` report (the static checks then lack the kernel's registers and
#: spills) and loads the driver library libcuda during a build.  tdsl caches builds itself.
_NO_CACHE_SINCE = (12, 9)


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # type: ignore[no-redef]  # cuda-python < 12.6
        except ImportError:
            raise NVRTCError("NVRTC is not installed: install tdsl's CUDA extra "
                             "(pip install 'cuda-python>=12,<13' nvidia-cuda-nvrtc-cu12; or "
                             "cuda-bindings 13 with nvidia-cuda-nvrtc) to compile CUDA kernels "
                             "to PTX") from None
    _load_library()
    return nvrtc


@functools.lru_cache(maxsize=1)
def _load_library() -> None:
    """Make libnvrtc loadable.  cuda-python looks for the wheel's library under the running
    environment's site-packages; when the wheel sits on another path (a ``.pth`` entry, a
    shared environment) it is not found, so load it from the wheel's folder first
    (cuda-python then uses the library already loaded): ``nvidia/cuda_nvrtc/lib`` for the
    CUDA 12 wheel (``nvidia-cuda-nvrtc-cu12``), ``nvidia/cu13/lib`` for CUDA 13's.  A failure
    here leaves the error to the first NVRTC call, which ``_call`` reports as an
    NVRTCError."""
    import ctypes
    import glob
    import os
    try:
        import nvidia  # type: ignore[import-not-found]  # the wheels' namespace package
    except ImportError:
        return
    for root in getattr(nvidia, "__path__", []):
        for sub in ("cuda_nvrtc", "cu13"):
            folder = os.path.join(root, sub, "lib")
            # the builtins first: CUDA 13's libnvrtc does not look beside itself for them
            for lib in sorted(glob.glob(os.path.join(folder, "libnvrtc-builtins.so.*"))):
                try:
                    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    pass
            for lib in sorted(glob.glob(os.path.join(folder, "libnvrtc.so.*"))):
                if ".alt." in lib:
                    continue
                try:
                    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                    return
                except OSError:
                    continue


def _check(result: Any, what: str) -> Any:
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise NVRTCError(f"NVRTC {what} failed: {err!r}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


def arch_number(arch: str) -> int:
    m = re.fullmatch(r"(?:sm|compute)_(\d+)[a-z]?", arch)
    if not m:
        raise NVRTCError(f"unknown GPU architecture {arch!r}; use e.g. sm_80 or sm_90")
    return int(m.group(1))


def version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    nv = _nvrtc()
    try:
        result = nv.nvrtcVersion()
    except (RuntimeError, OSError) as e:   # the library cannot be found or loaded
        raise NVRTCError(f"NVRTC cannot be loaded: {e}") from None
    return tuple(_check(result, "version"))  # type: ignore[return-value]


def compile_cuda(source: str, arch: str = "sm_80", fmt: str = "ptx",
                 name: str = "tdsl_kernels.cu") -> bytes:
    """Compile ``source`` for ``arch``; ``fmt`` is "ptx" or "cubin". Raises NVRTCError with
    the compiler log when the source does not compile."""
    return _compile(source, arch, fmt, name)[0]


def compile_log(source: str, arch: str, name: str = "tdsl_kernels.cu") -> str:
    """The log of assembling ``source`` into a cubin for ``arch``: ptxas runs with ``-v``,
    so it holds each kernel's registers, stack frame and spill bytes (shared with the
    cubin ``compile_cuda`` returns: one compilation for both)."""
    return _compile(source, arch, "cubin", name)[1]


@functools.lru_cache(maxsize=128)
def _compile(source: str, arch: str, fmt: str, name: str) -> tuple[bytes, str]:
    if fmt not in ("ptx", "cubin"):
        raise NVRTCError(f"unknown output format {fmt!r}: use 'ptx' or 'cubin'")
    nv = _nvrtc()
    ver = version()   # a missing library is an NVRTCError here, not a loader exception below
    number = arch_number(arch)
    gpu = f"compute_{number}" if fmt == "ptx" else f"sm_{number}"
    prog = _check(nv.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={gpu}".encode()] + [o.encode() for o in _OPTIONS]
        if ver >= _NO_CACHE_SINCE:
            opts.append(b"--no-cache")
        if fmt == "cubin":      # -v: the spill counts (not in the cubin's attributes)
            opts.append(b"--ptxas-options=-v")
        result = nv.nvrtcCompileProgram(prog, len(opts), opts)
        err = result[0] if isinstance(result, tuple) else result
        size = _check(nv.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = _out_buffer(size)
        nv.nvrtcGetProgramLog(prog, log)
        text = bytes(log).rstrip(b"\0").decode(errors="replace")
        if int(err) != 0:
            raise NVRTCError(f"NVRTC could not compile the generated CUDA source for {gpu}:\n"
                             f"{text.strip()}")
        if fmt == "ptx":
            size = _check(nv.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            out = _out_buffer(size)
            _check(nv.nvrtcGetPTX(prog, out), "nvrtcGetPTX")
        else:
            size = _check(nv.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            out = _out_buffer(size)
            _check(nv.nvrtcGetCUBIN(prog, out), "nvrtcGetCUBIN")
        return (bytes(out).rstrip(b"\0") if fmt == "ptx" else bytes(out)), text
    finally:
        nv.nvrtcDestroyProgram(prog)


def _out_buffer(size: int) -> bytearray:
    """A fresh writable buffer for NVRTC to fill.  Never ``b" " * size``: NVRTC writes into
    the object it is given, and a one-byte bytes object is CPython's shared singleton, so an
    empty log (size 1) once overwrote every ``b" "`` of the process with NUL (and, on a GPU
    machine's Python 3.12, spaces in unrelated strings: torch's import then failed)."""
    return bytearray(size)


def is_available() -> bool:
    try:
        _nvrtc()
        version()
        return True
    except (NVRTCError, RuntimeError, OSError):  # the library is missing or cannot load
        return False
