"""LLVM initialization, target machines, the O3 pipeline, object and assembly emission.

A ``MachineSpec`` is the resolved form of a ``tdsl.Target``: triple, CPU name and
feature string, and whether this process can run code built for it.  Target
machines are made with the PIC relocation model, so one object file serves the
JIT, the disk cache and ``export_library`` alike.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Iterator

import llvmlite.binding as llvm

from tdsl.errors import BuildError
from tdsl.target import Target, TargetKind

#: Serializes everything that touches LLVM's global context and target machines.
LLVM_LOCK = threading.RLock()

_native_ready = False
_all_ready = False


def ensure_initialized(all_targets: bool = False) -> None:
    """Initialize the native target (and every target, for cross-compilation)."""
    global _native_ready, _all_ready
    with LLVM_LOCK:
        if not _native_ready:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _avoid_unsafe_masked_load_folds()
            _native_ready = True
        if all_targets and not _all_ready:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _all_ready = True


def _avoid_unsafe_masked_load_folds() -> None:
    """Keep LLVM from folding loads into instructions after instruction selection.

    LLVM 22's X86 backend folds a masked load into a masked shuffle-type instruction when the
    masks are equal (e.g. ``vpshufd (mem), xmm{k1}`` for a masked ``<2 x i64>`` load that is
    then truncated), but such an instruction reads its whole memory operand: the lanes the
    mask turned off are read anyway, so a guarded read at the end of an array
    (``if_then_else(j + 1 < m, X[i, j + 1], 0)``, vectorized by the loop vectorizer into a
    masked load) faults when the array ends at a page boundary.  LLVM fixed it after 22
    (llvm-project PR 178888, "Blocklist instructions that are unsafe for masked-load
    folding").  ``-disable-spill-fusing`` turns off that folding (and the folding of spill
    reloads); measured cost on the default matmul and conv2d kernels: 3-6 more instructions,
    no change in speed beyond noise.  Set once per process, before any code is generated.
    """
    if llvm.llvm_version_info[0] <= 22:
        llvm.set_option("tdsl", "-disable-spill-fusing")


@functools.lru_cache(maxsize=None)
def host_info() -> tuple[str, str, str]:
    """(triple, cpu name, feature string) of this machine."""
    ensure_initialized()
    return (llvm.get_process_triple(), llvm.get_host_cpu_name(),
            llvm.get_host_cpu_features().flatten())


def _enabled(features: str) -> set[str]:
    return {f[1:] for f in features.split(",") if f.startswith("+")}


_V2 = {"sse4.2", "popcnt", "ssse3", "cx16", "sahf"}
_V3 = _V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
_ICX = _V4 | {"avx512vbmi", "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq",
              "avx512ifma", "gfni", "vaes", "vpclmulqdq"}
#: ISA features each known x86 CPU name implies (used only to decide whether code
#: built for that CPU can run here; unknown names are assumed not to).
KNOWN_X86_CPUS: dict[str, set[str]] = {
    "generic": set(), "x86-64": set(), "x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4,
    "nehalem": _V2, "sandybridge": _V2 | {"avx"}, "ivybridge": _V2 | {"avx", "f16c"},
    "haswell": _V3, "broadwell": _V3 | {"adx"}, "skylake": _V3 | {"adx"},
    "skylake-avx512": _V4 | {"adx", "clwb"}, "cascadelake": _V4 | {"avx512vnni"},
    "cooperlake": _V4 | {"avx512vnni", "avx512bf16"}, "icelake-client": _ICX,
    "icelake-server": _ICX, "tigerlake": _ICX, "rocketlake": _ICX,
    "sapphirerapids": _ICX | {"avx512bf16", "avx512fp16", "amx-tile"},
    "znver1": _V3 | {"sse4a"}, "znver2": _V3 | {"sse4a", "clwb"},
    "znver3": _V3 | {"sse4a", "vaes"}, "znver4": _ICX | {"sse4a", "avx512bf16"},
    "znver5": _ICX | {"sse4a", "avx512bf16", "avx512vp2intersect"},
}


@dataclass(frozen=True)
class MachineSpec:
    """Where code is compiled for.

    ``runnable`` says whether this process can execute the code (same architecture,
    no CPU feature the host lacks); ``why_not`` explains when it cannot.
    """

    triple: str
    cpu: str
    features: str
    runnable: bool
    why_not: str = ""

    @property
    def arch(self) -> str:
        return self.triple.split("-", 1)[0]

    @property
    def has_avx512(self) -> bool:
        feats = _enabled(self.features)
        if "avx512f" in feats:
            return True
        return "avx512f" in KNOWN_X86_CPUS.get(self.cpu, set()) and "-avx512f" not in self.features

    def key(self) -> str:
        return f"{self.triple}|{self.cpu}|{self.features}"


def _same_arch(a: str, b: str) -> bool:
    norm = {"amd64": "x86_64", "arm64": "aarch64"}
    pa, pb = a.split("-", 1)[0], b.split("-", 1)[0]
    return norm.get(pa, pa) == norm.get(pb, pb)


def machine_spec(target: Target) -> MachineSpec:
    """Resolve ``target`` (an LLVM target) to a triple, CPU and features."""
    if target.kind is not TargetKind.LLVM:
        raise BuildError(f"the LLVM backend cannot build for target '{target}'")
    triple, host_cpu, host_features = host_info()
    if target.is_host:
        return MachineSpec(triple, host_cpu, host_features, True)
    ttriple = target.mtriple or triple
    host_feats = _enabled(host_features)
    mattr = ",".join(a if a[:1] in "+-" else "+" + a for a in target.mattr)
    if not _same_arch(ttriple, triple):
        return MachineSpec(ttriple, target.mcpu or "generic", mattr, False,
                           f"it targets {ttriple}, this machine is {triple}")
    if target.mcpu and target.mcpu != host_cpu:
        implied = KNOWN_X86_CPUS.get(target.mcpu)
        cpu, features = target.mcpu, mattr
        if implied is None:
            return MachineSpec(ttriple, cpu, features, False,
                               f"it targets CPU '{cpu}', whose features tdsl does not know "
                               f"(this machine is '{host_cpu}')")
        missing = implied - host_feats
    elif target.mcpu:
        cpu, features, missing = host_cpu, ",".join(f for f in (host_features, mattr) if f), set()
    else:
        cpu, features, missing = "generic", mattr, set()
        if not target.mtriple:
            # '-mattr=' alone on the host architecture: the host CPU with changed features
            cpu, features = host_cpu, ",".join(f for f in (host_features, mattr) if f)
    missing |= {a[1:] for a in mattr.split(",") if a.startswith("+")} - host_feats
    if missing:
        return MachineSpec(ttriple, cpu, features, False,
                           f"this CPU lacks {', '.join(sorted(missing))}")
    return MachineSpec(ttriple, cpu, features, True)


_PROBE = r"""
import sys, llvmlite.binding as llvm
llvm.initialize_all_targets(); llvm.initialize_all_asmprinters()
t = llvm.Target.from_triple(sys.argv[1])
tm = t.create_target_machine(cpu=sys.argv[2], features=sys.argv[3], opt=2, reloc="pic")
tm.emit_object(llvm.parse_assembly("define void @f() { ret void }"))
"""


def _known(spec: MachineSpec) -> bool:
    """True when LLVM surely accepts the CPU and feature names of ``spec``."""
    triple, cpu, features = host_info()
    if spec.triple == triple and spec.cpu == cpu and spec.features == features:
        return True
    host_names = {f[1:] for f in features.split(",") if f}
    x86 = spec.arch in ("x86_64", "amd64")
    cpu_ok = spec.cpu == "generic" or (x86 and (spec.cpu in KNOWN_X86_CPUS or spec.cpu == cpu))
    feats = {f[1:] for f in spec.features.split(",") if f}
    return cpu_ok and (not feats or (x86 and _same_arch(spec.triple, triple)
                                     and feats <= host_names))


@functools.lru_cache(maxsize=None)
def _validate(spec: MachineSpec) -> None:
    """Refuse CPU or feature names LLVM does not know (it would abort the process).

    Unfamiliar names are tried once in a subprocess."""
    if _known(spec):
        return
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", _PROBE, spec.triple, spec.cpu, spec.features],
                       capture_output=True, text=True, timeout=120)
    bad = [line for line in r.stderr.splitlines() if "not a recognized" in line]
    if r.returncode != 0 or bad:
        lines = bad or r.stderr.strip().splitlines()[-1:] or ["LLVM aborted"]
        raise BuildError(f"LLVM cannot target triple '{spec.triple}', cpu '{spec.cpu}', "
                         f"features '{spec.features}': {lines[0]}")


@functools.lru_cache(maxsize=16)
def target_machine(spec: MachineSpec) -> "llvm.TargetMachine":
    """An O3, PIC target machine for ``spec`` (cached; never handed to an engine)."""
    _validate(spec)
    ensure_initialized(all_targets=not _same_arch(spec.triple, host_info()[0]))
    with LLVM_LOCK:
        try:
            t = llvm.Target.from_triple(spec.triple)
        except RuntimeError as e:
            raise BuildError(f"LLVM has no backend for triple '{spec.triple}': {e}") from None
        return t.create_target_machine(cpu=spec.cpu, features=spec.features, opt=3,
                                       reloc="pic", codemodel="default")


def parse(ir_text: str) -> "llvm.ModuleRef":
    """Parse and verify LLVM IR text (a BuildError names the problem)."""
    with LLVM_LOCK:
        try:
            mod = llvm.parse_assembly(ir_text)
            mod.verify()
        except RuntimeError as e:
            raise BuildError(f"generated LLVM IR does not verify (a tdsl bug): {e}") from None
        return mod


_DIAGNOSTIC = re.compile(r"^(remark|warning|note|error): |<unknown>:\d+:\d+: ")


@contextlib.contextmanager
def llvm_diagnostics(sink: "list[str] | None" = None) -> Iterator[None]:
    """Capture what LLVM prints to the process's stderr (file descriptor 2) meanwhile --
    its remarks, such as "loop not vectorized: ..." -- into ``sink`` instead of the
    terminal; any other line written meanwhile is passed on to stderr unchanged.

    The capture is a named file, ``<tmpdir>/tdsl-llvm-stderr-<pid>-*.log``, removed when
    the block ends: if LLVM aborts the process meanwhile ("LLVM ERROR: ..."), its message
    stays there (docs/dsl.md, "If a build kills the process")."""
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    try:
        saved = os.dup(2)
    except OSError:  # no stderr descriptor at all: nothing to protect
        yield
        return
    fd, path = tempfile.mkstemp(prefix=f"tdsl-llvm-stderr-{os.getpid()}-", suffix=".log")
    try:
        with os.fdopen(fd, "w+b") as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                tmp.seek(0)
                text = tmp.read().decode(errors="replace")
    finally:      # an exception inside the block leaves no file behind either
        try:
            os.unlink(path)
        except OSError:
            pass
    kept = []
    for line in text.split("\n"):     # not splitlines(): a progress bar's "\r" stays put
        if _DIAGNOSTIC.search(line):
            if sink is not None:
                sink.append(line.strip())
        else:
            kept.append(line)
    other = "\n".join(kept)
    if other.strip():
        try:
            os.write(2, other.encode())
        except OSError:
            pass


def optimize(mod: "llvm.ModuleRef", spec: MachineSpec,
             remarks: "list[str] | None" = None) -> None:
    """Run LLVM's O3 pipeline (loop and SLP vectorization, unrolling) on ``mod``; LLVM's
    remarks go to ``remarks`` (never to the terminal)."""
    tm = target_machine(spec)
    with LLVM_LOCK, llvm_diagnostics(remarks):
        mod.triple = spec.triple
        mod.data_layout = str(tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)


def emit_object(mod: "llvm.ModuleRef", spec: MachineSpec,
                remarks: "list[str] | None" = None) -> bytes:
    with LLVM_LOCK, llvm_diagnostics(remarks):
        return bytes(target_machine(spec).emit_object(mod))


def emit_assembly(mod: "llvm.ModuleRef", spec: MachineSpec,
                  remarks: "list[str] | None" = None) -> str:
    with LLVM_LOCK, llvm_diagnostics(remarks):
        return target_machine(spec).emit_assembly(mod)


def data_layout(spec: MachineSpec) -> str:
    return str(target_machine(spec).target_data)
