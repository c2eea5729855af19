"""``tvm.driver``: TVM's build driver module (``tvm.driver.build_module``)."""
from . import build_module
from .build_module import build, lower

__all__ = ["build_module", "build", "lower"]
