"""Write one documentation page per schedule primitive, from code run at build time.

Each page shows the primitive's signature and docstring, an example, the loop nest before
and after it (``td.lower``), and something it refuses with the error tdsl raises.  The
examples run here, so a page can never disagree with the code: an example that fails, or a
refusal that is accepted, stops the build.

    python docs/gen_primitives.py OUT_DIR
"""
from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

import tdsl as td

ELEM = """\
A = td.placeholder((64, 64), "float32", name="A")
B = td.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
s = td.create_schedule(B.op)
args = [A, B]
i, j = s[B].op.axis
"""
CHAIN = """\
A = td.placeholder((64, 64), "float32", name="A")
T = td.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="T")
B = td.compute((64, 64), lambda i, j: T[i, j] * 2.0, name="B")
s = td.create_schedule(B.op)
args = [A, B]
"""
MATMUL = """\
A = td.placeholder((64, 64), "float32", name="A")
W = td.placeholder((64, 64), "float32", name="W")
k = td.reduce_axis((0, 64), name="k")
C = td.compute((64, 64), lambda i, j: td.sum(A[i, k] * W[k, j], axis=k), name="C")
s = td.create_schedule(C.op)
args = [A, W, C]
i, j = s[C].op.axis
"""
ROWSUM = """\
A = td.placeholder((64, 256), "float32", name="A")
k = td.reduce_axis((0, 256), name="k")
B = td.compute((64,), lambda i: td.sum(A[i, k], axis=k), name="B")
s = td.create_schedule(B.op)
args = [A, B]
"""
REDCHAIN = ROWSUM + """\
Y = td.compute((64,), lambda i: B[i] * 0.5, name="Y")
s = td.create_schedule(Y.op)
args = [A, Y]
"""
GPU = """\
A = td.placeholder((64, 64), "float32", name="A")
B = td.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
s = td.create_schedule(B.op)
AS = s.cache_read(A, "shared", [B])
i, j = s[B].op.axis
io, ii = s[B].split(i, factor=8)
s[B].bind(io, td.thread_axis("blockIdx.x"))
s[B].bind(j, td.thread_axis("threadIdx.x"))
s[AS].compute_at(s[B], io)
s[AS].bind(s[AS].op.axis[1], td.thread_axis("threadIdx.x"))
args = [A, B]
"""
INTRIN = ELEM + """\
a = td.placeholder((16,), "float32", name="a")
b = td.compute((16,), lambda t: a[t] * 2.0, name="b")
times2_16 = td.decl_tensor_intrin(b.op, name="times2_16")
"""

