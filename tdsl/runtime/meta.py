"""A kernel's calling signature as JSON: parameters, shapes, symbolic sizes.

Exported libraries carry this beside the native code so that a loaded kernel
checks its arguments exactly as the freshly built one does.
"""
from __future__ import annotations

from typing import Any

from ..errors import BuildError
from ..expr import Add, Const, Expr, FloorDiv, FloorMod, Max, Min, Mul, SizeVar, Sub, Var
from ..stmt import Buffer, Evaluate, PrimFunc
from .args import SCALAR_PARAMS_ATTR, WRITTEN_PARAMS_ATTR, scalar_params, written_params
from .read_checks import READ_CHECKS_ATTR, ReadCheck

_OPS = {"add": Add, "sub": Sub, "mul": Mul, "floordiv": FloorDiv, "floormod": FloorMod,
        "min": Min, "max": Max}
_NAMES = {v: k for k, v in _OPS.items()}

FORMAT_VERSION = 1


def _expr_to_json(e: Expr) -> Any:
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return {"var": e.name}
    name = _NAMES.get(type(e))
    if name is None:
        raise BuildError(f"cannot serialize shape expression node {type(e).__name__}")
    return {"op": name, "a": _expr_to_json(e.a), "b": _expr_to_json(e.b)}


def _expr_from_json(j: Any, vars_: dict[str, Var]) -> Expr:
    if isinstance(j, int):
        return Const(j, "int64")
    if "var" in j:
        return vars_.setdefault(j["var"], SizeVar(j["var"]))
    return _OPS[j["op"]](_expr_from_json(j["a"], vars_), _expr_from_json(j["b"], vars_))


def signature_to_json(func: PrimFunc, entry_name: str, **extra: Any) -> dict[str, Any]:
    """The signature of ``func`` as a JSON-ready dict (plus ``extra`` fields)."""
    names = [v.name for v in func.size_vars]
    if len(set(names)) != len(names):
        raise BuildError(f"'{func.name}': two symbolic sizes share a name {names}; rename one "
                         f"before exporting")
    return {
        "format": FORMAT_VERSION,
        "name": func.name,
        "entry": entry_name,
        "params": [{"name": p.name, "dtype": str(p.dtype),
                    "shape": [_expr_to_json(s) for s in p.shape]} for p in func.params],
        "size_vars": names,
        "bindings": {v.name: list(b) for v, b in func.bindings.items()},
        "written": sorted(written_params(func)),
        "scalars": sorted(scalar_params(func)),
        "read_checks": [_check_to_json(c) for c in func.attrs.get(READ_CHECKS_ATTR, ())],
        **extra,
    }


def signature_from_json(j: dict[str, Any]) -> PrimFunc:
    """A stub PrimFunc (no body) with the parameters, sizes and bindings of ``j``."""
    if j.get("format") != FORMAT_VERSION:
        raise BuildError(f"unsupported kernel metadata format {j.get('format')!r}")
    vars_: dict[str, Var] = {n: SizeVar(n) for n in j["size_vars"]}
    params = [Buffer(p["name"], [_expr_from_json(s, vars_) for s in p["shape"]], p["dtype"])
              for p in j["params"]]
    bindings = {vars_[n]: (int(b[0]), int(b[1])) for n, b in j["bindings"].items()}
    attrs: dict[str, Any] = {WRITTEN_PARAMS_ATTR: list(j["written"]),
                             SCALAR_PARAMS_ATTR: list(j.get("scalars", []))}
    checks = [_check_from_json(c, vars_) for c in j.get("read_checks", [])]
    if checks:
        attrs[READ_CHECKS_ATTR] = checks
    return PrimFunc(j["name"], params, Evaluate(Const(0, "int32")),
                    [vars_[n] for n in j["size_vars"]], bindings, attrs)


def _check_to_json(c: ReadCheck) -> dict[str, Any]:
    return {"where": c.where, "tensor": c.tensor, "dim": c.dim, "exact": c.exact,
            "lo": _expr_to_json(c.lo), "hi": _expr_to_json(c.hi),
            "size": _expr_to_json(c.size), "extents": [_expr_to_json(e) for e in c.extents]}


def _check_from_json(j: dict[str, Any], vars_: dict[str, Var]) -> ReadCheck:
    def ex(x: Any) -> Expr:
        return _expr_from_json(x, vars_)
    return ReadCheck(j["where"], j["tensor"], int(j["dim"]), ex(j["lo"]), ex(j["hi"]),
                     ex(j["size"]), tuple(ex(e) for e in j["extents"]), bool(j["exact"]))
