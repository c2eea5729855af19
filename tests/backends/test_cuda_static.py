"""Static performance checks of CUDA kernels (issue 26 point 3; ``backends/cuda/static``).

Each check fails on a kernel with a planted defect and passes on the clean version of
the same kernel: a spill, a 32-way bank conflict (a transpose through an unpadded shared
tile), an uncoalesced global read (a transpose without shared memory), a single-warp block
whose shared tile leaves 3 warps per SM, missing cp.async / mma instructions, and a conv2d
fetch whose 16-byte loads were rendered as 4-byte copies.  The
defaults of ``ops.schedule(out, "cuda")`` (the workloads of ``benchmarks/cuda_static.py``)
must not spill and must find the instructions they ask for; their bank-conflict and
coalescing figures may not get worse than the ceilings below (the known defects).
"""
import os
import sys
import warnings

import pytest

import tdsl as td
from tdsl.backends.cuda import nvrtc
from tdsl.backends.cuda.static import (CUDASpillWarning, analyze, conflict_ways, occupancy,
                                       sectors, warp_accesses)
from tdsl.backends.cuda.static.instructions import instruction_findings, ptx_entries

from .cuda_workloads import register_hungry

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC (cuda-python) is not installed")


# ---- the measures on hand-made warp requests ---------------------------------------------
def _req(addrs, width=4):
    return tuple((a, width) for a in addrs)


def test_bank_ways_of_strided_and_broadcast_requests():
    assert conflict_ways(_req(range(0, 128, 4))) == 1            # consecutive words
    assert conflict_ways(_req([0] * 32)) == 1                    # one word: a broadcast
    assert conflict_ways(_req(range(0, 256, 8))) == 2            # stride 2 words
    assert conflict_ways(_req(range(0, 32 * 128, 128))) == 32    # a column of a 32-wide tile
    assert conflict_ways(_req(range(0, 32 * 132, 132))) == 1     # ... padded to 33
    assert conflict_ways(_req(range(0, 64, 2), 2)) == 1          # halves sharing words
    assert conflict_ways(_req(range(0, 512, 16), 16)) == 1       # float4, by quarter warp
    assert conflict_ways(_req(range(0, 1024, 32), 16)) == 2      # float4 at a 32-byte stride
    assert conflict_ways((None,) * 32) == 0


def test_sectors_of_coalesced_and_strided_requests():
    assert sectors(_req(range(0, 128, 4))) == (4, 4)
    assert sectors(_req([64] * 32)) == (1, 1)
    assert sectors(_req(range(0, 32 * 4096, 4096))) == (32, 4)   # a column walk
    assert sectors(_req(range(4, 132, 4))) == (5, 4)             # misaligned by one float
    assert sectors(_req(range(0, 512, 16), 16)) == (16, 16)


def test_occupancy_matches_the_calculator():
    o = occupancy("sm_80", 128, 0, 256)       # 4096 registers a warp: 4 warps a partition
    assert (o.blocks_per_sm, o.limiter) == (2, "registers")
    o = occupancy("sm_80", 32, 48 * 1024, 256)  # 48 KB + 1 KB reserved: 3 of 164 KB
    assert (o.blocks_per_sm, o.limiter) == (3, "shared memory")
    o = occupancy("sm_90", 32, 48 * 1024, 256)
    assert o.blocks_per_sm == 4
    o = occupancy("sm_90", 16, 0, 32)
    assert (o.blocks_per_sm, o.limiter) == (32, "blocks")
    assert occupancy("sm_80", 255, 0, 1024).blocks_per_sm == 0   # cannot launch


# ---- planted defects ---------------------------------------------------------------------
def _transpose(shared: bool, pad: bool):
    """B = A^T with threadIdx.x along B's columns: a column read of A (uncoalesced), or of
    a shared tile of A (bank conflicts unless its rows are padded)."""
    A = td.placeholder((64, 64), name="A")
    B = td.compute((64, 64), lambda i, j: A[j, i], name="B")
    s = td.create_schedule(B.op)
    i, j = s[B].op.axis
    bi, ti = s[B].split(i, factor=32)
    bj, tj = s[B].split(j, factor=32)
    s[B].reorder(bi, bj, ti, tj)
    s[B].bind(bi, td.thread_axis("blockIdx.y"))
    s[B].bind(bj, td.thread_axis("blockIdx.x"))
    s[B].bind(tj, td.thread_axis("threadIdx.x"))
    if shared:
        AS = s.cache_read(A, "shared", [B])
        s[AS].compute_at(s[B], bj)
        r, c = s[AS].op.axis
        if pad:
            s[AS].storage_align(r, 32, 1)
        s[AS].bind(c, td.thread_axis("threadIdx.x"))
    return td.build(s, [A, B], target="cuda -arch=sm_80")


