"""python -m shmstream.cli"""

import sys

from . import main

sys.exit(main())
