"""``python -m benchmarks``: run a benchmark part."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
