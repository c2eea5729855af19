"""``tvm.contrib``: ``cc`` (compiler driver) and ``utils`` (temporary directories)."""
