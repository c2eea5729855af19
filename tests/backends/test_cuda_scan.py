"""td.scan on CUDA: the spatial loops bound to blockIdx/threadIdx, each thread running the
recurrence of its points (the scan loop sequential inside the kernel).  Emulated against
NumPy recurrences on random data (sizes that do and don't divide the block, symbolic sizes);
NVRTC compiles the source for sm_80 and sm_90."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import interpreter
from tdsl.backends.cuda import nvrtc

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="g++ is not installed: the CUDA emulation harness needs it")


def check(s, args, arrays, wants) -> str:
    mod = td.build(s, args, target="cuda")
    for run in (lambda a: interpreter.run(td.lower(s, args), *a), lambda a: mod.emulate(*a)):
        got = [a.copy() for a in arrays]
        run(got)
        for out, want in zip(got[len(got) - len(wants):], wants):
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    src = mod.get_source()
    if nvrtc.is_available():
        for arch in ("sm_80", "sm_90"):
            nvrtc.compile_cuda(src, arch=arch)
    return src


@pytest.mark.parametrize("shape", [(10, 1000), (7, 256), (1, 5)])
def test_cumsum_like_the_tvm_scan_tutorial(shape):
    """TVM's schedule: s[init] and s[update] split and bound alike."""
    m, n = td.var("m"), td.var("n")
    X = td.placeholder((m, n), name="X")
    state = td.placeholder((m, n), name="state")
    init = td.compute((1, n), lambda _, i: X[0, i], name="init")
    update = td.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    S = td.scan(init, update, state, inputs=[X])
    s = td.create_schedule(S.op)
    for part in (init, update):
        xo, xi = s[part].split(part.op.axis[1], factor=256)
        s[part].bind(xo, td.thread_axis("blockIdx.x"))
        s[part].bind(xi, td.thread_axis("threadIdx.x"))
    x = np.random.default_rng(shape[1]).uniform(size=shape).astype("float32")
    src = check(s, [X, S], [x, np.full(shape, np.nan, "float32")], [np.cumsum(x, axis=0)])
    kernel = src[src.index("__global__"):]
    assert kernel.index("blockIdx.x") < kernel.index("for (")   # the scan loop inside


def test_two_states_and_two_spatial_axes():
    """Two states updated from each other at the same point; a 2-D spatial domain bound to
    blockIdx.y/x and threadIdx.x."""
    T, H, W = 6, 5, 40
    X = td.placeholder((T, H, W), name="X")
    sa = td.placeholder((T, H, W), name="sa")
    sb = td.placeholder((T, H, W), name="sb")
    ia = td.compute((1, H, W), lambda _, h, w: X[0, h, w], name="ia")
    ib = td.compute((1, H, W), lambda _, h, w: td.const(1.0, "float32"), name="ib")
    ua = td.compute((T, H, W), lambda t, h, w: sa[t - 1, h, w] * 0.5 + sb[t - 1, h, w] + X[t, h, w],
                    name="ua")
    ub = td.compute((T, H, W), lambda t, h, w: sb[t - 1, h, w] - sa[t - 1, h, w] * 0.25, name="ub")
    A, B = td.scan([ia, ib], [ua, ub], [sa, sb], name="both")
    s = td.create_schedule(A.op)
    h, w = A.op.spatial_axis
    wo, wi = s[A].split(w, factor=16)
    s[A].reorder(h, wo, wi)
    s[A].bind(h, td.thread_axis("blockIdx.y"))
    s[A].bind(wo, td.thread_axis("blockIdx.x"))
    s[A].bind(wi, td.thread_axis("threadIdx.x"))
    x = np.random.default_rng(8).standard_normal((T, H, W)).astype("float32")
    wa, wb = np.empty_like(x), np.empty_like(x)
    wa[0], wb[0] = x[0], 1.0
    for t in range(1, T):
        wa[t] = wa[t - 1] * 0.5 + wb[t - 1] + x[t]
        wb[t] = wb[t - 1] - wa[t - 1] * 0.25
    check(s, [X, A, B], [x, np.empty_like(x), np.empty_like(x)], [wa, wb])
