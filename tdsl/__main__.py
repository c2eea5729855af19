"""``python -m tdsl``: the ``tdsl`` command line (see ``tdsl.cli``)."""
import sys

from tdsl.cli import main

if __name__ == "__main__":
    sys.exit(main())