def _checks(f, check):
    return [x for ks in analyze(f) for x in ks.findings if x.check == check]


@needs_nvrtc
def test_bank_conflict_check_sees_an_unpadded_transpose_tile():
    bad = _checks(_transpose(True, False), "bank")
    assert len(bad) == 1 and bad[0].amount == 32 and "A.shared" in bad[0].detail
    assert _checks(_transpose(True, True), "bank") == []
    assert _checks(_transpose(True, True), "coalescing") == []


@needs_nvrtc
def test_coalescing_check_sees_a_column_read():
    bad = _checks(_transpose(False, False), "coalescing")
    assert len(bad) == 1 and bad[0].amount == 8 and "load of A" in bad[0].detail
    # the shared-tile version reads rows of A and writes rows of B
    ks = analyze(_transpose(True, True))[0]
    assert ks.sector_ratio == 1.0


def _spilling(v: int):
    s, args = register_hungry(v)
    return td.build(s, args, target="cuda -arch=sm_90")


@needs_nvrtc
def test_a_spilling_user_kernel_warns_naming_kernel_and_bytes():
    with pytest.warns(CUDASpillWarning) as got:
        f = _spilling(8)
    text = str(got[0].message)
    spill = _checks(f, "spill")
    assert len(spill) == 1 and spill[0].amount > 0
    assert "'default_function_kernel'" in text and spill[0].detail in text
    assert got[0].filename == __file__          # points at the build call, not into tdsl
    with warnings.catch_warnings():
        warnings.simplefilter("error", CUDASpillWarning)
        clean = _spilling(2)
    assert _checks(clean, "spill") == []


def _wide(threads_y: int):
    """B = 2 A with a 32 x 352 shared tile of A (45 KB) per block of 32 x threads_y."""
    A = td.placeholder((64, 352), name="A")
    B = td.compute((64, 352), lambda i, j: A[i, j] * 2.0, name="B")
    s = td.create_schedule(B.op)
    i, j = s[B].op.axis
    bi, ii = s[B].split(i, factor=32)
    jo, tj = s[B].split(j, factor=32)
    io, ti = s[B].split(ii, factor=threads_y)
    s[B].reorder(bi, io, jo, ti, tj)
    s[B].bind(bi, td.thread_axis("blockIdx.x"))
    s[B].bind(ti, td.thread_axis("threadIdx.y"))
    s[B].bind(tj, td.thread_axis("threadIdx.x"))
    AS = s.cache_read(A, "shared", [B])
    s[AS].compute_at(s[B], bi)
    r, c = s[AS].op.axis
    _, ct = s[AS].split(c, factor=32)
    s[AS].bind(ct, td.thread_axis("threadIdx.x"))
    if threads_y > 1:
        _, rt = s[AS].split(r, factor=threads_y)
        s[AS].bind(rt, td.thread_axis("threadIdx.y"))
    return td.build(s, [A, B], target="cuda -arch=sm_80")


@needs_nvrtc
def test_occupancy_check_sees_one_warp_blocks_with_a_big_tile():
    bad = _checks(_wide(1), "occupancy")
    assert len(bad) == 1 and "sm_80" in bad[0].detail and bad[0].amount == 3
    assert _checks(_wide(4), "occupancy") == []


def _default(name: str, arch: str = "sm_90"):
    from cuda_static import _workloads
    from tdsl import ops
    ins, out = _workloads()[name]()
    return td.build(ops.schedule(out, "cuda"), [*ins, out], target=f"cuda -arch={arch}")


@needs_nvrtc
def test_instruction_check_sees_missing_cp_async():
    f = _default("matmul", "sm_80")
    k = f.kernels[0]
    src = f.get_source()
    ptx = ptx_entries(nvrtc.compile_cuda(src, "sm_80", "ptx").decode())[k.name]
    want, have, bad = instruction_findings(k, 80, ptx)
    assert want == {"cp.async", "ld.v4"} <= have and bad == []
    # the same fills as plain copies (what a code generator falling back would emit)
    plain = src.replace('asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(s), '
                        '"l"(src), "n"(B) : "memory");',
                        "for (int b = 0; b < B / (int)sizeof(T); ++b) dst[b] = src[b];")
    assert plain != src
    ptx = ptx_entries(nvrtc.compile_cuda(plain, "sm_80", "ptx").decode())[k.name]
    _, _, bad = instruction_findings(k, 80, ptx)
    assert len(bad) == 1 and "cp.async" in bad[0].detail
    # before sm_80 nothing asks for cp.async
    assert "cp.async" not in instruction_findings(k, 75, "")[0]


