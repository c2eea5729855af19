"""Schedule fuzzer: random computations x random schedules, checked against NumPy through
the interpreter and LLVM, with trace replay and refusal checks (see test_fuzz_schedules)."""
