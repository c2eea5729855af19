"""The kernel's C ABI: the status it returns, and the signature it carries.

Every kernel entry is ``int32_t name(T *a, ..., int64_t n, ...)`` and returns a
status before touching memory:

- ``TDSL_OK`` (0): it ran;
- ``TDSL_ERR_NULL_POINTER`` (1): an array argument with at least one element is NULL;
- ``TDSL_ERR_BAD_SIZE`` (2): a symbolic size is negative, or an array extent
  computed from the sizes is negative.

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

from .lltypes import I1, I8, I32, I64

if TYPE_CHECKING:
    from .codegen import CodeGen

STATUS_OK = 0
STATUS_NULL_POINTER = 1
STATUS_BAD_SIZE = 2
STATUS_CODES = {STATUS_OK: "TDSL_OK", STATUS_NULL_POINTER: "TDSL_ERR_NULL_POINTER",
                STATUS_BAD_SIZE: "TDSL_ERR_BAD_SIZE"}
STATUS_MEANING = {
    STATUS_OK: "success",
    STATUS_NULL_POINTER: "an array argument with at least one element is NULL",
    STATUS_BAD_SIZE: "a symbolic size, or an array extent computed from the sizes, is negative",
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
    zero = ir.Constant(I64, 0)
    b = cg.b
    negative: list[ir.Value] = [b.icmp_signed("<", a, zero) for a in fn.args[len(f.params):]]
    extents: list[list[ir.Value]] = []
    for p in f.params:
        dims = []
        for s in p.shape:
            if isinstance(s, Const):
                dims.append(ir.Constant(I64, int(s.value)))
            else:
                d = _as_i64(cg, s)
                negative.append(b.icmp_signed("<", d, zero))
                dims.append(d)
        extents.append(dims)
    if negative:
        bad = negative[0]
        for c in negative[1:]:
            bad = b.or_(bad, c)
        _fail_unless(cg, fn, bad, STATUS_BAD_SIZE, "bad_size")
    nulls: list[ir.Value] = []
    for a, dims in zip(fn.args, extents):
        b = cg.b
        is_null = b.icmp_unsigned("==", a, ir.Constant(a.type, None))
        if all(isinstance(d, ir.Constant) for d in dims):
            if all(int(d.constant) != 0 for d in dims):
                nulls.append(is_null)
            continue
        empty: ir.Value = ir.Constant(I1, 0)
        for d in dims:
            empty = b.or_(empty, b.icmp_signed("==", d, zero))
        nulls.append(b.and_(is_null, b.not_(empty)))
    if nulls:
        b = cg.b
        bad = nulls[0]
        for c in nulls[1:]:
            bad = b.or_(bad, c)
        _fail_unless(cg, fn, bad, STATUS_NULL_POINTER, "null_pointer")


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