#: name, owner ("Stage": s[T].name, "Schedule": s.name), setup, example, refused, note
PRIMITIVES = [
    ("split", "Stage", ELEM, "jo, ji = s[B].split(j, factor=16)",
     "s[B].split(j, factor=0)",
     "A factor that does not divide the extent is fine: the tail is guarded (see lesson 3)."),
    ("tile", "Stage", ELEM, "io, jo, ii, ji = s[B].tile(i, j, x_factor=8, y_factor=16)",
     "s[B].tile(i, i, x_factor=8, y_factor=8)", ""),
    ("fuse", "Stage", ELEM, "ij = s[B].fuse(i, j)", "s[B].fuse(j, i)",
     "The loops must be adjacent, outermost first.  A spatial loop fused with a reduction "
     "loop is a reduction loop (as in TVM): it cannot run in parallel, vectorized or bound."),
    ("reorder", "Stage", ELEM, "s[B].reorder(j, i)", "s[B].reorder(i, i)", ""),
    ("vectorize", "Stage", ELEM, "jo, ji = s[B].split(j, factor=16)\ns[B].vectorize(ji)",
     ROWSUM + "s[B].vectorize(k)",
     "A reduction loop is refused: `rfactor` it first (lesson 9)."),
    ("unroll", "Stage", ELEM, "jo, ji = s[B].split(j, factor=4)\ns[B].unroll(ji)",
     "jo, ji = s[B].split(j, factor=4)\ns[B].unroll(j)   # j was split: no longer a loop", ""),
    ("parallel", "Stage", ELEM, "s[B].parallel(i)", ROWSUM + "s[B].parallel(k)",
     "Parallel loops run on OpenMP threads (the LLVM backend); a reduction loop is refused."),
    ("bind", "Stage", ELEM,
     'io, ii = s[B].split(i, factor=8)\ns[B].bind(io, td.thread_axis("blockIdx.x"))\n'
     's[B].bind(j, td.thread_axis("threadIdx.x"))',
     ROWSUM + 's[B].bind(k, td.thread_axis("blockIdx.x"))',
     "GPU targets only; `td.build(..., target=\"llvm\")` refuses a bound loop.  A reduction "
     "loop may be bound to `threadIdx`: a cross-thread reduction (warp shuffles, then shared "
     "memory), not to `blockIdx` or `vthread`."),
    ("pragma", "Stage", ELEM, 's[B].pragma(i, "unroll_explicit")', 's[B].pragma(i, "")',
     "A hint for the backend; it does not change what is computed."),
    ("compute_at", "Stage", CHAIN, "s[T].compute_at(s[B], s[B].op.axis[0])",
     "s[T].compute_at(s[B], s[T].op.axis[0])   # a loop of T itself, not of B",
     "The attached stage computes just the region its consumer's loop iteration needs."),
    ("compute_inline", "Stage", CHAIN, "s[T].compute_inline()",
     REDCHAIN + "s[B].compute_inline()", "Reductions cannot be inlined; use `compute_at`."),
    ("compute_root", "Stage", CHAIN + "s[T].compute_at(s[B], s[B].op.axis[0])\n",
     "s[T].compute_root()", "s[A].compute_root()",
     "Undoes `compute_at` / `compute_inline`: the stage gets its own loop nest again."),
    ("set_scope", "Stage", CHAIN + "s[T].compute_at(s[B], s[B].op.axis[0])\n",
     's[T].set_scope("local")', 's[T].set_scope("texture")', ""),
    ("storage_align", "Stage", CHAIN + "s[T].compute_at(s[B], s[B].op.axis[0])\n",
     "s[T].storage_align(s[T].op.axis[0], 32, 1)",
     "s[T].storage_align(s[T].op.axis[0], 0, 1)",
     "Pads the buffer's rows (GPU shared memory: avoids bank conflicts)."),
    ("align_region", "Stage", CHAIN + "s[T].compute_at(s[B], s[B].op.axis[0])\n",
     "s[T].align_region(s[T].op.axis[0], 8)",
     "s[T].align_region(s[T].op.axis[0], 8, 8)",
     "Widens the region an attached stage computes: its start rounded down to a multiple "
     "of `factor` (plus `offset`), its extent up (GPU fetches: whole aligned vectors; the "
     "CUDA conv2d default fetches its input rows from the padded start rounded down)."),
    ("double_buffer", "Stage", GPU, "s[AS].double_buffer()", "s[B].double_buffer()",
     "For shared-memory stages of GPU kernels; see the CUDA backend."),
    ("tensorize", "Stage", INTRIN,
     "jo, ji = s[B].split(j, factor=16)\ns[B].tensorize(ji, times2_16)",
     "jo, ji = s[B].split(j, factor=8)\ns[B].tensorize(ji, times2_16)",
     "The loop nest from the given loop inward must compute what the intrinsic declares "
     "(lesson 6)."),
    ("set_store_predicate", "Stage",
     ELEM + 'tx = td.thread_axis("threadIdx.x")\ns[B].bind(i, td.thread_axis("blockIdx.x"))\n'
     's[B].bind(j, tx)\n',
     "s[B].set_store_predicate(tx.var.equal(0))",
     "s[B].set_store_predicate(i.var < 3)",
     "Only the threads where the predicate holds store (TVM's cross-thread reduction "
     "tutorial: `tx.var.equal(0)`); terms are `thread_axis(...).var.equal(constant)`."),
    ("transform_layout", "Stage", CHAIN,
     "s[T].transform_layout(lambda i, j: [j, i])",
     "s[T].transform_layout(lambda i, j: [i + j, j])",
     "Stores the stage's output with its axes permuted or blocked (TVM's "
     "`transform_layout`, for index maps whose indices are axes, or one axis' `// f` and "
     "`% f`: `lambda c, o: [o // 16, c, o % 16]`; a block past the axis' end holds zeros); "
     "its loops and its readers' loads follow.  A hand-written dense (`x[i, k] * w[j, k]`) "
     "copies w's panels through a cache stage laid out `[k, j]`; the CPU conv2d packs its "
     "filter in panels `[co // b, ci, kh, kw, co % b]`."),
    ("cache_read", "Schedule", MATMUL,
     'AL = s.cache_read(A, "local", [C])\ns[AL].compute_at(s[C], i)',
     's.cache_read(A, "local", [A])', ""),
    ("cache_write", "Schedule", MATMUL,
     'CL = s.cache_write(C, "local")\ns[CL].compute_at(s[C], s[C].op.axis[0])',
     's.cache_write(A, "local")   # an input: nothing computes it',
     "The new stage computes into a local buffer; the original stage copies it out."),
    ("rfactor", "Schedule", ROWSUM,
     "ko, ki = s[B].split(k, factor=16)\nBF = s.rfactor(B, ki)",
     "s.rfactor(B, s[B].op.axis[0])",
     "The partial results can then be vectorized or parallelized (lesson 9).  A reduce axis "
     "the split does not touch stays the same IterVar in `BF`; a reduction's `init=` is "
     "applied when `B` merges the partial results."),
]