#: The prelude's vector helpers as element copies: what a code generator falling back to
#: 4-byte fetches would emit (a plain pointer has no 16-byte alignment nvcc could rely on).
SCALAR_HELPERS = {
    "return *(const V*)p; }":
        "V v; for (int i = 0; i < (int)(sizeof(V) / sizeof(T)); ++i) ((T*)&v)[i] = p[i]; "
        "return v; }",
    'asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(s), "l"(src), "n"(B) : '
    '"memory");': "for (int b = 0; b < B / (int)sizeof(T); ++b) dst[b] = src[b];"}


@needs_nvrtc
@pytest.mark.parametrize("name", ["conv2d", "conv2d_s2"])
def test_conv_fetch_is_16_byte_coalesced_loads(name):
    """conv2d's fetch (issue 26): the input rows (from the padded start rounded down) and
    the weights' 8-tap runs are read by 16-byte lanes, whole sectors per request, and the
    PTX has those 16-byte loads; the same kernel with 4-byte copies planted is a finding."""
    f = _default(name)
    k = f.kernels[0]
    fetch = [x for x in warp_accesses(k) if x.buffer.name in ("D", "K") and not x.store]
    assert {x.buffer.name for x in fetch} == {"D", "K"}
    for x in fetch:
        for q in x.requests:
            assert {a[1] for a in q if a} == {16}, x.label
            got, fewest = sectors(q)
            assert got == fewest, (x.label, got, fewest)
    src = f.get_source()
    ptx = ptx_entries(nvrtc.compile_cuda(src, "sm_90", "ptx").decode())[k.name]
    want, have, bad = instruction_findings(k, 90, ptx)
    assert "ld.v4" in want and "ld.v4" in have and bad == []
    planted = src
    for old, new in SCALAR_HELPERS.items():
        assert old in planted
        planted = planted.replace(old, new)
    ptx = ptx_entries(nvrtc.compile_cuda(planted, "sm_90", "ptx").decode())[k.name]
    bad = instruction_findings(k, 90, ptx)[2]
    assert len(bad) == 1 and "ld.v4" in bad[0].detail


@needs_nvrtc
def test_instruction_check_sees_missing_mma():
    f = _default("matmul_fp16")
    k = f.kernels[0]
    ptx = ptx_entries(nvrtc.compile_cuda(f.get_source(), "sm_90", "ptx").decode())[k.name]
    assert instruction_findings(k, 90, ptx)[2] == []
    stripped = "\n".join(x for x in ptx.splitlines() if "mma" not in x)
    bad = instruction_findings(k, 90, stripped)[2]
    assert len(bad) == 1 and "mma" in bad[0].detail


@needs_nvrtc
def test_a_tensor_core_kernel_is_not_judged_by_the_ir_nest_it_replaces():
    """The masked attention microkernel replaces a per-output reference nest whose loads a
    warp would make uncoalesced (Q, the mask, the output): the walk skips that nest."""
    f = _default("attention_fp16_mask")
    assert "tdsl_fa<" in f.get_source()
    (ks,) = analyze(f, "sm_90")
    assert ks.spill_bytes == 0 and ks.found >= {"mma", "ldmatrix", "cp.async"}, ks
    assert [str(x) for x in ks.findings if x.check == "coalescing"] == []



    f = _spilling(2)
    b = next(s for s in warp_accesses(f.kernels[0], {"m": 64}) if s.buffer.name == "B")
    assert b.requests[0][:2] == ((0, 4), (8, 4)) and b.requests[0][31] == (248, 4)
    # m = 48: a block of 24 threads, so lanes 24..31 make no access
    b = next(s for s in warp_accesses(f.kernels[0], {"m": 48}) if s.buffer.name == "B")
    assert b.requests[0][23] == (184, 4) and b.requests[0][24:] == (None,) * 8


