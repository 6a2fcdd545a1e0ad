"""Tar header parsing and member indexing (compiled)."""
import numpy as np
from numpy.typing import NDArray

from ..errors import HpcioError

def parse_header(block, offset: int = 0, *, path: str | None = None
                 ) -> tuple[bytes, int, str] | None:
    """One 512-byte header block: (name, size, type flag), or None for a zero (end) block.
    The checksum is validated (CorruptShardError naming path and byte offset)."""

def scan(buf, *, path: str | None = None, partial: bool = False
         ) -> tuple[list[bytes], NDArray[np.uint64], NDArray[np.uint64], NDArray[np.uint64],
                    int, HpcioError | None]:
    """Regular-file members of the archive in ``buf`` (GNU long names and pax paths
    resolved): (names, header_offsets, data_offsets, sizes, end, error).  Releases the GIL.
    Damage raises CorruptShardError/TruncatedShardError with ``.member`` set (the number of
    members indexed before it); with partial=True it is returned as ``error`` instead."""