def run(code: str, env: dict) -> None:
    exec(compile(code, "<example>", "exec"), env)  # noqa: S102 (our own example code)


def fence(code: str, lang: str = "python") -> str:
    return f"```{lang}\n{code.rstrip()}\n```\n"


def page(name: str, owner: str, setup: str, example: str, refused: str, note: str) -> str:
    env: dict = {"td": td}
    run(setup, env)
    before = str(td.lower(env["s"], env["args"]))
    run(example, env)
    after = str(td.lower(env["s"], env["args"]))
    if before == after and name not in ("pragma", "double_buffer", "set_scope"):
        raise SystemExit(f"gen_primitives: the example of {name} changes nothing")
    renv: dict = {"td": td}
    if not refused.startswith(setup[:20]) and "td.placeholder" not in refused:
        run(setup, renv)
    try:
        run(refused, renv)
    except td.TDSLError as e:
        error = f"{type(e).__name__}: {e}"
    else:
        raise SystemExit(f"gen_primitives: the refusal example of {name} was accepted")
    method = getattr(td.Stage if owner == "Stage" else td.Schedule, name)
    call = f"s[T].{name}" if owner == "Stage" else f"s.{name}"
    sig = str(inspect.signature(method)).replace("(self, ", "(").replace("(self)", "()")
    out = [f"# {name}\n", fence(f"{call}{sig}"),
           f"```{{eval-rst}}\n.. automethod:: tdsl.{owner}.{name}\n   :no-index:\n```\n"]
    if note:
        out.append(note + "\n")
    out += ["## Example\n", fence(setup + example), "## Before\n", fence(before),
            "## After\n", fence(after), "## What it refuses\n", fence(refused),
            fence(textwrap.fill(error, 96, break_long_words=False, break_on_hyphens=False),
                  "text")]
    return "\n".join(out)


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for name, owner, setup, example, refused, note in PRIMITIVES:
        (out / f"{name}.md").write_text(page(name, owner, setup, example, refused, note))
        names.append(name)
    toc = "\n".join(names)
    (out / "index.md").write_text(
        "# Schedule primitives\n\nOne page per primitive: the example's loop nest before and "
        "after, and what the primitive refuses, with the error it raises. Every example runs "
        "when the documentation is built.\n\n"
        f"```{{toctree}}\n:maxdepth: 1\n\n{toc}\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/_generated/primitives"))