# ---- the defaults ------------------------------------------------------------------------
#: (bank ways, sectors / fewest) no kernel of the workload's default may exceed: today's
#: figures on sm_90.  The matmul family and conv2d are conflict free and, but for the
#: inputs' own misalignment, coalesced: matmul_odd's rows of 517 and 1021 floats (1.875),
#: conv2d_late's split-K sum storing NCHW planes of 49 pixels (1.5: a warp's 32 pixels
#: span two planes, 196 bytes apart); conv2d's input patches are fetched from whole
#: sectors (float4 rows from the padded start rounded down: 1.0; they were 2.25, 18-float
#: rows a float before a 64-byte line), but for conv2d_tail's 30-float rows (scalar, 1.75)
#: and conv2d_late's 7-float rows (scalar, 1.333).  conv2d's split-K partial sums are
#: whole sectors (1.0): they were 2.0 in NHWC, where a thread's 8 channels of a pixel are
#: one sector stored as two float4 requests that each touch half of it; they are now
#: (slices, N, CO/4, OH, OW, 4) (rfactor's blocked layout), a lane's float4 next to its
#: neighbour pixel's.
#: Attention (causal, 32 queries a block) reads Q along its rows into a
#: shared tile, writes its output 16 bytes a lane along rows, and its score / probability
#: tiles are padded (no bank conflict).  The tensor-core kernels (matmul_fp16, conv2d_fp16,
#: attention_fp16_mask) are C++ templates the IR walk does not see: their bank column is
#: counted by emulating a small instance (ldmatrix and cp.async phases, test_cuda_tc_banks.py:
#: 1 where g++ runs, else 0) and their global requests are not walked (0.0).
CEILINGS = {"matmul": (1, 1.0), "matmul_fp16": (1, 1.0), "dense": (1, 1.0),
            "batch_matmul": (1, 1.0), "conv2d": (1, 1.0), "conv2d_s2": (1, 1.0),
            "matmul_tail": (1, 1.0), "matmul_odd": (1, 1.875), "dense_small_m": (1, 1.0),
            "conv2d_tail": (1, 1.75), "conv2d_late": (1, 1.5), "conv2d_fp16": (1, 1.0),
            "softmax": (1, 1.0), "layernorm": (1, 1.0), "attention": (1, 1.0),
            "attention_fp16_mask": (1, 1.0), "elementwise": (1, 1.0)}


@pytest.fixture(scope="module")
def default_rows():
    from cuda_static import report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CUDASpillWarning)   # judged by the tests below
        rows = report("sm_90")
    out: dict = {}
    for r in rows:
        out.setdefault(r.kernel.split(":")[0], []).append(r)
    return out


def test_every_default_workload_has_a_ceiling():
    from cuda_static import _workloads
    assert set(_workloads()) == set(CEILINGS)


@needs_nvrtc
@pytest.mark.parametrize("name", list(CEILINGS))
def test_default_kernels_do_not_spill(default_rows, name):
    assert [(r.kernel, r.spill_bytes) for r in default_rows[name] if r.spill_bytes] == []


@needs_nvrtc
@pytest.mark.parametrize("name", list(CEILINGS))
def test_default_kernels_within_ceilings(default_rows, name):
    ways, ratio = CEILINGS[name]
    for r in default_rows[name]:
        assert r.bank_ways <= ways, (r.kernel, r.findings)
        assert r.sector_ratio <= ratio, (r.kernel, r.findings)
        bad = [f for f in r.findings or [] if f.startswith(("occupancy", "instructions"))]
        assert bad == [], r.kernel
        assert r.blocks_sm80 >= 1 and r.blocks_sm90 >= 1


