"""milk/CACAO ImageStreamIO streams with the stream API (docs/milk.md).

    import shmstream.milk
    with shmstream.milk.open("wfs") as wfs:     # $MILK_SHM_DIR/wfs.im.shm
        frame = wfs.read_new(timeout=1.0)

``open`` and ``create`` give a :class:`MilkStream`; the files are milk's
(ImageStreamIO version "2.00"), so CACAO processes and shmstream read and
write the same streams.
"""

from . import _registry  # noqa: F401  (milk's entry in the kinds' table)
from .dtypes import CODE_TO_DTYPE, DTYPE_TO_CODE
from .layout import Layout, parse, shm_dir
from .stream import BUSY_TIMEOUT, MilkStream, create, open, unlink

__all__ = [
    "BUSY_TIMEOUT",
    "CODE_TO_DTYPE",
    "DTYPE_TO_CODE",
    "Layout",
    "MilkStream",
    "create",
    "open",
    "parse",
    "shm_dir",
    "unlink",
]
