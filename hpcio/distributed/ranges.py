"""Ranges of epoch positions: skip ranges, consumed ranges, and the positions left.

A resume state names what was read as ranges ``(start, end)`` of epoch positions, never
as samples; :class:`Kept` is the order of the positions outside such ranges.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from .order import IndexMap

__all__ = ["merged_ranges", "subtract", "Kept", "Unread", "epoch_skip", "kept_to_epoch"]


def merged_ranges(skip) -> list[tuple[int, int]]:
    """``skip`` as sorted, merged, non-empty ``(start, end)`` stream-position ranges."""
    if skip is None:
        return []
    ranges = []
    for r in skip:
        try:
            start, end = (int(v) for v in r)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"skip takes (start, end) pairs of positions, got {r!r}") from None
        if isinstance(r, (str, bytes)) or not 0 <= start <= end:
            raise InvalidArgumentError(f"a skip range is (start, end) with 0 <= start <= end, got {tuple(r)!r}")
        if start < end:
            ranges.append((start, end))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def subtract(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The positions of ranges ``a`` not in ranges ``b`` (both merged), as ranges."""
    out = []
    for start, end in a:
        for lo, hi in b:
            if hi <= start or lo >= end:
                continue
            if lo > start:
                out.append((start, lo))
            start = max(start, hi)
            if start >= end:
                break
        if start < end:
            out.append((start, end))
    return out


class Kept(IndexMap):
    """The epoch positions ``[0, n)`` left after removing ``ranges`` (merged, within
    ``[0, n)``): position ``q`` of the remaining ones is epoch position
    ``q + (lengths of the ranges starting at or before it, in remaining coordinates)``."""

    def __init__(self, n: int, ranges: list[tuple[int, int]]):
        self.n, self.ranges = int(n), list(ranges)
        lengths = np.array([e - s for s, e in ranges], dtype=np.int64)
        self._before = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        self._kept_starts = np.array([s for s, _ in ranges], dtype=np.int64) - self._before[:-1]
        self.length = self.n - int(self._before[-1])

    def __len__(self) -> int:
        return self.length

    def take(self, positions):
        q = np.asarray(positions, dtype=np.int64)
        return q + self._before[np.searchsorted(self._kept_starts, q, side="right")]

    def spec(self) -> dict:
        return {"order": "kept", "n": self.n, "skip": [list(r) for r in self.ranges]}


def epoch_skip(ranges: list[tuple[int, int]], epoch: int, n: int) -> list[tuple[int, int]]:
    """The skip ranges (stream positions) that fall in ``epoch``, as epoch positions."""
    lo, hi = epoch * n, (epoch + 1) * n
    return [(max(s, lo) - lo, min(e, hi) - lo) for s, e in ranges if s < hi and e > lo]


def kept_to_epoch(n: int, ranges: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """Positions ``[a, b)`` of ``Kept(n, ranges)`` as ranges of epoch positions.

    >>> kept_to_epoch(10, [(2, 4)], 1, 5)
    [(1, 2), (4, 7)]
    """
    out, q, lo = [], 0, 0
    for s, e in list(ranges) + [(n, n)]:
        size = s - lo  # the free interval [lo, s)
        x, y = max(a, q), min(b, q + size)
        if x < y:
            out.append((lo + x - q, lo + y - q))
        q += size
        lo = e
        if q >= b:
            break
    return out


class Unread(IndexMap):
    """The positions ``[0, n)`` that ``consumers`` consumers, splitting them one
    position per round (consumer ``c`` reads ``c, c + C, c + 2C, ...``, as
    :func:`~hpcio.distributed.consumer_order` deals with ``batch_size=1``), left unread
    after consumer ``c`` read the first ``read[c]`` of its part.

    Consumed positions form a ragged front in the grid of rows of ``C`` positions: rows
    below the smallest count are gone, rows from the largest count on are whole.  It
    holds the counts (one integer per consumer), never positions, and finds a
    remaining position by a search over the rows of the front.

    >>> u = Unread(10, [2, 1, 0])  # read 0, 3 (consumer 0) and 1 (consumer 1)
    >>> u[:].tolist()
    [2, 4, 5, 6, 7, 8, 9]
    """

    def __init__(self, n: int, read):
        self.n = int(n)
        counts = np.asarray(read, dtype=np.int64)
        if counts.ndim != 1 or counts.size < 1 or (counts < 0).any():
            raise InvalidArgumentError("read counts are one non-negative integer per consumer")
        self.consumers = c = counts.size
        # positions of column c are c, c + C, ...: n // C of them, one more for c < n % C
        rows = self.n // c + (np.arange(c) < self.n % c)
        self.read = np.minimum(counts, rows)
        self._low, self._high = int(self.read.min()), int(self.read.max())
        self._consumed = int(self.read.sum())
        self._sorted = np.sort(self.read)
        self._prefix = np.concatenate(([0], np.cumsum(self._sorted)))
        # kept positions before rows low .. high (rows below low are wholly consumed)
        j = np.arange(self._low, self._high + 1, dtype=np.int64)
        self._kept_before = np.minimum(j * c, self.n) - self._consumed_before(j)

    def _consumed_before(self, j: np.ndarray) -> np.ndarray:
        """Consumed positions in rows ``< j``: the sum of ``min(read[c], j)``."""
        below = np.searchsorted(self._sorted, j, side="left")
        return self._prefix[below] + j * (self.consumers - below)

    def __len__(self) -> int:
        return self.n - self._consumed

    def take(self, positions):
        q = np.asarray(positions, dtype=np.int64)
        out = q + self._consumed  # beyond the front: every consumed position precedes
        front = q < self._kept_before[-1]
        if front.any():
            qf = q[front]
            k = np.searchsorted(self._kept_before, qf, side="right") - 1
            row = self._low + k
            rank = qf - self._kept_before[k]
            got = np.empty_like(qf)
            for r in np.unique(row).tolist():
                sel = row == r
                cols = np.flatnonzero((self.read <= r) & (r * self.consumers + np.arange(self.consumers) < self.n))
                got[sel] = r * self.consumers + cols[rank[sel]]
            out[front] = got
        return out

    def spec(self) -> dict:
        return {"order": "unread", "n": self.n, "read": self.read.tolist()}
