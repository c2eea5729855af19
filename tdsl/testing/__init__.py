"""Helpers for checking and timing kernels: ``benchmark`` (fair, interleaved timing of
several contenders at one thread count)."""
from .benchmark import BenchmarkResult, Timing, benchmark

__all__ = ["benchmark", "BenchmarkResult", "Timing"]
