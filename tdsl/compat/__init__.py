"""Compatibility layers that let code written for other compilers run on tdsl.

``tdsl.compat.tvm`` mirrors Apache TVM v0.19's classic tensor-expression API
(``tvm``, ``te``, ``tir``, ``topi``, ``autotvm``, ``auto_scheduler``) as a thin
renaming layer over tdsl's public API.
"""
