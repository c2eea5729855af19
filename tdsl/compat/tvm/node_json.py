"""``tvm.ir.save_json`` / ``tvm.ir.load_json``: a tensor expression object (a tensor, an
operation, an expression, a schedule) as a JSON string, and back.

The JSON is tdsl's, not TVM's node graph: one object ``{"format": ..., "version": 1,
"pickle": <base64>}`` holding the object pickled by Python (tdsl's objects pickle: see
``Schedule.__getstate__``).  So a string saved by TVM cannot be loaded (it is refused by
name), and a string from ``save_json`` round-trips within one tdsl version.

``load_json`` unpickles with a restricted ``find_class``: only tdsl's tensor-expression
classes (the modules in ``_ALLOWED``) and ``set``/``frozenset`` may be named, so a string
crafted to call another function (``os.system``...) is refused, not run.  Objects that hold
Python functions (an extern stage's callback, say) cannot be saved; that is a clear error.
"""
from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
from typing import Any

from tdsl.errors import ArgumentError, TDSLError

FORMAT = "tdsl.compat.tvm.node"
VERSION = 1
#: the modules whose classes a saved object may name
_ALLOWED = frozenset({
    "tdsl.dtype", "tdsl.expr", "tdsl.tensor", "tdsl.reduction", "tdsl.scan_op", "tdsl.opaque",
    "tdsl.extern_op", "tdsl.stmt", "tdsl.schedule.schedule", "tdsl.schedule.stage",
    "tdsl.schedule.relations", "tdsl.schedule.trace", "tdsl.compat.tvm.ir",
    "tdsl.compat.tvm.schedule_record",
})
_BUILTINS = frozenset({"set", "frozenset"})


class _Unpickler(pickle.Unpickler):
    """An unpickler that may construct tdsl's expression and schedule classes only."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _BUILTINS:
            return super().find_class(module, name)
        if module == "builtins" and name == "getattr":
            return _enum_member     # some Pythons (3.11.2) pickle an enum member so
        if module in _ALLOWED:
            obj = super().find_class(module, name)
            if isinstance(obj, type):
                return obj
        raise TDSLError(f"tvm.ir.load_json: the string names {module}.{name}, which is not a "
                        f"tdsl tensor-expression class; refused")


def _enum_member(cls: Any, name: Any) -> Any:
    """``getattr(cls, name)`` as a pickle of an enum member uses it, for the members of
    the allowed classes only: a general ``getattr`` would let a crafted string walk from
    an allowed class to any function."""
    import enum
    if isinstance(cls, type) and issubclass(cls, enum.Enum) and isinstance(name, str) \
            and name in cls.__members__:
        return cls[name]
    raise TDSLError(f"tvm.ir.load_json: the string asks for {name!r:.40} of {cls!r:.60}, "
                    f"which is not an enum member; refused")


def save_json(node: Any) -> str:
    """``node`` (a tensor, operation, expression or schedule) as a JSON string."""
    try:
        data = pickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise TDSLError(f"tvm.ir.save_json: cannot save {type(node).__name__} {node!r:.60}: it "
                        f"holds something that is not tensor-expression data ({e})") from None
    return json.dumps({"format": FORMAT, "version": VERSION,
                       "pickle": base64.b64encode(data).decode("ascii")})


def load_json(json_str: str) -> Any:
    """The object ``save_json`` turned into ``json_str``."""
    if not isinstance(json_str, str):
        raise ArgumentError(f"tvm.ir.load_json: expected a str, got {type(json_str).__name__}")
    try:
        doc = json.loads(json_str)
    except json.JSONDecodeError as e:
        raise ArgumentError(f"tvm.ir.load_json: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ArgumentError("tvm.ir.load_json: not a string tdsl's save_json wrote (TVM's own "
                            "node JSON cannot be loaded: tdsl has its own objects)")
    if doc.get("version") != VERSION:
        raise ArgumentError(f"tvm.ir.load_json: format version {doc.get('version')!r}; this "
                            f"tdsl reads version {VERSION}")
    try:
        data = base64.b64decode(doc.get("pickle", ""), validate=True)
        return _Unpickler(io.BytesIO(data)).load()
    except TDSLError:
        raise
    except (binascii.Error, pickle.UnpicklingError, EOFError, TypeError, ValueError,
            AttributeError, LookupError) as e:
        raise ArgumentError(f"tvm.ir.load_json: the saved object is damaged ({e})") from None


__all__ = ["save_json", "load_json"]
