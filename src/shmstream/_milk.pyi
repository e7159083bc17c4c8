from collections.abc import Sequence
from typing import Annotated

import numpy
from numpy.typing import NDArray


VERSION: str = '2.00'

METADATA_BYTES: int = 384

KEYWORD_BYTES: int = 128

SEMAPHORE_BYTES: int = 32

MAX_NAME_BYTES: int = 79

def itemsize(datatype: int) -> int:
    """Bytes per element of a milk datatype code, 0 if unknown."""

def parse_metadata(metadata: bytes, file_bytes: int) -> dict:
    """
    Parse a 384-byte metadata block of a file of file_bytes: the layout as a dict.
    """

def peek(path: str) -> dict:
    """
    The layout and live metadata words of the milk file at path, read without mapping it.
    """

def metadata_fields() -> dict:
    """{field: (offset, size)} of IMAGE_METADATA as compiled."""

class Stream:
    @staticmethod
    def open(path: str) -> Stream: ...

    @staticmethod
    def create(path: str, name: str, size: Sequence[int], datatype: int, nsem: int, nkw: int, cbsize: int, mode: int) -> Stream: ...

    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...

    def layout(self) -> dict: ...

    def read_into(self, out: object, budget_s: float) -> tuple: ...

    def read_new_into(self, out: object, last: int, timeout: object | None, budget_ns: int, spin_ns: int) -> int: ...

    def read_new_info(self, out: object, last: int, timeout: object | None, budget_ns: int, spin_ns: int) -> tuple: ...

    def spin_policy(self) -> dict: ...

    def read_since_into(self, out: object, counts: object, after: int, budget_s: float) -> tuple: ...

    def write(self, src: object, atime_ns: int) -> None: ...

    def view_begin(self, budget_s: float) -> tuple: ...

    def view_valid(self, cnt0: int) -> bool: ...

    def pixels(self) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,), writable=False)]: ...

    def wait_newer(self, last: int, timeout: object | None, spin_ns: int) -> None: ...

    def identity(self) -> tuple: ...

    def count(self) -> int: ...

    def writing(self) -> bool: ...

    def claim(self, preferred: int) -> int: ...

    def claimed(self) -> int: ...

    def release(self) -> None: ...

    def keyword(self, index: int) -> tuple: ...

    def set_keyword(self, index: int, name: str, type: str, value: object | None, comment: str) -> None: ...
