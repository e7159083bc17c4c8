"""Direct-I/O array reader core (use shmstream.DirectArray)."""



class Reader:
    def __init__(self, path: str, offset: int, nbytes: int, use_page_cache: bool = True, cache_bytes: int = 268435456) -> None: ...

    def close(self) -> None: ...

    def stats(self) -> dict:
        """
        Counters since open, in bytes of whole blocks: direct_bytes (read with O_DIRECT), cache_hit_bytes (block cache), page_cache_bytes, cache_used_bytes, cache_limit_bytes.
        """

    @property
    def direct(self) -> bool: ...

    @property
    def block_bytes(self) -> int: ...

    def read_units(self, units: object, unit_bytes: int, out: object) -> None: ...

    def read_strided(self, first: int, step: int, n: int, unit_bytes: int, out: object) -> None: ...

DEFAULT_CACHE_BYTES: int = 268435456

def io_backend() -> str: ...

def evict(path: str) -> None: ...

def resident(path: str) -> tuple[int, int]:
    """Cached pages and total pages of the file: (resident, total)."""
