"""``python -m godist.bench``: see :mod:`godist.bench.cli`."""

import sys

from godist.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