def test_sass_listing_is_split_per_function_and_read(tmp_path, monkeypatch):
    """cuobjdump's SASS (where it is installed): functions split by their header, HMMA /
    LDGSTS / LDSM found; an expected instruction in the SASS only counts as found."""
    from types import SimpleNamespace

    from tdsl.backends.cuda.static.instructions import instruction_findings, sass_functions
    listing = ("\n\tcode for sm_90\n\t\tFunction : k_one\n\t/*0000*/ LDGSTS.E.BYPASS.128 [R1], "
               "desc[UR4][R2.64] ;\n\t/*0010*/ LDSM.16.M88.4 R4, [R5] ;\n"
               "\t\tFunction : k_two\n\t/*0000*/ HMMA.16816.F32 R0, R4, R8, R0 ;\n")
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n" + listing + "EOF\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    got = sass_functions(b"\x7fELF not read by the fake")
    assert set(got) == {"k_one", "k_two"} and "LDSM" in got["k_one"] and "HMMA" in got["k_two"]
    from tdsl.stmt import SeqStmt
    kernel = SimpleNamespace(name="k_two", source="wmma::mma_sync(c, a, b, c);",
                             root=SeqStmt([]))
    assert instruction_findings(kernel, 90, "", got["k_two"])[2] == []
    assert len(instruction_findings(kernel, 90, "", got["k_one"])[2]) == 1


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_small_tile_defaults_are_conflict_free_and_coalesced(arch):
    """The 64- and 32-wide block tiles of the matmul family (2 and 1 columns a thread),
    dense's W tile fetched along K, and conv2d's 8 x 8 and 4 x 16 pixel tiles: no bank
    conflict, no spill, no request at twice the sectors it needs (but the 1x1 conv's
    NCHW stores of 14-pixel rows: 8 lanes' 32 bytes start mid-sector)."""
    from tdsl import ops
    A, B = td.placeholder((96, 64), name="A"), td.placeholder((64, 160), name="B")
    X, W = td.placeholder((200, 48), name="X"), td.placeholder((72, 48), name="W")
    D = td.placeholder((2, 16, 14, 20), name="D")
    K = td.placeholder((32, 16, 3, 3), name="K")
    # a 1x1 kernel on 14-wide rows (scalar fetch): rows of 8 words, the 8 x 8 tile's row
    # groups (4 rows apart) on the same banks unless they are in different warps
    D1, K1 = td.placeholder((1, 12, 10, 14), name="D1"), td.placeholder((20, 12, 1, 1), name="K1")
    for ins, out in (([A, B], ops.matmul(A, B)), ([X, W], ops.dense(X, W)),
                     ([D, K], ops.conv2d(D, K, padding=1)), ([D1, K1], ops.conv2d(D1, K1))):
        f = td.build(ops.schedule(out, "cuda"), [*ins, out], target=f"cuda -arch={arch}")
        for ks in analyze(f):
            assert ks.bank_ways <= 1, (out.name, ks.findings)
            assert ks.sector_ratio < 2.0 or ins[0] is D1, (out.name, ks.findings)
            assert ks.spill_bytes == 0, (out.name, ks.findings)


def _conv(shape, co, stride, arch="sm_90"):
    from tdsl import ops
    D = td.placeholder(shape, name="D")
    K = td.placeholder((co, shape[1], 3, 3), name="K")
    out = ops.conv2d(D, K, stride=stride, padding=1)
    return td.build(ops.schedule(out, "cuda"), [D, K, out], target=f"cuda -arch={arch}")


def _partials_requests(f):
    """(kernel, label, sectors, fewest) of every warp request to the global partial sums."""
    return [(k.name, x.label, *sectors(q)) for k in f.kernels for x in warp_accesses(k)
            if x.buffer.name.startswith("T_conv2d_nhwc.rf") and x.buffer.scope.value == "global"
            for q in x.requests]


@needs_nvrtc
@pytest.mark.parametrize("shape,co,stride", [((1, 256, 14, 14), 256, 1),
                                             ((1, 64, 56, 56), 128, 2),
                                             ((1, 128, 14, 20), 36, 1)])
def test_conv_split_k_partials_are_whole_sector_stores(shape, co, stride):
    """conv2d's split-K partial sums (issue 26): where 4 divides the channels they are
    (slices, N, CO/4, OH, OW, 4), so each warp store request of kernel 1 and each load of
    kernel 2 touches the fewest 32-byte sectors (rows of an even number of pixels: 7-pixel
    rows start mid-sector, conv2d_late's ceiling); with 510 channels (NHWC partials, not
    16-byte aligned: scalar stores) the same check sees twice the sectors or more."""
    f = _conv(shape, co, stride)
    assert len(f.kernels) == 2
    got = _partials_requests(f)
    assert {r[0] for r in got} == {k.name for k in f.kernels}    # stored, then loaded
    assert [r for r in got if r[2] != r[3]] == []
    nhwc = _partials_requests(_conv(shape, 510, stride))
    assert nhwc and all(r[2] >= 2 * r[3] for r in nhwc if r[0] == f.kernels[0].name)


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("shape,co", [((1, 64, 28, 28), 128),    # float4 rows, split-K
                                      ((8, 64, 28, 28), 128),    # float4 rows
                                      ((2, 16, 14, 14), 32),     # scalar rows
                                      ((1, 32, 30, 30), 64)])    # scalar rows, split-K
def test_stride_2_square_tile_reads_are_conflict_free(arch, shape, co):
    """The 8 x 8 pixel tile at stride 2 (outputs under 16 wide): a warp holding both its
    row groups (tile rows 0-3 and 4-7, input rows 8 apart) read the same even banks
    whatever the 16-byte aligned pitch (2-way); each warp now holds one row group and four
    channel groups (8 input words broadcast, 4 weight float4s)."""
    f = _conv(shape, co, 2, arch)
    main = analyze(f, arch)[0]
    assert main.bank_ways == 1, [str(x) for x in main.findings]
