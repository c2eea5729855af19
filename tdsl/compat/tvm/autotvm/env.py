"""``autotvm.env``: the ``GLOBAL_SCOPE`` object some scripts set flags on (no effect here)."""


class _Scope:
    in_tuning = False
    silent = False


GLOBAL_SCOPE = _Scope()
