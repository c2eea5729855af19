"""``tvm.target``: ``Target`` (with ``kind.name``, ``host`` and ``with`` scoping) over
``tdsl.Target``."""
from __future__ import annotations

import contextvars
from typing import Any

import tdsl
from tdsl.errors import BuildError

_CURRENT: contextvars.ContextVar[tuple] = contextvars.ContextVar("tdsl_compat_target", default=())


class TargetKind:
    """``target.kind``: its ``name`` is the lower-case backend (``"llvm"``, ``"cuda"``)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Target:
    """``tvm.target.Target("llvm -mcpu=...", host="llvm")``: a tdsl target with TVM's surface.

    ``str(target)`` is the target string; ``with Target(...)`` makes it the default of
    ``tvm.build`` and ``Target.current()``.
    """

    def __init__(self, target: Any, host: Any = None):
        if isinstance(target, Target):
            host = host if host is not None else target.host
            target = target.tdsl
        if isinstance(target, dict):
            target = " ".join([target.get("kind", "llvm")] +
                              [f"-{k}={v}" for k, v in target.items() if k != "kind"])
        self.tdsl = tdsl.as_target(target)
        self.kind = TargetKind(str(self.tdsl.kind))
        if host is not None and not isinstance(host, Target):
            host = Target(host)
        self.host = host
        if self.host is not None and self.host.kind.name != "llvm":
            raise BuildError(f"Target: the host must be an llvm target, got {self.host}")

    @property
    def keys(self) -> list[str]:
        return ["cpu"] if self.kind.name == "llvm" else ["cuda", "gpu"]

    @property
    def attrs(self) -> dict:
        t = self.tdsl
        if self.kind.name == "cuda":
            return {"arch": t.arch}
        return {"mcpu": t.mcpu, "mattr": list(t.mattr), "mtriple": t.mtriple,
                "num-cores": t.num_threads}

    @property
    def mcpu(self) -> str:
        return self.tdsl.mcpu

    @staticmethod
    def current(allow_none: bool = True) -> "Target | None":
        stack = _CURRENT.get()
        if stack:
            return stack[-1]
        if not allow_none:
            raise BuildError("Target.current(): no target is in scope (use 'with Target(...)')")
        return None

    def __enter__(self) -> "Target":
        self._token = _CURRENT.set(_CURRENT.get() + (self,))
        return self

    def __exit__(self, *exc: Any) -> None:
        _CURRENT.reset(self._token)

    def __str__(self) -> str:
        return str(self.tdsl)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and str(other) == str(self)

    def __hash__(self) -> int:
        return hash(str(self))


def as_tdsl(target: Any) -> Any:
    """A tdsl target from a TVM-style target (a ``Target``, a string, or None: the current one,
    else llvm)."""
    if target is None:
        target = Target.current() or "llvm"
    if isinstance(target, Target):
        return target.tdsl
    return tdsl.as_target(target)


def create(target: str) -> Target:
    return Target(target)


def cuda(model: str = "unknown", arch: "str | None" = None, options: Any = None) -> Target:
    return Target("cuda" + (f" -arch={arch}" if arch else ""))


def x86(cpu: str = "", options: Any = None) -> Target:
    return Target("llvm" + (f" -mcpu={cpu}" if cpu else ""))


__all__ = ["Target", "TargetKind", "create", "cuda", "x86"]
