"""Static checks of built CUDA kernels that see performance defects, without a GPU.

Per kernel of a ``CUDAModule``: register spills (ptxas ``-v``, ``spills.py``), shared-memory
bank conflicts of each shared access (``banks.py``), 32-byte sectors per global request
against the fewest possible (``coalesce.py``), both computed from the index expressions for
the lanes of a warp (``lanes.py``), blocks per SM on sm_80 and sm_90 (``occupancy.py``),
and whether mma / cp.async / ldmatrix / 16-byte global loads are in the PTX (and SASS)
where the kernel asks for them (``instructions.py``).  ``analyze`` gathers them; each ``KernelStatic.findings`` lists
the defects (empty for a clean kernel).  ``benchmarks/cuda_static.py`` prints them for
tdsl's default schedules, and the tests hold the defaults to them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .banks import conflict_ways
from .coalesce import sectors
from .findings import Finding
from .lanes import AccessSite, warp_accesses
from .occupancy import Occupancy, occupancy
from .spills import CUDASpillWarning, spill_findings, warn_spills

__all__ = ["analyze", "KernelStatic", "Finding", "CUDASpillWarning", "conflict_ways", "sectors",
           "occupancy", "warp_accesses", "warn_spills", "BANK_WAYS_LIMIT", "SECTOR_RATIO_LIMIT"]

#: A shared access with more ways than this is a bank-conflict finding.
BANK_WAYS_LIMIT = 1
#: A global request touching at least this many times the fewest sectors is a finding.
SECTOR_RATIO_LIMIT = 2.0
#: Fewer resident warps per SM than this is an occupancy finding.
MIN_WARPS_PER_SM = 4
OCCUPANCY_ARCHS = ("sm_80", "sm_90")


@dataclass
class KernelStatic:
    """The static figures and findings of one kernel."""

    kernel: str
    arch: str
    registers: int
    frame_bytes: int
    spill_bytes: int
    shared_bytes: int                 # per block, static + dynamic
    threads: int
    bank_ways: int                    # worst shared access (1: conflict free; 0: none)
    bank_site: str
    sector_ratio: float               # worst global request: sectors / fewest (1: coalesced)
    sector_site: str
    occupancy: dict[str, Occupancy]
    min_blocks_requested: int         # __launch_bounds__' second figure (0: none)
    expected: set[str]
    found: set[str]
    unknown_sites: list[str] = field(default_factory=list)   # data-dependent indices
    findings: list[Finding] = field(default_factory=list)


def analyze(module: Any, arch: Optional[str] = None, sizes: "Mapping[str, int] | None" = None,
            occupancy_archs: tuple[str, ...] = OCCUPANCY_ARCHS) -> list[KernelStatic]:
    """The static figures of every kernel of ``module`` (a CUDA module from ``td.build``)
    assembled for ``arch`` (default: the module's); symbolic sizes from ``sizes``."""
    from .. import nvrtc
    from ..cubin import ptxas_report
    from .instructions import instruction_findings, ptx_entries, sass_functions
    arch = arch or module.target.arch
    source = module.get_source()
    ptxas = ptxas_report(source, arch)
    ptx = ptx_entries(nvrtc.compile_cuda(source, arch, "ptx").decode(errors="replace"))
    sass = sass_functions(nvrtc.compile_cuda(source, arch, "cubin"))
    sm = nvrtc.arch_number(arch)
    out = []
    for k in module.kernels:
        r = ptxas.get(k.name)
        if r is None:
            from ..errors import NVRTCError
            raise NVRTCError(f"NVRTC's ptxas -v log names no kernel {k.name!r} (it names "
                             f"{sorted(ptxas) or 'none'}): the static report needs it")
        threads = k.threads_per_block or k.max_threads
        sites = warp_accesses(k, sizes)
        ways, wsite = _worst(sites, "shared", lambda q: conflict_ways(q))
        ratio, rsite = _worst(sites, "global", _ratio)
        # static and dynamic (the tensor-core GEMM's tiles) shared memory: both are per block
        shared = k.shared_bytes + k.dynamic_shared_bytes
        occ = {a: occupancy(a, r.registers, shared, threads) for a in occupancy_archs}
        want, have, ins = instruction_findings(k, sm, ptx.get(k.name, ""),
                                               (sass or {}).get(k.name))
        ks = KernelStatic(k.name, arch, r.registers, r.frame_bytes,
                          r.spill_stores + r.spill_loads, shared, threads, int(ways),
                          wsite, round(ratio, 3), rsite, occ, _min_blocks(k), want, have,
                          [s.label for s in sites if s.unknown])
        ks.findings = (spill_findings({k.name: r}) + _site_findings(k.name, sites)
                       + _occupancy_findings(ks) + ins)
        out.append(ks)
    return out


def _ratio(request: Any) -> float:
    touched, fewest = sectors(request)
    return touched / fewest if fewest else 0.0


def _worst(sites: list[AccessSite], scope: str, measure: Any) -> tuple[float, str]:
    best, where = 0.0, ""
    for s in sites:
        if s.buffer.scope.value != scope:
            continue
        for q in s.requests:
            m = measure(q)
            if m > best:
                best, where = m, s.label
    return best, where


def _site_findings(name: str, sites: list[AccessSite]) -> list[Finding]:
    out = []
    for s in sites:
        if s.buffer.scope.value == "shared":
            ways = max((conflict_ways(q) for q in s.requests), default=0)
            if ways > BANK_WAYS_LIMIT:
                out.append(Finding(name, "bank", f"{s.label}: {ways}-way shared-memory bank "
                                   f"conflict (a warp request takes {ways} wavefronts)", ways))
        elif s.buffer.scope.value == "global":
            worst = max((sectors(q) for q in s.requests), default=(0, 0),
                        key=lambda t: t[0] / t[1] if t[1] else 0.0)
            if worst[1] and worst[0] / worst[1] >= SECTOR_RATIO_LIMIT:
                out.append(Finding(name, "coalescing", f"{s.label}: a warp request touches "
                                   f"{worst[0]} 32-byte sectors where {worst[1]} would hold "
                                   f"its bytes (uncoalesced)", worst[0] / worst[1]))
    return out


def _occupancy_findings(ks: KernelStatic) -> list[Finding]:
    out = []
    for a, o in ks.occupancy.items():
        if o.blocks_per_sm == 0:
            out.append(Finding(ks.kernel, "occupancy", f"no block fits an SM of {a} "
                               f"({o.limiter}): the launch fails", 0))
        elif o.warps_per_sm < MIN_WARPS_PER_SM:
            out.append(Finding(ks.kernel, "occupancy", f"{o.warps_per_sm} warps per SM on {a} "
                               f"(limited by {o.limiter}): too few to hide latency",
                               o.warps_per_sm))
        if ks.min_blocks_requested > o.blocks_per_sm > 0:
            out.append(Finding(ks.kernel, "occupancy", f"asks for {ks.min_blocks_requested} "
                               f"blocks per SM (__launch_bounds__) but {a} fits "
                               f"{o.blocks_per_sm} ({o.limiter})", o.blocks_per_sm))
    return out


def _min_blocks(kernel: Any) -> int:
    from tdsl.stmt import For
    from tdsl.visitor import post_order_visit
    got: list[int] = []
    post_order_visit(kernel.root, lambda n: got.append(int(n.annotations[
        "pragma_min_blocks_per_sm"])) if isinstance(n, For) and
        "pragma_min_blocks_per_sm" in n.annotations else None)
    return max(got, default=0)
