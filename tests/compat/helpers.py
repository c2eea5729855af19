"""Helpers shared by the compat tests."""
import tdsl.compat.tvm.alias  # noqa: F401  (``import tvm`` is tdsl's layer)
import tdsl.interpreter
import tvm


def run_both(s, args, arrays):
    """The interpreter and LLVM on copies of ``arrays``: both results (reference, built)."""
    ref = [a.copy() for a in arrays]
    tdsl.interpreter.run(tvm.lower(s, args), *ref)
    got = [a.copy() for a in arrays]
    tvm.build(s, args, "llvm")(*got)
    return ref, got
