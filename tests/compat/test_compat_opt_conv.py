"""The schedule of TVM's opt_conv_cuda tutorial (HWCN conv2d, shared and local caches, two
virtual threads, thread axes declared with a range, the shared copies attached before their
local readers), built for CUDA and run on the CPU emulator, against NumPy; small sizes, one
that the tiles divide and one that they don't."""
import shutil

import numpy as np
import pytest

import tvm
import tvm.topi.testing
from tvm import te

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="the CUDA emulation harness needs g++")


def _conv_schedule(batch, cin, cout, size, tile=2, num_thread=4, vthread=2, step=4):
    kernel, pad = 3, 1
    A = te.placeholder((size, size, cin, batch), name="A")
    W = te.placeholder((kernel, kernel, cin, cout), name="W")
    out = size + 2 * pad - kernel + 1
    Apad = te.compute((size + 2 * pad, size + 2 * pad, cin, batch),
                      lambda y, x, c, n: tvm.tir.if_then_else(
                          tvm.tir.all(y >= pad, y - pad < size, x >= pad, x - pad < size),
                          A[y - pad, x - pad, c, n], tvm.tir.const(0.0, "float32")), name="Apad")
    rc = te.reduce_axis((0, cin), name="rc")
    ry = te.reduce_axis((0, kernel), name="ry")
    rx = te.reduce_axis((0, kernel), name="rx")
    B = te.compute((out, out, cout, batch),
                   lambda y, x, f, n: te.sum(Apad[y + ry, x + rx, rc, n] * W[ry, rx, rc, f],
                                             axis=[ry, rx, rc]), name="B")
    s = te.create_schedule(B.op)
    s[Apad].compute_inline()
    AA = s.cache_read(Apad, "shared", [B])
    WW = s.cache_read(W, "shared", [B])
    AL = s.cache_read(AA, "local", [B])
    WL = s.cache_read(WW, "local", [B])
    BL = s.cache_write(B, "local")
    block = tile * num_thread
    tx_axis = te.thread_axis((0, num_thread), "threadIdx.x")
    ty_axis = te.thread_axis((0, num_thread), "threadIdx.y")
    hi, wi, fi, ni = s[B].op.axis
    bz = s[B].fuse(hi, wi)
    by, fi = s[B].split(fi, factor=block)
    bx, ni = s[B].split(ni, factor=block)
    s[B].bind(bz, te.thread_axis("blockIdx.z"))
    s[B].bind(by, te.thread_axis("blockIdx.y"))
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    tyz, fi = s[B].split(fi, nparts=vthread)
    txz, ni = s[B].split(ni, nparts=vthread)
    ty, fi = s[B].split(fi, nparts=num_thread)
    tx, ni = s[B].split(ni, nparts=num_thread)
    s[B].reorder(bz, by, bx, tyz, txz, ty, tx, fi, ni)
    s[B].bind(tyz, te.thread_axis((0, vthread), "vthread", name="vy"))
    s[B].bind(txz, te.thread_axis((0, vthread), "vthread", name="vx"))
    s[B].bind(ty, ty_axis)
    s[B].bind(tx, tx_axis)
    s[BL].compute_at(s[B], tx)
    ry, rx, rc = s[BL].op.reduce_axis
    rco, rci = s[BL].split(rc, factor=step)
    yi, xi, fi, ni = s[BL].op.axis
    s[BL].reorder(rco, ry, rx, rci, fi, ni)
    s[AA].compute_at(s[BL], rx)      # before AL, their reader, is attached
    s[WW].compute_at(s[BL], rx)
    s[AL].compute_at(s[BL], rci)
    s[WL].compute_at(s[BL], rci)
    for T, last in ((AA, "n"), (WW, "f")):
        yi, xi, ci, li = s[T].op.axis
        ty, ci = s[T].split(ci, nparts=num_thread)
        tx, li = s[T].split(li, nparts=num_thread)
        _, li = s[T].split(li, factor=2)
        s[T].reorder(ty, tx, yi, xi, ci, li)
        s[T].bind(ty, ty_axis)
        s[T].bind(tx, tx_axis)
        s[T].vectorize(li)
    return s, [A, W, B], out


@pytest.mark.parametrize("batch,cin,cout,size", [(16, 8, 16, 5), (12, 6, 10, 4)])
def test_opt_conv_cuda_schedule_emulated(rng, batch, cin, cout, size):
    s, args, out = _conv_schedule(batch, cin, cout, size)
    f = tvm.build(s, args, "cuda")
    a_np = rng.standard_normal((size, size, cin, batch)).astype("float32")
    w_np = rng.standard_normal((3, 3, cin, cout)).astype("float32")
    dev = tvm.cuda(0)
    a, w = tvm.nd.array(a_np, dev), tvm.nd.array(w_np, dev)
    b = tvm.nd.array(np.full((out, out, cout, batch), np.nan, "float32"), dev)
    f.emulate(a, w, b)
    want = tvm.topi.testing.conv2d_hwcn_python(a_np, w_np, 1, 1)
    np.testing.assert_allclose(b.numpy(), want, rtol=1e-4, atol=1e-4)
