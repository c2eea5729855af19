"""The GPU runtime's stream, context, device, error and module handling, against a fake
driver (``FakeCU`` of test_cuda_driver, extended) that runs launches through the emulator.
What needs a real GPU (PyTorch's current stream, a real sticky fault) is skipped with the
reason; ``scripts/gpu_check.sh`` runs the GPU tests where a device exists."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from tdsl.backends.cuda import driver
from tdsl.backends.cuda.errors import CUDADriverError
from tdsl.errors import ShapeError

from .test_cuda_driver import FakeCU, FakeDeviceArray, pytestmark, two_kernels  # noqa: F401


class StreamCU(FakeCU):
    """FakeCU plus streams, per-thread current contexts, two devices, sticky errors,
    module unloading and stream capture into graphs."""

    class CUpointer_attribute:
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = "ordinal"

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = "thread-local"

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()
        self.streams: list = []           # the stream of each executed launch
        self.synced: list = []
        self.device_of: dict[int, int] = {}
        self.fail_sync: "int | None" = None
        self.resets = 0
        self.unloaded: list = []
        self.capturing: "list | None" = None
        self.graph_launches = 0
        self.frees_after_reset = 0
        self.dead = False

    def cuDeviceGetCount(self): return (0, 2)
    def cuDevicePrimaryCtxRetain(self, dev): return (0, f"ctx{dev}")

    def cuCtxSetCurrent(self, ctx):
        self.local.ctx = ctx
        return (0,)

    def cuDevicePrimaryCtxReset(self, dev):
        self.resets += 1
        self.dead = False
        return (0,)

    def cuPointerGetAttribute(self, attr, ptr):
        return (0, self.device_of.get(int(ptr), 0))

    def cuMemFree(self, ptr):
        if self.dead:
            return (999,)                 # a dead context fails every call
        return super().cuMemFree(ptr)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert getattr(self.local, "ctx", None) is not None, "no current context in this thread"
        self.launches_ctx = getattr(self, "launches_ctx", []) + [self.local.ctx]
        if self.capturing is not None:
            self.capturing.append((f, gx, gy, gz, bx, by, bz, shared, stream, params, extra))
            return (0,)
        self.streams.append(stream)
        return super().cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream): return self.cuMemcpyHtoD(dst, src, n)
    def cuMemcpyDtoHAsync(self, dst, src, n, stream): return self.cuMemcpyDtoH(dst, src, n)

    def _sync(self, what):
        self.synced.append(what)
        if self.fail_sync is not None:
            code, self.fail_sync = self.fail_sync, None
            self.dead = True
            return (code,)
        return (0,)

    def cuCtxSynchronize(self): return self._sync(0)
    def cuStreamSynchronize(self, stream): return self._sync(stream)
    def cuStreamCreate(self, flags): return (0, 77)
    def cuStreamDestroy(self, s): return (0,)

    def cuModuleUnload(self, mod):
        self.unloaded.append(mod)
        return (0,)

    def cuStreamBeginCapture(self, stream, mode):
        self.capturing = []
        return (0,)

    def cuStreamEndCapture(self, stream):
        graph, self.capturing = self.capturing, None
        return (0, graph)

    def cuGraphInstantiate(self, graph, flags): return (0, graph)

    def cuGraphLaunch(self, exe, stream):
        self.graph_launches += 1
        for args in exe:
            rc = super().cuLaunchKernel(*args)
            assert rc == (0,)
        return (0,)

    def cuGraphDestroy(self, g): return (0,)
    def cuGraphExecDestroy(self, g): return (0,)


@pytest.fixture
def cu(monkeypatch):
    fake = StreamCU()
    monkeypatch.setattr(driver, "_STATE", {"driver": driver.Driver(fake)})
    return fake


def _stream_array(fake, host, stream):
    d = FakeDeviceArray(fake, host)
    d.__cuda_array_interface__ = dict(d.__cuda_array_interface__, stream=stream)
    return d


def test_launches_use_the_arrays_stream(cu) -> None:
    f = two_kernels()
    cu.register(f)
    a = np.random.default_rng(0).random((3, 64)).astype("float32")
    da, dd = _stream_array(cu, a, 5), _stream_array(cu, np.zeros_like(a), 5)
    f(da, dd)
    np.testing.assert_allclose(dd.get(), a * 2 + 1, rtol=1e-6)
    assert cu.streams == [5, 5] and cu.synced == [5]     # waited for that stream only
    cu.streams.clear()
    f(a, np.empty_like(a))                                 # NumPy only: the default stream
    assert cu.streams == [0, 0]


def test_torch_stream_needs_a_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch's current stream needs a CUDA device (scripts/gpu_check.sh)")
    x = torch.zeros(4, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        assert driver.arrays_stream((x,)) == torch.cuda.current_stream().cuda_stream


def test_context_is_made_current_in_every_calling_thread(cu) -> None:
    f = two_kernels()
    cu.register(f)
    a = np.random.default_rng(1).random((2, 64)).astype("float32")
    out, errors = np.empty_like(a), []

    def work():
        try:
            f(a, out)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)


def test_sticky_error_is_reported_first_and_the_context_reset(cu) -> None:
    f = two_kernels()
    cu.register(f)
    a = np.random.default_rng(2).random((2, 64)).astype("float32")
    cu.fail_sync = 700                          # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(CUDADriverError, match=r"(?s)Synchronize.*reset"):
        f(a, np.empty_like(a))
    assert cu.resets == 1
    out = np.empty_like(a)                      # the next call works on a fresh context
    f(a, out)
    np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)


def test_arrays_device_is_used_and_mixed_devices_refused(cu) -> None:
    f = two_kernels()
    cu.register(f)
    a = np.random.default_rng(3).random((2, 64)).astype("float32")
    da, dd = FakeDeviceArray(cu, a), FakeDeviceArray(cu, np.zeros_like(a))
    cu.device_of[da.ptr] = cu.device_of[dd.ptr] = 1
    cu.launches_ctx = []
    f(da, dd)
    assert cu.launches_ctx == ["ctx1", "ctx1"]
    np.testing.assert_allclose(dd.get(), a * 2 + 1, rtol=1e-6)
    cu.device_of[dd.ptr] = 0
    with pytest.raises(ShapeError, match="different devices"):
        f(da, dd)


def test_modules_are_unloaded_when_collected(cu) -> None:
    f = two_kernels()
    cu.register(f)
    a = np.random.default_rng(4).random((2, 64)).astype("float32")
    f(a, np.empty_like(a))
    f(a, np.empty_like(a))                       # loaded once
    assert len(cu.images) == 1 and not cu.unloaded
    del f
    gc.collect()
    assert cu.unloaded == ["module"]


def test_timing_replays_a_captured_graph(cu) -> None:
    """The timed region is one cuGraphLaunch per measurement: no Python between kernels."""
    f = two_kernels()
    cu.register(f)
    a = np.random.default_rng(5).random((2, 64)).astype("float32")
    d = np.empty_like(a)
    res = f.time_evaluator(number=3, repeat=2)(a, d)
    assert len(res.results) == 2
    assert cu.graph_launches == 2
    assert len(cu.launches) == 2 * (2 + 3 * 2)   # warm-up, recorded run, 2 graphs of 3 runs
    assert set(cu.streams) == {77}               # captured on the timer's own stream
    np.testing.assert_allclose(d, a * 2 + 1, rtol=1e-6)
