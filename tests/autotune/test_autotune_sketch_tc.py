"""The tensor-core knob of the CUDA sketch (autotune/sketch_tc.py) and the microkernel's tile
shapes (tdsl/ops/schedules/tc_config.py): the space of an fp16/bf16 matmul, dense or batch
matmul holds every checked shape; each candidate, replayed from its trace as the tuner does,
is correct under the CPU emulator at sizes no tile divides and assembles without spills.

The per-shape checks take every fourth shape and the last (each op, seven of the eight block
tiles and every pipeline depth among them; about a minute): the shapes are one template's constants.  ``TDSL_ALL_TC_SHAPES=1``
checks all of them (about four minutes)."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.autotune.auto_schedule import create_auto_task
from tdsl.autotune.replay import replay
from tdsl.backends.cuda import nvrtc
from tdsl.errors import BuildError, ScheduleError
from tdsl.ops.schedules.tc_config import CONFIGS, DEFAULT, TcConfig, parse

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC (cuda-python) is not installed")
SM80 = "cuda -arch=sm_80"
#: the shapes checked one by one (see the module docstring)
SHAPES = range(len(CONFIGS)) if os.environ.get("TDSL_ALL_TC_SHAPES") else \
    sorted({*range(0, len(CONFIGS), 4), len(CONFIGS) - 1})


def _np(dt: str):
    if dt == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
        return ml_dtypes.bfloat16
    return np.float16


def _matmul(M, N, K, dt):
    A = td.placeholder((M, K), dt, name="A")
    B = td.placeholder((K, N), dt, name="B")
    return [A, B, ops.matmul(A, B, out_dtype="float32")], lambda a, b: a @ b


def _dense(M, N, K, dt):
    X = td.placeholder((M, K), dt, name="X")
    W = td.placeholder((N, K), dt, name="W")
    bias = td.placeholder((N,), "float32", name="bias")
    return ([X, W, bias, ops.dense(X, W, bias, activation="relu", out_dtype="float32")],
            lambda x, w, b: np.maximum(x @ w.T + b, 0))


def _bmm(M, N, K, dt):
    P = td.placeholder((2, M, K), dt, name="P")
    Q = td.placeholder((2, K, N), dt, name="Q")
    return [P, Q, ops.batch_matmul(P, Q, out_dtype="float32")], lambda p, q: p @ q


def _tc_point(task, key: str) -> tuple:
    """The point of ``task`` with tensor-core shape ``key`` (other knobs at their first)."""
    names = list(task.space.knobs)
    (tc,) = [n for n in names if n.endswith(".tc")]
    pt = [0] * len(names)
    pt[names.index(tc)] = task.space.knobs[tc].index_of(key)
    return tuple(pt)


def test_checked_shapes_are_valid_and_others_refused():
    assert CONFIGS[0] == DEFAULT and len(set(CONFIGS)) == len(CONFIGS) > 1
    for c in CONFIGS:
        assert c.error() is None and parse(c.key()) == c
    bad = [TcConfig(256, 128, 128, 64),         # 256 accumulators per thread: spills
           TcConfig(128, 32, 64, 32),           # 32 columns: B rows too short to swizzle
           TcConfig(128, 128, 64, 32),          # 8 warp tiles for 4 warps
           TcConfig(128, 128, 64, 64, 5),       # pipeline depth
           TcConfig(mainloop="fast")]           # no such mainloop
    for c in bad:
        assert c.error() is not None, c
    assert parse("128x128x16/w64x64/s4") is None and parse("junk") is None
    # the checked shapes run the mainloop; the removed "basic" one parses from its key
    # (a tuning record's) to a config refused with the reason
    assert {c.mainloop for c in CONFIGS} == {"frag"}
    basic = TcConfig(mainloop="basic")
    assert basic.key() == "128x128x32/w64x64/s4/basic" and parse(basic.key()) == basic
    assert "removed" in basic.error()
    for key in ("128x128x32/w64x64/s4/frag", "128x128x32/w64x64/s4/basic/x",
                "128x128x32/w64x64/s4/fast"):
        got = parse(key)
        assert got is None or got.error() is not None, key
    args, _ = _matmul(64, 64, 64, "float16")
    s = td.create_schedule(args[-1].op)
    from tdsl.ops.schedules import cuda_gemm, cuda_tc
    st = s[args[-1].op]
    with pytest.raises(ScheduleError, match="tensor-core tile 256x128x32/w128x64/s4"):
        cuda_tc.schedule_tc(s, st, None, cuda_gemm._pack_of(s, st), bad[0])


def test_a_malformed_pragma_value_is_refused():
    args, _ = _matmul(130, 72, 40, "float16")
    task = create_auto_task(args, target=SM80)
    trace = task.candidate(_tc_point(task, DEFAULT.key())).trace
    assert DEFAULT.key() in trace
    for bad, why in [("128x128x32/w64x64/s9", "pipeline depth 9"), ("nonsense", "malformed"),
                     ("128x128x32/w64x64/s4/basic", "'basic': the first mainloop was removed")]:
        sch = replay(trace.replace(DEFAULT.key(), bad), task.outputs)
        with pytest.raises(BuildError, match=f"tdsl_tc_gemm.*{bad}.*{why}"):
            td.build(sch, args, target=SM80)


@pytest.mark.parametrize("make,dt", [(_matmul, "float16"), (_dense, "bfloat16"),
                                     (_bmm, "float16")])
def test_space_holds_every_checked_shape(make, dt):
    args, _ = make(70, 72, 40, dt)
    task = create_auto_task(args, target=SM80)
    (tc,) = [k for n, k in task.space.knobs.items() if n.endswith(".tc")]
    keys = [e.value for e in tc.entities]
    assert keys == [""] + [c.key() for c in CONFIGS]     # "" keeps the generic tiling
    # the tuner skips a candidate whose program it has seen: every shape is a new program
    hashes = {task.candidate(_tc_point(task, c.key())).prog_hash for c in CONFIGS}
    assert len(hashes) == len(CONFIGS)


def test_no_tensor_core_knob_where_the_default_has_none():
    for target, dt in [("cuda -arch=sm_75", "float16"), (SM80, "float32")]:
        args, _ = _matmul(64, 64, 64, dt)
        task = create_auto_task(args, target=target)
        assert not any(n.endswith(".tc") for n in task.space.knobs)


@needs_gxx
@pytest.mark.parametrize("n", SHAPES)
def test_every_candidate_shape_is_correct_under_the_emulator(n):
    """Each shape on one of the three ops (in turn), at sizes none of its tiles divide."""
    cfg = CONFIGS[n]
    make, dt = [(_matmul, "float16"), (_dense, "bfloat16"), (_bmm, "float16")][n % 3]
    args, ref = make(70, 72, 40, dt)
    task = create_auto_task(args, target=SM80)
    c = task.candidate(_tc_point(task, cfg.key()))
    assert c.valid, c.error
    f = td.build(replay(c.trace, task.outputs), args, target=SM80)
    assert f"{cfg.bm}, {cfg.bn}, {cfg.wm}, {cfg.wn}, {cfg.stages}, " in f.get_source()
    assert len(f.kernels) == 1          # the epilogue (dense: bias, relu) runs on the registers
    g = np.random.default_rng(n)
    ins = [(g.random([int(d) for d in t.shape]) - .5).astype(
        _np(dt) if str(t.dtype) == dt else "float32") for t in args[:-1]]
    out = np.full([int(d) for d in args[-1].shape], np.nan, "float32")
    f.emulate(*ins, out)
    np.testing.assert_allclose(out, ref(*[x.astype("float32") for x in ins]),
                               rtol=1e-5, atol=1e-5)


@needs_nvrtc
@pytest.mark.parametrize("n", SHAPES)
def test_every_shape_assembles_without_spills(n):
    """ptxas for sm_80 and sm_90, both B layouts: no spill, at most 255 registers, and the
    shared memory within the smaller (sm_80) opt-in limit."""
    from tdsl.backends.cuda.cubin import ptxas_report
    cfg = CONFIGS[n]
    assert cfg.smem_bytes <= 163 * 1024
    for arch in ("sm_80", "sm_90"):
        for make in (_matmul, _dense):
            args, _ = make(4096, 4096, 4096, "float16")
            task = create_auto_task(args, target=f"cuda -arch={arch}")
            c = task.candidate(_tc_point(task, cfg.key()))
            f = td.build(replay(c.trace, task.outputs), args, target=f"cuda -arch={arch}")
            (k,) = f.kernels
            assert k.dynamic_shared_bytes == cfg.smem_bytes
            (rep,) = ptxas_report(f.get_source(), arch).values()
            assert rep.spill_stores == rep.spill_loads == rep.frame_bytes == 0, (cfg, arch, rep)
            assert rep.registers <= 255, (cfg, arch, rep)


@needs_nvrtc
@pytest.mark.parametrize("n", range(3))
def test_known_small_sizes_assemble_without_spills(n):
    """With K known to span two k tiles the compiler could unroll the k-tile loop (ptxas
    then spilled the 3-stage default shape); the kernel keeps one tile's code."""
    from tdsl.backends.cuda.cubin import ptxas_report
    cfg = CONFIGS[n]
    for make, dt in ((_matmul, "float16"), (_dense, "bfloat16")):
        args, _ = make(70, 72, 40, dt)
        task = create_auto_task(args, target=SM80)
        c = task.candidate(_tc_point(task, cfg.key()))
        f = td.build(replay(c.trace, task.outputs), args, target=SM80)
        (rep,) = ptxas_report(f.get_source(), "sm_80").values()
        assert rep.spill_stores == rep.spill_loads == rep.frame_bytes == 0, (cfg, dt, rep)
