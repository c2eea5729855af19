"""The LLVM CPU backend: lowered loop IR → LLVM IR (llvmlite) → native code.

``build(func, target)`` compiles a ``PrimFunc`` for an LLVM target and returns an
``LLVMModule`` (callable on NumPy/DLPack arrays, with ``get_source``,
``time_evaluator``, ``export_library``); ``load_module(path)`` loads an exported
library back.  Module map: ``codegen`` (statements, memory, loops), ``exprs``
(expressions), ``intrinsics`` (math), ``vectorize`` (widening), ``parallel``
(OpenMP outlining), ``machine`` (targets, O3 pipeline, object emission), ``jit``
(LLJIT), ``cache`` (memory/disk cache), ``module``, ``export``.
"""
from .build import build, compile_func
from .export import LoadedModule, load_module
from .module import LLVMModule

__all__ = ["build", "compile_func", "load_module", "LLVMModule", "LoadedModule"]
