"""Unread: the positions a one-per-round split leaves after each consumer read some."""

import numpy as np
import pytest

from hpcio.distributed.ranges import Unread
from hpcio.errors import InvalidArgumentError


def brute(n, counts):
    c = len(counts)
    read = {j * c + k for k in range(c) for j in range(int(counts[k])) if j * c + k < n}
    return [p for p in range(n) if p not in read]


def test_unread_matches_the_positions_left_by_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n, c = int(rng.integers(0, 80)), int(rng.integers(1, 10))
        counts = rng.integers(0, n // c + 3, size=c)  # beyond a column's length too
        u = Unread(n, counts)
        assert len(u) == len(brute(n, counts))
        assert u.take(np.arange(len(u))).tolist() == brute(n, counts)


def test_unread_at_ten_billion_positions_and_32768_consumers_holds_the_counts_only():
    n, c = 10**10, 32768
    rng = np.random.default_rng(1)
    counts = 100_000 + rng.integers(0, 2_000, size=c)  # a ragged front of 2,000 rows
    u = Unread(n, counts)
    assert len(u) == n - int(counts.sum())
    q = np.array([0, 1, 12345, len(u) - 1])
    got = u.take(q)
    # rows below the front's bottom are gone; the first position left is in row min(counts)
    low = int(counts.min())
    first = low * c + int(np.flatnonzero(counts <= low)[0])
    assert got[0] == first and got[-1] == n - 1
    assert (np.diff(got) > 0).all()
    # each position left is one a consumer had not read: row >= that column's count
    assert (got // c >= counts[got % c]).all()


def test_unread_refuses_counts_that_are_not_one_per_consumer():
    with pytest.raises(ValueError, match=r"^read counts are one non-negative integer per consumer$"):
        Unread(10, [])
    with pytest.raises(InvalidArgumentError):
        Unread(10, [1, -1])
