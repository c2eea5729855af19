"""The GPU runtime (``driver.py``) without a GPU: a stand-in for cuda-python's driver module
keeps "device" memory in host buffers and runs each ``cuLaunchKernel`` through the CPU
emulation harness.  This checks everything the runtime does on the host side (argument
checks, copies in and out, kernel-parameter packing, launch sizes, intermediate
buffers, device arrays, event timing); the real GPU path is covered by the skipped
GPU tests where a device exists."""
from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.cuda import driver, emulator, nvrtc
from tdsl.errors import ShapeError

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed (emulation)"),
    pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC is not installed"),
]


class FakeCU:
    """The subset of ``cuda.bindings.driver`` the runtime calls, on host memory."""

    class CUdevice_attribute:
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = "major"
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = "minor"

    def __init__(self) -> None:
        self.memory: dict[int, np.ndarray] = {}
        self.kernels: dict[str, tuple] = {}   # name -> (emulation library, KernelInfo)
        self.launches: list[tuple] = []
        self.images: list[bytes] = []
        self.events: dict[int, float] = {}

    def register(self, module) -> None:
        lib = emulator.load(module.source, module.kernels)
        for k in module.kernels:
            self.kernels[k.name] = (lib, k)

    def cuInit(self, flags): return (0,)
    def cuDeviceGetCount(self): return (0, 1)
    def cuDeviceGet(self, i): return (0, i)
    def cuDevicePrimaryCtxRetain(self, dev): return (0, "ctx")
    def cuCtxSetCurrent(self, ctx): return (0,)
    def cuCtxSynchronize(self): return (0,)
    def cuGetErrorString(self, err): return (0, b"fake error")

    def cuDeviceGetAttribute(self, attr, dev):
        return (0, 8 if attr == "major" else 0)

    def cuModuleLoadData(self, image):
        self.images.append(bytes(image))
        return (0, "module")

    def cuModuleGetFunction(self, mod, name):
        return (0, name.decode())

    def cuMemAlloc(self, nbytes):
        raw = np.full(nbytes + 256, 0xFF, np.uint8)
        ptr = raw.ctypes.data + (-raw.ctypes.data) % 256
        self.memory[ptr] = raw
        return (0, ptr)

    def cuMemFree(self, ptr):
        del self.memory[int(ptr)]
        return (0,)

    def cuMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        return (0,)

    def cuMemcpyDtoH(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        return (0,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        lib, k = self.kernels[f]
        slots = (ctypes.c_void_p * len(k.params)).from_address(params)
        args = (ctypes.c_void_p * max(1, len(k.params)))()
        for i, p in enumerate(k.params):
            value = ctypes.c_int64.from_address(slots[i]).value
            args[i] = value if p.buffer is not None else slots[i]
        self.launches.append((f, (gx, gy, gz), (bx, by, bz)))
        dims = (ctypes.c_longlong * 7)(gx, gy, gz, bx, by, bz, 256 * 1024)
        msg = ctypes.create_string_buffer(4096)
        sizes = (ctypes.c_longlong * max(1, len(k.params)))(*([-1] * max(1, len(k.params))))
        rc = getattr(lib, f"tdsl_emu_{f}")(dims, args, sizes, 3, msg, 4096)
        assert rc == 0, msg.value
        return (0,)

    def cuEventCreate(self, flags):
        e = len(self.events) + 1
        self.events[e] = 0.0
        return (0, e)

    def cuEventRecord(self, e, stream):
        self.events[e] = len(self.launches) * 1e-3     # a clock of 1 ms per kernel launched
        return (0,)

    def cuEventSynchronize(self, e): return (0,)
    def cuEventDestroy(self, e): return (0,)

    def cuEventElapsedTime(self, a, b):
        return (0, (self.events[b] - self.events[a]) * 1e3)


@pytest.fixture
def fake(monkeypatch):
    cu = FakeCU()
    drv = driver.Driver(cu)
    monkeypatch.setattr(driver, "_STATE", {"driver": drv})
    return cu


class FakeDeviceArray:
    """A CUDA-array-interface object over FakeCU memory (a torch/cupy stand-in)."""

    def __init__(self, cu: FakeCU, host: np.ndarray, readonly: bool = False):
        _, self.ptr = cu.cuMemAlloc(host.nbytes)
        cu.cuMemcpyHtoD(self.ptr, host.ctypes.data, host.nbytes)
        self.shape, self.dtype = host.shape, host.dtype
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str,
                                         "data": (self.ptr, readonly), "strides": None,
                                         "version": 3}

    def get(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        ctypes.memmove(out.ctypes.data, self.ptr, out.nbytes)
        return out


def two_kernels():
    n = td.var("n")
    A = td.placeholder((n, 64), name="A")
    B = td.compute((n, 64), lambda i, j: A[i, j] * 2.0, name="B")
    D = td.compute((n, 64), lambda i, j: B[i, j] + 1.0, name="D")
    s = td.create_schedule(D.op)
    for st in (B, D):
        i, j = s[st].op.axis
        s[st].bind(i, td.thread_axis("blockIdx.x"))
        s[st].bind(j, td.thread_axis("threadIdx.x"))
    return td.build(s, [A, D], target="cuda")


def test_numpy_arguments_are_copied_in_and_out(fake) -> None:
    from tests.backends.test_cuda_schedules import workload
    w = workload("tiled_matmul")
    fake.register(w.module)
    arrays = w.inputs(np.random.default_rng(0))
    w.module(*arrays)
    np.testing.assert_allclose(arrays[-1], w.reference(arrays), rtol=1e-5, atol=1e-5)
    assert fake.launches == [(w.module.kernel_names[0], (3, 3, 1), (8, 8, 1))]
    assert fake.images and fake.images[0][:4] == b"\x7fELF"   # an sm_80 CUBIN from NVRTC
    assert not fake.memory   # every device buffer was freed


def test_intermediate_buffers_and_two_launches(fake) -> None:
    f = two_kernels()
    fake.register(f)
    a = np.random.default_rng(1).random((6, 64)).astype("float32")
    d = np.empty_like(a)
    f(a, d)
    np.testing.assert_allclose(d, a * 2 + 1, rtol=1e-6)
    assert [x[0] for x in fake.launches] == f.kernel_names
    assert not fake.memory


def test_device_arrays_are_used_in_place(fake) -> None:
    f = two_kernels()
    fake.register(f)
    a = np.random.default_rng(2).random((3, 64)).astype("float32")
    da, dd = FakeDeviceArray(fake, a), FakeDeviceArray(fake, np.zeros_like(a))
    f(da, dd)
    np.testing.assert_allclose(dd.get(), a * 2 + 1, rtol=1e-6)
    with pytest.raises(ShapeError, match="read-only"):
        f(da, FakeDeviceArray(fake, np.zeros_like(a), readonly=True))
    with pytest.raises(ShapeError, match="n"):
        f(da, FakeDeviceArray(fake, np.zeros((4, 64), "float32")))
    # mixing host and device arguments works too
    d = np.empty_like(a)
    f(da, d)
    np.testing.assert_allclose(d, a * 2 + 1, rtol=1e-6)


def test_time_evaluator_with_events(fake) -> None:
    f = two_kernels()
    fake.register(f)
    a = np.random.default_rng(3).random((4, 64)).astype("float32")
    d = np.empty_like(a)
    res = f.time_evaluator(number=2, repeat=3)(a, d)
    # (the fake's clock: 1 ms per kernel launch, two kernels a run)
    assert res.results == pytest.approx((2e-3,) * 3, rel=1e-9)
    np.testing.assert_allclose(d, a * 2 + 1, rtol=1e-6)
    # warm-up, the recorded run, then number * repeat replays; two kernels each
    assert len(fake.launches) == 2 * (2 + 2 * 3)
    assert not fake.memory


def test_wmma_alignment_of_device_arrays(fake) -> None:
    from tests.backends.test_cuda_schedules import workload
    w = workload("wmma_matmul")
    fake.register(w.module)
    arrays = w.inputs(np.random.default_rng(4))
    dev = [FakeDeviceArray(fake, x) for x in arrays]
    w.module(*dev)
    np.testing.assert_allclose(dev[-1].get(), w.reference(arrays), rtol=1e-3, atol=1e-3)
    # the accumulator tile is loaded and stored by WMMA straight from C: 32-byte alignment
    shifted = FakeDeviceArray(fake, np.zeros(64 * 64 + 8, "float32"))
    shifted.__cuda_array_interface__ = dict(shifted.__cuda_array_interface__, shape=(64, 64),
                                            data=(shifted.ptr + 16, False))
    with pytest.raises(ShapeError, match="32-byte aligned"):
        w.module(dev[0], dev[1], shifted)
