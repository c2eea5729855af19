"""The compat tests import TVM's names through the alias, as user scripts do."""
import tdsl.compat.tvm.alias  # noqa: F401
