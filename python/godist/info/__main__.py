"""``python -m godist.info [--json]``: the same as ``godist info``."""

import sys

from godist.info import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog="python -m godist.info"))
