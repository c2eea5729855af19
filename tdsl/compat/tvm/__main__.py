"""``python -m tdsl.compat.tvm script.py [args...]``: run a TVM script with ``import tvm``
resolving to tdsl's compatibility layer."""
from __future__ import annotations

import os
import runpy
import sys


def main(argv: "list[str] | None" = None) -> int:
    """Install the ``tvm`` import alias, then run ``argv[0]`` as ``__main__`` with
    ``sys.argv`` set to ``argv`` (as ``python script.py args...`` would)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m tdsl.compat.tvm script.py [args...]\n"
              "Runs a TVM v0.19-era script with 'import tvm' served by tdsl.compat.tvm.")
        return 0 if argv else 2
    from .alias import install
    install()
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
