"""The text form of expressions, statements and lowered functions."""
import tdsl as td
from tdsl.expr import BufferLoad, Cast, Const, FloorDiv, FloorMod, Not, Select, Sub, Var
from tdsl.printer import expr_to_str, func_to_str, stmt_to_str, to_html
from tdsl.stmt import (Allocate, Barrier, Buffer, BufferRegion, BufferStore, Evaluate, For,
                       ForKind, IfThenElse, IntrinCall, LetStmt, PrimFunc, SeqStmt, ThreadTag)


def tiled_matmul():
    n = td.var("n")
    A = Buffer("A", (n, 256), "float32")
    B = Buffer("B", (256, 128), "float32")
    C = Buffer("C", (n, 128), "float32")
    local = Buffer("C.local", (32, 32), "float32", scope="local")
    io, jo, ii, ji, k = Var("i.outer"), Var("j.outer"), Var("ii"), Var("j.inner"), Var("k")
    i, j = io * 32 + ii, jo * 32 + ji
    update = BufferStore(C, BufferLoad(C, [i, j]) + BufferLoad(A, [i, k]) * BufferLoad(B, [k, j]),
                         [i, j])
    body = For(io, 0, (n + 31) // 32, ForKind.PARALLEL,
               For(jo, 0, 4, ForKind.SERIAL, Allocate(local,
                   For(ii, 0, 32, ForKind.SERIAL,
                       For(ji, 0, 32, ForKind.VECTORIZED,
                           For(k, 0, 256, ForKind.UNROLLED, IfThenElse(i < n, update)))))))
    return PrimFunc("main", [A, B, C], body, [n], {n: (0, 0)})


def test_function_text():
    assert func_to_str(tiled_matmul()) == '''\
@tdsl.prim_func
def main(A: Buffer[(n, 256), "float32"], B: Buffer[(256, 128), "float32"], \
C: Buffer[(n, 128), "float32"]):
    for i.outer in parallel((n + 31) // 32):
        for j.outer in range(4):
            C.local = allocate((32, 32), "float32", scope="local")
            for ii in range(32):
                for j.inner in vectorized(32):
                    for k in unrolled(256):
                        if i.outer * 32 + ii < n:
                            C[i.outer * 32 + ii, j.outer * 32 + j.inner] = \
C[i.outer * 32 + ii, j.outer * 32 + j.inner] + A[i.outer * 32 + ii, k] * \
B[k, j.outer * 32 + j.inner]'''


def test_repr_and_script_use_the_printer():
    f = tiled_matmul()
    assert repr(f) == f.script() == func_to_str(f)
    assert repr(f.body).startswith("for i.outer in parallel(")
    html = f._repr_html_()
    assert html.startswith("<pre") and html.endswith("</pre>")


def test_minimal_parentheses():
    a, b, c = Var("a"), Var("b"), Var("c")
    assert expr_to_str((a + b) * c) == "(a + b) * c"
    assert expr_to_str(a + b * c) == "a + b * c"
    assert expr_to_str(a - (b - c)) == "a - (b - c)"
    assert expr_to_str((a - b) - c) == "a - b - c"
    assert expr_to_str(FloorDiv(a, b * c)) == "a // (b * c)"
    assert expr_to_str(FloorMod(a * b, c)) == "a * b % c"
    assert expr_to_str((a + 1 < b) & (b <= c) | ~(a == c)) == \
        "a + 1 < b and b <= c or not a == c"
    assert expr_to_str(Not((a < b) | (b < c))) == "not (a < b or b < c)"
    assert expr_to_str((a < b) == (b < c)) == "(a < b) == (b < c)"
    assert expr_to_str(a * -3) == "a * -3"
    assert expr_to_str(Sub(Const(0, "int64"), a)) == "0 - a"


def test_constants_casts_calls_select():
    x = Var("x", "float32")
    assert expr_to_str(x + 1.5) == "x + 1.5"
    assert expr_to_str(Const(2, "int32")) == "2"
    assert expr_to_str(Const(True, "bool")) == "True"
    assert expr_to_str(Const(1.5, "float16")) == "float16(1.5)"
    assert expr_to_str(Const(1.0, "float64")) == "float64(1.0)"
    assert expr_to_str(Cast(x, "int32")) == "int32(x)"
    assert expr_to_str(td.exp(x) * td.sigmoid(x)) == "exp(x) * sigmoid(x)"
    assert expr_to_str(td.max_value(td.DType.FLOAT32)) == "inf"
    assert expr_to_str(td.maximum(x, 0.0)) == "max(x, 0.0)"
    assert expr_to_str(Select(x > 0.0, x, x * 0.5)) == "if_then_else(x > 0.0, x, x * 0.5)"


