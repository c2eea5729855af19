"""NVRTC through cuda-python: the buffers it fills and the ptxas report it gives."""
import subprocess
import sys

import pytest

from tdsl.backends.cuda import nvrtc

needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC is not installed")

KERNEL = 'extern "C" __global__ void k(float* a) { a[0] = 1.0f; }'


@needs_nvrtc
def test_an_empty_log_leaves_the_shared_one_byte_objects_alone() -> None:
    """NVRTC writes into the buffer it is given; ``b" " * 1`` is CPython's shared b" ", so
    an empty log (one NUL) once turned every b" " of the process into b"\\0"."""
    code = ("import sys, tdsl.backends.cuda\n"
            "nv = sys.modules['tdsl.backends.cuda.nvrtc']\n"
            f"nv.compile_cuda({KERNEL!r}, 'sm_80', 'ptx')\n"
            "print(b' '[0], bytes([32])[0], ord(' '))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["32", "32", "32"]


@needs_nvrtc
def test_every_compile_reports_its_kernels_to_ptxas_v() -> None:
    """The same source assembled twice still names its kernel in the log (NVRTC 12.9+ would
    serve the second from its cache, silently, without the report)."""
    for _ in range(2):
        nvrtc._compile.cache_clear()
        assert "Compiling entry function 'k'" in nvrtc.compile_log(KERNEL, "sm_80")
