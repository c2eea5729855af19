"""Every public schedule primitive checks its arguments before changing anything: a wrong
argument is a ScheduleError naming the primitive and the stage, never a DTypeError from
deep inside, and the schedule (and its trace) are left exactly as they were."""
import pytest

import tdsl as td


def _setup():
    A = td.placeholder((8, 8), name="A")
    B = td.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    k = td.reduce_axis((0, 8), name="k")
    C = td.compute((8,), lambda i: td.sum(B[i, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    return s, A, B, C


class _NotAnIntrin:
    pass


# (primitive, stage it is called on, call)
CASES = [
    ("compute_at", "B", lambda s, A, B, C: s[B].compute_at(s[C], None)),
    ("compute_at", "B", lambda s, A, B, C: s[B].compute_at(s[C], "i")),
    ("compute_at", "B", lambda s, A, B, C: s[B].compute_at(C, C.op.axis[0])),
    ("compute_at", "B", lambda s, A, B, C: s[B].compute_at(s[C], B.op.axis[0])),
    ("storage_align", "B", lambda s, A, B, C: s[B].storage_align("i", 8, 1)),
    ("storage_align", "B", lambda s, A, B, C: s[B].storage_align(None, 8, 1)),
    ("storage_align", "B", lambda s, A, B, C: s[B].storage_align(B.op.axis[0], 8.0, 1)),
    ("storage_align", "B", lambda s, A, B, C: s[B].storage_align(C.op.axis[0], 8, 1)),
    ("split", "B", lambda s, A, B, C: s[B].split(None, factor=2)),
    ("split", "B", lambda s, A, B, C: s[B].split("i", factor=2)),
    ("split", "B", lambda s, A, B, C: s[B].split(B.op.axis[0], factor=2.5)),
    ("split", "B", lambda s, A, B, C: s[B].split(B.op.axis[0], factor="4")),
    ("split", "B", lambda s, A, B, C: s[B].split(B.op.axis[0], factor=True)),
    ("split", "B", lambda s, A, B, C: s[B].split(B.op.axis[0], factor=B.op.axis[1])),
    ("split", "B", lambda s, A, B, C: s[B].split(B.op.axis[0], factor=td.var("m"))),
    ("split", "B", lambda s, A, B, C: s[B].split(C.op.axis[0], factor=2)),
    ("split", "B", lambda s, A, B, C: s[B].split(B.op.axis[0])),
    ("fuse", "B", lambda s, A, B, C: s[B].fuse("i", "j")),
    ("fuse", "B", lambda s, A, B, C: s[B].fuse(B.op.axis[0], None)),
    ("reorder", "B", lambda s, A, B, C: s[B].reorder("j", "i")),
    ("reorder", "B", lambda s, A, B, C: s[B].reorder(B.op.axis[0], B.op.axis[0])),
    ("tile", "B", lambda s, A, B, C: s[B].tile("i", B.op.axis[1], 4, 4)),
    ("tile", "B", lambda s, A, B, C: s[B].tile(B.op.axis[0], B.op.axis[0], 4, 4)),
    ("tile", "B", lambda s, A, B, C: s[B].tile(B.op.axis[0], B.op.axis[1], 4, 0)),
    ("tile", "B", lambda s, A, B, C: s[B].tile(B.op.axis[0], B.op.axis[1], 4, None)),
    ("vectorize", "B", lambda s, A, B, C: s[B].vectorize(None)),
    ("unroll", "B", lambda s, A, B, C: s[B].unroll("i")),
    ("parallel", "B", lambda s, A, B, C: s[B].parallel(C.op.axis[0])),
    ("bind", "B", lambda s, A, B, C: s[B].bind(B.op.axis[0], "threadIdx.x")),
    ("bind", "B", lambda s, A, B, C: s[B].bind("i", td.thread_axis("threadIdx.x"))),
    ("pragma", "B", lambda s, A, B, C: s[B].pragma("i", "unroll_explicit")),
    ("pragma", "B", lambda s, A, B, C: s[B].pragma(B.op.axis[0], 3)),
    ("pragma", "B", lambda s, A, B, C: s[B].pragma(B.op.axis[0], "x", object())),
    ("tensorize", "B", lambda s, A, B, C: s[B].tensorize("i", None)),
    ("tensorize", "B", lambda s, A, B, C: s[B].tensorize(B.op.axis[0], _NotAnIntrin())),
    ("set_scope", "B", lambda s, A, B, C: s[B].set_scope(3)),
    ("set_scope", "B", lambda s, A, B, C: s[B].set_scope("texture")),
    ("cache_read", None, lambda s, A, B, C: s.cache_read("A", "local", [B])),
    ("cache_read", "A", lambda s, A, B, C: s.cache_read(A, "register", [B])),
    ("cache_read", "A", lambda s, A, B, C: s.cache_read(A, "local", ["B"])),
    ("cache_read", "A", lambda s, A, B, C: s.cache_read(A, "local", [C])),
    ("cache_read", "A", lambda s, A, B, C: s.cache_read(A, "local", [])),
    ("cache_write", None, lambda s, A, B, C: s.cache_write("C", "local")),
    ("cache_write", "C", lambda s, A, B, C: s.cache_write(C, 5)),
    ("cache_write", "A", lambda s, A, B, C: s.cache_write(A, "local")),
    ("rfactor", "C", lambda s, A, B, C: s.rfactor(C, "k")),
    ("rfactor", "C", lambda s, A, B, C: s.rfactor(C, C.op.reduce_axis[0], "0")),
    ("rfactor", "C", lambda s, A, B, C: s.rfactor(C, C.op.axis[0])),
    ("rfactor", None, lambda s, A, B, C: s.rfactor(None, C.op.reduce_axis[0])),
    ("compute_inline", "C", lambda s, A, B, C: s[C].compute_inline()),
    ("compute_root", "A", lambda s, A, B, C: s[A].compute_root()),
    ("double_buffer", "B", lambda s, A, B, C: s[B].double_buffer()),
]


def _state(s, args):
    return (td.lower(s, args).script(), s.trace.to_json(), [st.name for st in s.stages])


@pytest.mark.parametrize("primitive,stage,call", CASES, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(CASES)])
def test_bad_argument_is_a_schedule_error_naming_primitive_and_stage(primitive, stage, call):
    s, A, B, C = _setup()
    before = _state(s, [A, C])
    with pytest.raises(td.ScheduleError) as info:
        call(s, A, B, C)
    msg = str(info.value)
    assert msg.startswith(f"{primitive}:"), msg
    if stage is not None:
        assert f"'{stage}'" in msg, msg
    assert _state(s, [A, C]) == before


def test_symbolic_split_in_the_computation_is_fine():
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], nparts=n)      # was refused by the trace recorder, after mutating
    assert [v.name for v in s[B].leaf_iter_vars] == ["i.outer", "i.inner"] and len(s.trace) == 1