def test_same_name_variables_are_disambiguated_deterministically():
    i1, i2, i3 = Var("i"), Var("i"), Var("i")
    e = i1 + i2 * i3 + i1
    assert expr_to_str(e) == "i + i_1 * i_2 + i"
    assert expr_to_str(e) == "i + i_1 * i_2 + i"
    j, j1 = Var("j"), Var("j_1")  # an existing "j_1" is not reused for the second "j"
    j2 = Var("j")
    assert expr_to_str(j + j1 + j2) == "j + j_1 + j_2"


def test_compute_declarations_print_reductions():
    n = td.var("n")
    A = td.placeholder((n, 64), name="A")
    B = td.placeholder((64, 32), name="B")
    k = td.reduce_axis((0, 64), name="k")
    C = td.compute((n, 32), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert expr_to_str(C.op.body[0]) == "sum(A[i, k] * B[k, j], axis=[k])"
    D = td.compute((n,), lambda i: td.max(A[i, k], axis=k, where=k < 10), name="D")
    assert expr_to_str(D.op.body[0]) == "max(A[i, k], axis=[k], where=k < 10)"
    assert expr_to_str(k) == "k"


def test_gpu_statements():
    tile = Buffer("A.shared", (64,), "float16", scope="shared")
    out = Buffer("out", (4, 64), "float16")
    bx, tx, x = Var("blockIdx.x"), Var("threadIdx.x"), Var("x", "float16")
    kernel = For(bx, 0, 4, ForKind.THREAD_BINDING, Allocate(tile, SeqStmt([
        For(tx, 0, 16, ForKind.THREAD_BINDING,
            BufferStore(tile, Const(0.5, "float16"), [tx * 4]), ThreadTag.THREAD_X),
        Barrier(),
        LetStmt(x, BufferLoad(tile, [bx]), IfThenElse(
            x > Const(0.0, "float16"), BufferStore(out, x, [bx, bx]),
            IfThenElse(x < Const(0.0, "float16"), Evaluate(x),
                       BufferStore(out, -x, [bx, bx])))),
    ])), ThreadTag.BLOCK_X)
    assert stmt_to_str(kernel) == '''\
for blockIdx.x in thread_binding(4, "blockIdx.x"):
    A.shared = allocate((64,), "float16", scope="shared")
    for threadIdx.x in thread_binding(16, "threadIdx.x"):
        A.shared[threadIdx.x * 4] = float16(0.5)
    sync_threads()
    x = A.shared[blockIdx.x]
    if x > float16(0.0):
        out[blockIdx.x, blockIdx.x] = x
    elif x < float16(0.0):
        x
    else:
        out[blockIdx.x, blockIdx.x] = float16(0.0) - x'''


def test_loop_min_annotations_strides_and_intrinsics():
    i = Var("i")
    buf = Buffer("T", (4, 4), "float32", strides=(5, 1), scope="local")
    store = BufferStore(buf, Const(0.0, "float32"), [i, i])
    loop = For(i, 2, 3, ForKind.UNROLLED, store, annotations={"pragma_unroll_explicit": 1})
    assert stmt_to_str(Allocate(buf, loop)) == '''\
T = allocate((4, 4), "float32", scope="local", strides=(5, 1))
for i in unrolled(2, 5, annotations={"pragma_unroll_explicit": 1}):
    T[i, i] = 0.0'''

    class Intrin:
        name = "gemm4x4"
    call = IntrinCall(Intrin(), [BufferRegion(buf, [i, 0], [4, 4])],
                      [BufferRegion(buf, [0, 0], [4, 4])], reset=True, update=False)
    assert stmt_to_str(call) == ('tensorize("gemm4x4", outputs=[T[0:4, 0:4]], '
                                 'inputs=[T[i:i + 4, 0:4]], reset=True, update=False)')
    assert stmt_to_str(SeqStmt([])) == "pass"


def test_html_escapes_and_highlights():
    a = Buffer("a<b>", (2,), "float32")
    i = Var("i")
    text = stmt_to_str(For(i, 0, 2, ForKind.SERIAL,
                           BufferStore(a, BufferLoad(a, [i]) * 2.0, [i])))
    html = to_html(text)
    assert html.startswith("<pre") and html.endswith("</pre>")
    assert "a&lt;b&gt;" in html and "<b>" not in html
    assert '<span style="color:#0000cc;font-weight:bold">for</span>' in html
    assert '<span style="color:#b05a00">2.0</span>' in html
    assert to_html('x = "<&>"').count("&lt;&amp;&gt;") == 1
