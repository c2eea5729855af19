"""tdsl.integrations.torch: built modules as torch.library custom operators.

CPU tensors through DLPack (zero-copy), shape/dtype checks, allocated or given outputs,
autograd with backward kernels written in tdsl (checked by torch.autograd.gradcheck in
float64), torch.compile with the operator as one opaque node, CUDA modules under the CPU
emulator, and modules loaded back from an exported library.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the to_torch tests need "
                                            "it (pip install torch)")

import tdsl as td  # noqa: E402
from tdsl.integrations import torch as ttorch  # noqa: E402
from tdsl.integrations.torch import TorchOp, to_torch  # noqa: E402


# ---- kernels ------------------------------------------------------------------------------------
def linear_kernels(dtype: str):
    """Y = X @ W.T and its backward (dX = dY @ W, dW = dY.T @ X), all sizes symbolic."""
    n, m, k = td.var("n"), td.var("m"), td.var("k")
    X = td.placeholder((n, k), dtype, name="X")
    W = td.placeholder((m, k), dtype, name="W")
    r = td.reduce_axis((0, k), name="r")
    Y = td.compute((n, m), lambda i, j: td.sum(X[i, r] * W[j, r], axis=r), name="Y")
    s = td.create_schedule(Y.op)
    i, j = s[Y].op.axis
    jo, ji = s[Y].split(j, factor=4)
    s[Y].reorder(i, jo, r, ji)
    fwd = td.build(s, [X, W, Y], name="linear")
    dY = td.placeholder((n, m), dtype, name="dY")
    rj = td.reduce_axis((0, m), name="rj")
    ri = td.reduce_axis((0, n), name="ri")
    dX = td.compute((n, k), lambda i, q: td.sum(dY[i, rj] * W[rj, q], axis=rj), name="dX")
    dW = td.compute((m, k), lambda j, q: td.sum(dY[ri, j] * X[ri, q], axis=ri), name="dW")
    s = td.create_schedule([dX.op, dW.op])
    for T in (dX, dW):
        a, q = s[T].op.axis
        qo, qi = s[T].split(q, factor=8)
        s[T].reorder(a, qo, s[T].op.reduce_axis[0], qi)
        s[T].vectorize(qi)
    bwd = td.build(s, [X, W, dY, dX, dW], name="linear_bwd")
    return fwd, bwd


@pytest.fixture(scope="module")
def linear64():
    return linear_kernels("float64")


@pytest.fixture(scope="module")
def linear32():
    return linear_kernels("float32")


@pytest.fixture(scope="module")
def linear_op(linear64) -> TorchOp:
    fwd, bwd = linear64
    return to_torch(fwd, backward=bwd)


def sigmoid_kernels():
    """y = sigmoid(x) (2-D, symbolic) and dx = dy * y * (1 - y), which reads the output y."""
    n, m = td.var("n"), td.var("m")
    X = td.placeholder((n, m), "float64", name="x")
    Y = td.compute((n, m), lambda i, j: td.sigmoid(X[i, j]), name="y")
    fwd = td.build(td.create_schedule(Y.op), [X, Y], name="sigm")
    Yb = td.placeholder((n, m), "float64", name="y")
    dY = td.placeholder((n, m), "float64", name="dy")
    dX = td.compute((n, m), lambda i, j: dY[i, j] * Yb[i, j] * (1.0 - Yb[i, j]), name="dx")
    bwd = td.build(td.create_schedule(dX.op), [Yb, dY, dX], name="sigm_bwd")
    return fwd, bwd


# ---- the operator on CPU tensors --------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 3, 4), (17, 9, 33)])
def test_custom_op_matches_torch(linear32, shape):
    n, m, k = shape
    op = to_torch(linear32[0])
    x, w = torch.randn(n, k), torch.randn(m, k)
    y = op(x, w)
    assert y.shape == (n, m) and y.dtype == torch.float32 and y.device.type == "cpu"
    torch.testing.assert_close(y, x @ w.T, rtol=1e-5, atol=1e-5)
    # it is a registered operator, callable by its qualified name
    torch.testing.assert_close(getattr(torch.ops.tdsl, op.name).default(x, w), y)
    assert op.qualname == f"tdsl::{op.name}"


def test_inputs_and_outputs_are_not_copied(linear32):
    """The kernel receives the caller's tensor memory (DLPack), and writes given outputs in
    place."""
    fwd = linear32[0]
    op = to_torch(fwd)
    seen = []

    class Spy:
        func = fwd.func

        def __call__(self, *args):
            seen.extend(a.data_ptr() for a in args)
            fwd(*args)

    op.module = Spy()
    x, w = torch.randn(4, 3), torch.randn(2, 3)
    y = op(x, w)
    assert seen == [x.data_ptr(), w.data_ptr(), y.data_ptr()]

    into = to_torch(fwd, allocate_outputs=False)
    out = torch.full((4, 2), float("nan"))
    assert into(x, w, out) is None
    torch.testing.assert_close(out, x @ w.T, rtol=1e-5, atol=1e-5)
    assert "Tensor(a!) Y" in into.schema()


def test_non_contiguous_inputs_are_made_contiguous(linear32):
    op = to_torch(linear32[0])
    x = torch.randn(3, 8)[:, ::2]
    w = torch.randn(5, 4).T.contiguous().T          # transposed view of a (4, 5) tensor
    assert not x.is_contiguous() and not w.is_contiguous()
    torch.testing.assert_close(op(x, w), x @ w.T, rtol=1e-5, atol=1e-5)


def test_shapes_dtypes_and_devices_are_checked(linear32):
    op = to_torch(linear32[0])
    x, w = torch.randn(4, 3), torch.randn(2, 3)
    with pytest.raises(td.ShapeError, match="'k'"):
        op(x, torch.randn(2, 5))
    with pytest.raises(td.ShapeError, match="dimension"):
        op(x, torch.randn(6))
    with pytest.raises(td.DTypeError, match="float32"):
        op(x.double(), w)
    with pytest.raises(Exception):          # the dispatcher refuses a wrong argument count
        op(x)
    into = to_torch(linear32[0], allocate_outputs=False)
    with pytest.raises(td.ShapeError, match="not contiguous"):
        into(x, w, torch.empty(2, 4).T)
    with pytest.raises(td.ShapeError):
        into(x, w, torch.empty(4, 3))


def test_several_outputs_come_back_as_a_tuple(linear32):
    op = to_torch(linear32[1])               # (X, W, dY) -> (dX, dW)
    x, w, dy = torch.randn(4, 3), torch.randn(2, 3), torch.randn(4, 2)
    dx, dw = op(x, w, dy)
    torch.testing.assert_close(dx, dy @ w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dw, dy.T @ x, rtol=1e-5, atol=1e-5)
    assert "-> (Tensor, Tensor)" in op.schema()


# ---- autograd ------------------------------------------------------------------------------------
def test_gradcheck_with_a_backward_kernel_written_in_tdsl(linear_op):
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(linear_op, (x, w))
    y = linear_op(x, w)
    g = torch.randn_like(y)
    dx, dw = torch.autograd.grad(y, (x, w), g)
    torch.testing.assert_close(dx, g @ w.detach())
    torch.testing.assert_close(dw, g.T @ x.detach())


def test_gradcheck_with_a_backward_kernel_that_reads_the_outputs():
    fwd, bwd = sigmoid_kernels()
    op = to_torch(fwd, backward=bwd, saved_inputs=[], saved_outputs=[0])
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(op(x), torch.sigmoid(x))
    assert torch.autograd.gradcheck(op, (x,))


def test_gradient_of_some_inputs_only():
    """y = x * x * c with a constant c: the backward kernel writes dx only (grad_inputs=[0])."""
    n = td.var("n")
    X = td.placeholder((n,), "float64", name="x")
    Cst = td.placeholder((n,), "float64", name="c")
    Y = td.compute((n,), lambda i: X[i] * X[i] * Cst[i], name="y")
    fwd = td.build(td.create_schedule(Y.op), [X, Cst, Y], name="sq_scale")
    dY = td.placeholder((n,), "float64", name="dy")
    dX = td.compute((n,), lambda i: 2.0 * X[i] * Cst[i] * dY[i], name="dx")
    bwd = td.build(td.create_schedule(dX.op), [X, Cst, dY, dX], name="sq_scale_bwd")
    op = to_torch(fwd, backward=bwd, grad_inputs=[0])
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    c = torch.randn(6, dtype=torch.float64)
    assert torch.autograd.gradcheck(op, (x, c))
    c.requires_grad_(True)
    dx, dc = torch.autograd.grad(op(x, c).sum(), (x, c), allow_unused=True)
    torch.testing.assert_close(dx, 2 * x.detach() * c.detach())
    assert dc is None or torch.count_nonzero(dc) == 0


def test_backward_as_a_python_function_of_tdsl_ops(linear64):
    fwd, bwd = linear64
    grads = to_torch(bwd)

    def backward(saved_inputs, saved_outputs, grad_outputs):
        x, w = saved_inputs
        assert saved_outputs == ()
        return grads(x, w, grad_outputs[0])

    op = to_torch(fwd, backward=backward)
    x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x, w))


def test_backward_kernel_with_the_wrong_signature_is_refused(linear64):
    fwd, bwd = linear64
    with pytest.raises(td.TDSLError, match="expected 3 inputs"):
        to_torch(fwd, backward=fwd)
    with pytest.raises(td.TDSLError, match=r"grad_inputs=\[0, 0\]"):
        to_torch(fwd, backward=bwd, grad_inputs=[0, 0])
    with pytest.raises(td.TDSLError, match=r"saved_outputs=\[1\]"):
        to_torch(fwd, backward=bwd, saved_outputs=[1])
    with pytest.raises(td.TDSLError, match="expected 4 inputs"):
        to_torch(fwd, backward=bwd, saved_outputs=[0])
    with pytest.raises(td.TDSLError, match="functional"):
        to_torch(fwd, backward=bwd, allocate_outputs=False)


# ---- torch.compile -------------------------------------------------------------------------------
def test_torch_compile_keeps_the_op_opaque_with_dynamic_shapes(linear_op):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def model(x, w):
        return torch.relu(linear_op(x, w)).sum(dim=1)

    compiled = torch.compile(model, backend=capture, fullgraph=True, dynamic=True)
    for n in (5, 9):
        x = torch.randn(n, 3, dtype=torch.float64)
        w = torch.randn(4, 3, dtype=torch.float64)
        torch.testing.assert_close(compiled(x, w), torch.relu(x @ w.T).sum(dim=1))
    assert len(graphs) == 1                      # one graph for every batch size
    targets = [node.target for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert targets.count(linear_op.op) == 1


def test_torch_compile_with_autograd(linear_op):
    def model(x, w):
        return (linear_op(x, w) ** 2).sum()

    compiled = torch.compile(model, backend="aot_eager", fullgraph=True, dynamic=True)
    for n in (3, 6):
        x = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
        w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
        compiled(x, w).backward()
        ex, ew = (t.detach().requires_grad_(True) for t in (x, w))
        ((ex @ ew.T) ** 2).sum().backward()
        torch.testing.assert_close(x.grad, ex.grad)
        torch.testing.assert_close(w.grad, ew.grad)


def test_torch_compile_out_variant(linear32):
    into = to_torch(linear32[0], allocate_outputs=False)

    def model(x, w):
        out = torch.empty(x.shape[0], w.shape[0])
        into(x, w, out)
        return out + 1

    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x, w = torch.randn(4, 3), torch.randn(2, 3)
    torch.testing.assert_close(compiled(x, w), x @ w.T + 1, rtol=1e-5, atol=1e-5)


def test_torch_compile_inductor(linear32):
    """The default backend: Inductor generates code around the opaque call."""
    op = to_torch(linear32[0])
    compiled = torch.compile(lambda x, w: torch.tanh(op(x, w)) * 2, fullgraph=True)
    x, w = torch.randn(6, 5), torch.randn(3, 5)
    torch.testing.assert_close(compiled(x, w), torch.tanh(x @ w.T) * 2, rtol=1e-5, atol=1e-5)


# ---- other modules -------------------------------------------------------------------------------
def test_cuda_module_under_the_emulator():
    pytest.importorskip("tdsl.backends.cuda")
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("g++ not found: the CUDA emulator needs it")
    n = td.var("n")
    A = td.placeholder((n,), "float32", name="A")
    B = td.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = td.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, td.thread_axis("blockIdx.x"))
    s[B].bind(tx, td.thread_axis("threadIdx.x"))
    f = td.build(s, [A, B], target="cuda", name="affine")
    op = to_torch(f, emulate=True)
    a = torch.rand(100)
    torch.testing.assert_close(op(a), a * 2 + 1)
    from tdsl.backends import cuda
    if not cuda.has_device():
        with pytest.raises(cuda.NoCUDADeviceError):
            to_torch(f)(a)


def test_exported_and_loaded_module(linear32, tmp_path):
    path = str(tmp_path / "linear.so")
    linear32[0].export_library(path)
    op = to_torch(td.load_module(path))
    x, w = torch.randn(4, 3), torch.randn(2, 3)
    torch.testing.assert_close(op(x, w), x @ w.T, rtol=1e-5, atol=1e-5)


def test_names(linear32):
    fwd = linear32[0]
    a, b = to_torch(fwd), to_torch(fwd)
    assert a.name != b.name                      # default names are made unique
    named = to_torch(fwd, name="my_linear_for_tests")
    assert named.op is torch.ops.tdsl.my_linear_for_tests.default
    with pytest.raises(td.TDSLError, match="already registered"):
        to_torch(fwd, name="my_linear_for_tests")
    with pytest.raises(td.TDSLError, match="identifier"):
        to_torch(fwd, name="not a name")
    with pytest.raises(td.TDSLError, match="built tdsl module"):
        to_torch(object())
    assert repr(named) == "<TorchOp tdsl::my_linear_for_tests(X, W) -> (Y)>"
    assert ttorch._REGISTERED[named.qualname] is named


def test_exported_from_the_tdsl_namespace():
    assert td.to_torch is to_torch


# ---- no backward= : backward must fail loudly ----------------------------------------------------
def test_backward_without_a_gradient_kernel_raises(linear32):
    op = to_torch(linear32[0])
    x = (torch.rand(5, 4) + 0.5).requires_grad_()
    w = (torch.rand(3, 4) + 0.5).requires_grad_()
    y = op(x, w)
    torch.testing.assert_close(y, x.detach() @ w.detach().T)     # forward unaffected
    with pytest.raises(td.TDSLError, match="has no gradient.*without backward="):
        y.sum().backward()
    assert x.grad is None and w.grad is None
    # without grad there is nothing to complain about
    with torch.no_grad():
        torch.testing.assert_close(op(x, w), x.detach() @ w.detach().T)
    torch.testing.assert_close(op(x.detach(), w.detach()), x.detach() @ w.detach().T)


def test_to_torch_refuses_misspelled_keywords(linear32):
    with pytest.raises(td.ArgumentError, match="'backwards' \\(did you mean 'backward'"):
        to_torch(linear32[0], backwards=linear32[1])


# ---- the direct path (no dispatcher when nothing needs it) -----------------------------------
def test_direct_calls_are_zero_copy_and_follow_the_shapes(linear32, monkeypatch):
    """After one checked call per input shape, calls go straight to the kernel with the
    tensors' own data pointers; new shapes (symbolic n, m, k) are checked again first."""
    op = to_torch(linear32[0])
    seen = []
    launcher = op.module._launcher

    def spy(arrays, sizes, pointers):
        seen.append((dict((v.name, s) for v, s in sizes.items()), list(pointers)))
        return launcher(arrays, sizes, pointers)

    monkeypatch.setattr(op.module, "_launcher", spy)
    for n, m, k in [(4, 3, 5), (4, 3, 5), (9, 2, 7), (4, 3, 5), (9, 2, 7)]:
        x, w = torch.randn(n, k), torch.randn(m, k)
        y = op(x, w)
        torch.testing.assert_close(y, x @ w.T, rtol=1e-5, atol=1e-5)
        assert seen[-1] == ({"n": n, "m": m, "k": k}, [x.data_ptr(), w.data_ptr(), y.data_ptr()])
    assert len(op._direct) == 2


def test_direct_path_keeps_the_checks_and_autograd(linear32):
    """A call the direct path cannot take (a wrong dtype or size, a tensor that needs a
    gradient) still goes through the operator, its checks and its autograd kernel."""
    op = to_torch(linear32[0])
    x, w = torch.randn(4, 5), torch.randn(3, 5)
    op(x, w)
    op(x, w)                                        # cached: the direct path
    with pytest.raises(td.DTypeError, match="float64"):
        op(x.double(), w)
    with pytest.raises(td.ShapeError):
        op(x, torch.randn(3, 6))
    xg = x.clone().requires_grad_()
    y = op(xg, w)
    assert y.grad_fn is not None
    with pytest.raises(td.TDSLError, match="no gradient"):
        y.sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(op(xg, w), x @ w.T, rtol=1e-5, atol=1e-5)
