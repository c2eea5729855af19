"""Whether the tensor-core and asynchronous-copy instructions a kernel should use are there.

Expected, from the kernel's IR and source:

* ``mma``: the kernel calls a warp-level matrix intrinsic (an ``IntrinCall``), or its
  source asks for ``mma_sync`` / ``mma.sync``;
* ``cp.async``: on sm_80+, a shared array of two slots (a double buffer) is filled by
  plain copies of global elements of 4, 8 or 16 bytes (what ``pipeline.py`` turns into
  asynchronous copies), or the source calls ``tdsl_cp_async``;
* ``ldmatrix``: the source asks for it;
* ``ld.v4``: a 16-byte global load (``ld.global.v4`` / ``ld.global.v2`` of 8-byte
  elements, or a 16-byte ``cp.async``): the code generator rendered 16-byte vector loads of
  a global array (``KernelInfo.vector_loads_16``: a float4 fetch, vectorize.py).

Found: in the kernel's PTX (``.entry`` section) and, where ``cuobjdump`` is installed,
its SASS (HMMA, LDGSTS, LDSM, LDG.128).  An expected instruction that is in neither is a finding:
the code generator fell back to something slower without saying so.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Optional

from tdsl.expr import Const
from tdsl.stmt import BufferStore, IntrinCall, StorageScope
from tdsl.visitor import post_order_visit

from .findings import Finding

PTX = {"mma": re.compile(r"\b(?:wmma\.mma|mma\.sync|wgmma\.mma_async)"),
       "cp.async": re.compile(r"\bcp\.async\.(?:ca|cg|bulk)"),
       "ldmatrix": re.compile(r"\bldmatrix\."),
       "ld.v4": re.compile(r"\bld\.global[\w.]*\.(?:v4\.[bfsu]32|v2\.[bfsu]64)\b|"
                           r"\bcp\.async\.c[ag]\.shared\.global[\w.]*\s*\[[^]]*\],\s*\[[^]]*\],"
                           r"\s*16\s*[,;]")}
SASS = {"mma": re.compile(r"\b(?:HMMA|IMMA|HGMMA)\b"), "cp.async": re.compile(r"\bLDGSTS\b"),
        "ldmatrix": re.compile(r"\bLDSM\b"),
        "ld.v4": re.compile(r"\bLDG(?:STS)?\.[\w.]*\.128\b")}


def expected(kernel: Any, arch_sm: int) -> set[str]:
    """The instructions ``kernel`` (a ``KernelInfo``) should contain on ``sm_<arch_sm>``."""
    from ..pipeline import is_async_copy
    want: set[str] = set()
    src = kernel.source or ""
    found: list[Any] = []
    post_order_visit(kernel.root, lambda n: found.append(n)
                     if isinstance(n, (IntrinCall, BufferStore)) else None)
    if any(isinstance(n, IntrinCall) for n in found) or "mma_sync" in src or "mma.sync" in src:
        want.add("mma")
    if arch_sm >= 80:
        for s in found:
            b = getattr(s, "buffer", None)
            if isinstance(s, BufferStore) and b.scope is StorageScope.SHARED and b.shape and \
                    isinstance(b.shape[0], Const) and b.shape[0].value == 2 and \
                    is_async_copy(s, {id(b)}):
                want.add("cp.async")
        if "tdsl_cp_async" in src:
            want.add("cp.async")
    if "ldmatrix" in src:
        want.add("ldmatrix")
    if getattr(kernel, "vector_loads_16", 0):
        want.add("ld.v4")
    if getattr(kernel, "tc", None) is not None:     # the tensor-core GEMM template (sm_80+)
        want |= {"mma", "ldmatrix", "cp.async"}
    return want


def ptx_entries(ptx: str) -> dict[str, str]:
    """The text of each ``.entry`` (kernel) of a PTX module, by name."""
    out: dict[str, str] = {}
    marks = [(m.start(), m.group(1)) for m in re.finditer(r"\.entry\s+(\w+)", ptx)]
    for i, (at, name) in enumerate(marks):
        out[name] = ptx[at:marks[i + 1][0] if i + 1 < len(marks) else len(ptx)]
    return out


def present(text: str, patterns: dict) -> set[str]:
    return {k for k, p in patterns.items() if p.search(text)}


def find_tool(name: str) -> Optional[str]:
    """``name`` on PATH, else under /usr/local/cuda*/bin, else None."""
    path = shutil.which(name)
    if path:
        return path
    for cand in sorted(glob.glob(f"/usr/local/cuda*/bin/{name}"), reverse=True):
        if os.access(cand, os.X_OK):
            return cand
    return None


def sass_functions(cubin: bytes) -> Optional[dict[str, str]]:
    """The SASS of each function of ``cubin`` (``cuobjdump -sass``), or None where
    cuobjdump is missing or cannot read it."""
    tool = find_tool("cuobjdump")
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        try:
            r = subprocess.run([tool, "-sass", path], capture_output=True, text=True,
                               timeout=120)
        except (OSError, subprocess.SubprocessError):
            return None
    if r.returncode != 0:
        return None
    out: dict[str, str] = {}
    marks = [(m.start(), m.group(1)) for m in re.finditer(r"Function\s*:\s*(\w+)", r.stdout)]
    for i, (at, name) in enumerate(marks):
        out[name] = r.stdout[at:marks[i + 1][0] if i + 1 < len(marks) else len(r.stdout)]
    return out


def instruction_findings(kernel: Any, arch_sm: int, ptx: str,
                         sass: Optional[str] = None) -> tuple[set[str], set[str], list[Finding]]:
    """(expected, found, findings) for ``kernel`` given its PTX (and SASS if known)."""
    want = expected(kernel, arch_sm)
    have = present(ptx, PTX) | (present(sass, SASS) if sass else set())
    miss = sorted(want - have)
    out = [Finding(kernel.name, "instructions",
                   f"expected {', '.join(miss)} (the kernel's IR or source asks for it) but "
                   f"the PTX{' and SASS' if sass else ''} for sm_{arch_sm} has none",
                   len(miss))] if miss else []
    return want, have, out
