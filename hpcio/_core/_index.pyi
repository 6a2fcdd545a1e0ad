"""Index kernels: bisection, offset tables, newline scanning, the keyed bijection of epoch
orders (compiled)."""
import numpy as np
from numpy.typing import NDArray

def bisect_ids(cum: NDArray[np.uint64], ids: NDArray[np.integer], *, path: str | None = None
               ) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
    """Global sample ids -> (shard, local index) over cumulative counts ``cum`` (cum[0] == 0).

    ``ids`` must be non-negative (negative indexing is resolved by the caller); an id
    >= cum[-1] raises IndexOutOfRangeError naming the id.  Releases the GIL."""

def offset_ranges(table, width: int, nrec: int, limit: int, indices: NDArray[np.integer] | None = None,
                  *, path: str | None = None, table_offset: int = 0, sample_base: int = 0
                  ) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """(starts, ends) of records from a little-endian u32 (width 4) or u64 (width 8) table of
    nrec+1 entries held in the buffer ``table``.  Entries must be non-decreasing and <= limit;
    otherwise CorruptShardError/TruncatedShardError naming path, byte offset
    (table_offset + entry position) and sample (sample_base + record)."""

def scan_lines(buf, base: int = 0) -> NDArray[np.uint64]:
    """Line start offsets of ``buf`` plus the end: array of count+1 entries (+ base)."""

BIJECTION_ROUNDS: int
"""Feistel rounds of the bijection: the length of its keys array."""

def bijection_forward(keys: NDArray[np.uint64], n: int, positions: NDArray[np.integer]
                      ) -> NDArray[np.int64]:
    """The keyed bijection of ``[0, n)`` (0 <= n < 2**63) at each of ``positions``, shaped
    like them.  ``keys`` holds BIJECTION_ROUNDS uint64 words.  A position outside
    ``[0, n)`` raises IndexOutOfRangeError naming it.  Releases the GIL."""

def bijection_inverse(keys: NDArray[np.uint64], n: int, indices: NDArray[np.integer]
                      ) -> NDArray[np.int64]:
    """The position at which ``bijection_forward(keys, n, .)`` gives each of ``indices``."""

def bijection_forward_range(keys: NDArray[np.uint64], n: int, start: int, count: int
                            ) -> NDArray[np.int64]:
    """``bijection_forward(keys, n, arange(start, start + count))`` without building the
    positions; every position must lie in ``[0, n)``.  Releases the GIL."""
