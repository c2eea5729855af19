"""The kernel's C ABI: the status it returns, and the signature it carries.

Every kernel entry is ``int32_t name(T *a, ..., int64_t n, ...)`` and returns a
status before touching memory:

- ``TDSL_OK`` (0): it ran;
- ``TDSL_ERR_NULL_POINTER`` (1): an array argument is NULL;
- ``TDSL_ERR_BAD_SIZE`` (2): a symbolic size, or an array extent computed from the
  sizes, is below 1 (tdsl kernels need every dimension >= 1, as the Python argument
  checks do; the generated code relies on it).

Sizes are checked first, so a call with a bad size returns 2 whatever its pointers.

The signature (parameters, dtypes, shapes, symbolic sizes, target CPU) is stored
in the object as a NUL-terminated JSON string in the ELF section ``tdsl_meta``
(symbol ``tdsl_meta_<entry>``).  Linking objects concatenates their sections, so a
shared library made by ``export_library`` -- or by the user from ``save("x.o")`` --
describes every kernel it contains; ``tdsl.runtime.embedded`` reads it back.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import llvmlite.ir as ir

from tdsl.dtype import DType
from tdsl.errors import BuildError
from tdsl.expr import Const

from .lltypes import I8, I32, I64

if TYPE_CHECKING:
    from .codegen import CodeGen

STATUS_OK = 0
STATUS_NULL_POINTER = 1
STATUS_BAD_SIZE = 2
STATUS_CODES = {STATUS_OK: "TDSL_OK", STATUS_NULL_POINTER: "TDSL_ERR_NULL_POINTER",
                STATUS_BAD_SIZE: "TDSL_ERR_BAD_SIZE"}
STATUS_MEANING = {
    STATUS_OK: "success",
    STATUS_NULL_POINTER: "an array argument is NULL",
    STATUS_BAD_SIZE: "a size, or an extent computed from the sizes, is < 1",
}

#: The ABI version recorded in the embedded signature (1: the entry returned void).
ABI_VERSION = 2
SECTION = "tdsl_meta"


def meta_symbol(entry: str) -> str:
    return f"tdsl_meta_{entry}"


def _fail_unless(cg: "CodeGen", fn: ir.Function, bad: ir.Value, status: int, label: str) -> None:
    """Return ``status`` from the kernel when ``bad`` holds; continue otherwise."""
    fail = fn.append_basic_block(label)
    ok = fn.append_basic_block(label + "_ok")
    cg.b.cbranch(bad, fail, ok)
    ir.IRBuilder(fail).ret(ir.Constant(I32, status))
    cg.b.position_at_end(ok)


def _as_i64(cg: "CodeGen", e: Any) -> ir.Value:
    return cg.convert_index(cg.scalar(e), e.dtype, DType.INT64)


def emit_argument_checks(cg: "CodeGen", fn: ir.Function) -> None:
    """Size checks, then NULL checks, at the top of the kernel entry ``fn``."""
    f = cg.func
    one = ir.Constant(I64, 1)
    b = cg.b
    small: list[ir.Value] = [b.icmp_signed("<", a, one) for a in fn.args[len(f.params):]]
    for p in f.params:
        for s in p.shape:
            if not isinstance(s, Const) and not any(s is v for v in f.size_vars):
                small.append(b.icmp_signed("<", _as_i64(cg, s), one))
    if small:
        _fail_unless(cg, fn, _any(cg, small), STATUS_BAD_SIZE, "bad_size")
    nulls = [cg.b.icmp_unsigned("==", a, ir.Constant(a.type, None))
             for a in fn.args[:len(f.params)]]
    if nulls:
        _fail_unless(cg, fn, _any(cg, nulls), STATUS_NULL_POINTER, "null_pointer")


def _any(cg: "CodeGen", conds: list[ir.Value]) -> ir.Value:
    out = conds[0]
    for c in conds[1:]:
        out = cg.b.or_(out, c)
    return out


def signature(cg: "CodeGen") -> "dict[str, Any] | None":
    """The JSON signature embedded for ``cg``'s kernel (None when it cannot be written,
    e.g. two symbolic sizes share a name: ``export_library`` reports that)."""
    from tdsl.runtime.meta import signature_to_json
    spec = cg.spec
    try:
        return signature_to_json(cg.func, cg.entry_name, abi=ABI_VERSION, triple=spec.triple,
                                 cpu=spec.cpu, features=spec.features,
                                 parallel=cg.uses_parallel)
    except BuildError:
        return None


def embed_signature(cg: "CodeGen") -> None:
    """Add the signature to ``cg``'s module as a constant in section ``tdsl_meta``."""
    meta = signature(cg)
    if meta is None:
        return
    data = bytearray(json.dumps(meta, separators=(",", ":")).encode() + b"\0")
    ty = ir.ArrayType(I8, len(data))
    gv = ir.GlobalVariable(cg.module, ty, name=meta_symbol(cg.entry_name))
    gv.global_constant = True
    gv.initializer = ir.Constant(ty, data)
    gv.section = SECTION
    gv.align = 1


def raise_status(status: int, entry: str) -> None:
    """Raise the error a nonzero kernel status stands for (the argument checks in
    Python make this unreachable through ``Module.__call__``)."""
    if status:
        name = STATUS_CODES.get(status, "unknown status")
        raise BuildError(f"kernel '{entry}' returned {status} ({name}: "
                         f"{STATUS_MEANING.get(status, 'not a tdsl status')})")
