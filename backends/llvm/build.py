"""``build(func, target)``: PrimFunc → cached, JIT-loaded ``LLVMModule``."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tdsl.stmt import PrimFunc
from tdsl.target import Target, as_target

from . import cache, jit
from .codegen import c_identifier, generate
from .machine import MachineSpec, emit_object, machine_spec, optimize, parse
from .parallel import thread_count_symbol, thread_setter_symbol
from tdsl.deep import deep_recursion


@dataclass
class Compiled:
    """One compiled kernel, shared by every module built from the same program."""

    key: str
    entry: str
    spec: MachineSpec
    obj: bytes
    ir_text: str
    uses_parallel: bool
    notes: list[str] = field(default_factory=list)
    uses_workspace: bool = False
    library: "jit.JitLibrary | None" = None
    cfunc: Any = None
    threads_written: int = -1
    compile_seconds: float = 0.0

    def exports(self) -> list[str]:
        names = [self.entry]
        if self.uses_parallel:
            names += [thread_count_symbol(self.entry), thread_setter_symbol(self.entry)]
        return names


@deep_recursion
def compile_func(func: PrimFunc, target: Target) -> Compiled:
    """Generate, optimize and emit object code for ``func`` (through the cache), and
    link it into the JIT when this machine can run it."""
    from .prepare import prepare
    func = prepare(func)
    spec = machine_spec(target)
    t0 = time.perf_counter()
    gomp = jit.gomp_available() if spec.runnable else True
    generated: dict[str, Any] = {}

    def ir_text() -> str:
        if "text" not in generated:
            module, cg = generate(func, spec, parallel_runtime=gomp)
            generated.update(text=str(module), parallel=cg.uses_parallel, notes=cg.notes,
                             entry=cg.entry_name, workspace=cg.uses_workspace)
        return generated["text"]

    key = cache.key_function(func, target, spec, ir_text)
    hit = cache.memory_get(key)
    if hit is not None:
        cache.stats["memory_hits"] += 1
        return hit
    on_disk = cache.disk_get(key)
    if on_disk is not None:
        cache.stats["disk_hits"] += 1
        obj, meta = on_disk
        compiled = Compiled(key, meta["entry"], spec, obj, meta["ir"], meta["parallel"],
                            list(meta.get("notes", [])), meta.get("workspace", False))
    else:
        cache.stats["misses"] += 1
        text = ir_text()
        mod = parse(text)
        remarks: list[str] = []
        optimize(mod, spec, remarks)
        obj = emit_object(mod, spec, remarks)
        compiled = Compiled(key, generated["entry"], spec, obj, text, generated["parallel"],
                            list(generated["notes"]) + [f"llvm: {r}" for r in remarks],
                            generated["workspace"])
        cache.disk_put(key, obj, {"entry": compiled.entry, "parallel": compiled.uses_parallel,
                                  "notes": compiled.notes, "ir": text,
                                  "workspace": compiled.uses_workspace})
    if spec.runnable:
        from . import externs
        compiled.library = jit.link(compiled.obj, compiled.exports(), compiled.uses_parallel,
                                    externs.symbols(func), compiled.uses_workspace)
    compiled.compile_seconds = time.perf_counter() - t0
    cache.memory_put(key, compiled)
    return compiled


def build(func: PrimFunc, target: "Target | str" = "llvm") -> "Any":
    """Compile ``func`` for an LLVM target and return a callable ``LLVMModule``."""
    from .module import LLVMModule
    target = as_target(target)
    return LLVMModule(func, target, compile_func(func, target))


__all__ = ["build", "compile_func", "Compiled", "c_identifier"]
