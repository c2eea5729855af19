"""``tvm.error``: TVM's error classes, as tdsl's (``TVMError`` is ``TDSLError``, a
``RuntimeError``; the others are the ``TDSLError`` subclasses closest in meaning)."""
from tdsl.errors import ArgumentError, InternalError, ShapeError, TDSLError

TVMError = TDSLError
InternalError = InternalError
TypeError = ArgumentError  # noqa: A001 (TVM's name)
ValueError = ShapeError  # noqa: A001
OpError = TDSLError
OpNotImplemented = TDSLError
OpAttributeInvalid = TDSLError
OpAttributeRequired = TDSLError

__all__ = ["TVMError", "InternalError", "TypeError", "ValueError", "OpError", "OpNotImplemented",
           "OpAttributeInvalid", "OpAttributeRequired"]
