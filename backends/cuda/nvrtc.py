"""Compiling CUDA C with NVRTC (through cuda-python's raw ``cuda.bindings.nvrtc`` calls).

NVRTC comes from PyPI's ``nvidia-cuda-nvrtc-cu12`` wheel and needs no GPU and no
driver.  ``compile_cuda`` returns PTX (``--gpu-architecture=compute_XX``) or a CUBIN
(``sm_XX``, assembled by NVRTC itself); results are cached per process by source,
architecture and format.
"""
from __future__ import annotations

import functools
import re
from typing import Any

from .errors import NVRTCError

_OPTIONS = ("--std=c++17",)


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # type: ignore[no-redef]  # cuda-python < 12.6
        except ImportError:
            raise NVRTCError("NVRTC is not installed: install tdsl's CUDA extra "
                             "(pip install 'cuda-python>=12,<13' nvidia-cuda-nvrtc-cu12) to "
                             "compile CUDA kernels to PTX") from None
    _load_library()
    return nvrtc


@functools.lru_cache(maxsize=1)
def _load_library() -> None:
    """Make libnvrtc loadable.  cuda-python looks for the wheel's library under the running
    environment's site-packages; when the wheel sits on another path (a ``.pth`` entry, a
    shared environment) it is not found, so load it from the ``nvidia.cuda_nvrtc`` package
    first (cuda-python then uses the library already loaded).  A failure here leaves the
    error to the first NVRTC call, which ``_call`` reports as an NVRTCError."""
    import ctypes
    import glob
    import os
    try:
        import nvidia.cuda_nvrtc as pkg  # type: ignore[import-not-found]
    except ImportError:
        return
    for root in getattr(pkg, "__path__", []):
        for lib in sorted(glob.glob(os.path.join(root, "lib", "libnvrtc.so.*"))):
            if ".alt." in lib or "builtins" in lib:
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


@functools.lru_cache(maxsize=128)
def compile_cuda(source: str, arch: str = "sm_80", fmt: str = "ptx",
                 name: str = "tdsl_kernels.cu") -> bytes:
    """Compile ``source`` for ``arch``; ``fmt`` is "ptx" or "cubin". Raises NVRTCError with
    the compiler log when the source does not compile."""
    if fmt not in ("ptx", "cubin"):
        raise NVRTCError(f"unknown output format {fmt!r}: use 'ptx' or 'cubin'")
    nv = _nvrtc()
    version()   # a missing library is an NVRTCError here, not a loader exception below
    number = arch_number(arch)
    gpu = f"compute_{number}" if fmt == "ptx" else f"sm_{number}"
    prog = _check(nv.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={gpu}".encode()] + [o.encode() for o in _OPTIONS]
        result = nv.nvrtcCompileProgram(prog, len(opts), opts)
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            size = _check(nv.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            nv.nvrtcGetProgramLog(prog, log)
            raise NVRTCError(f"NVRTC could not compile the generated CUDA source for {gpu}:\n"
                             f"{log.decode(errors='replace').strip()}")
        if fmt == "ptx":
            size = _check(nv.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            out = b" " * size
            _check(nv.nvrtcGetPTX(prog, out), "nvrtcGetPTX")
        else:
            size = _check(nv.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            out = b" " * size
            _check(nv.nvrtcGetCUBIN(prog, out), "nvrtcGetCUBIN")
        return out.rstrip(b"\0") if fmt == "ptx" else out
    finally:
        nv.nvrtcDestroyProgram(prog)


def is_available() -> bool:
    try:
        _nvrtc()
        version()
        return True
    except (NVRTCError, RuntimeError, OSError):  # the library is missing or cannot load
        return False
