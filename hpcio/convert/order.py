"""The order a conversion's plan visits the selected samples in, computed, not stored.

A seeded plan permutes the ``n`` selected samples.  Stored, that permutation costs 8
bytes per sample on every rank, which a conversion of billions of samples cannot hold.
:class:`SeededOrder` is instead a bijection of ``[0, n)`` evaluated on demand: a
balanced Feistel network over the smallest even number of bits that covers ``n``,
restricted to ``[0, n)`` by cycle walking (an output outside the range is permuted
again until it falls inside, which keeps the map a bijection of the range).  Its round
keys come from ``numpy.random.default_rng(seed)``, so a seed gives the same order on
every rank and machine.
"""

from __future__ import annotations

import numpy as np
# numpy loads its random module on first use: imported here, with the rest of the
# converter, it is not paid inside a conversion's own time by rank 0 alone.
import numpy.random

__all__ = ["SeededOrder", "SourceOrder", "sample_order"]

# Six rounds of a keyed mixing function: four already make a Feistel network a
# pseudo-random permutation; two more cost little.
_ROUNDS = 6
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


class SourceOrder:
    """The identity order (``order="source"``): position ``p`` visits sample ``p``."""

    def __init__(self, n: int):
        self.n = n

    def forward(self, positions: np.ndarray) -> np.ndarray:
        return np.asarray(positions, dtype=np.int64)

    def inverse(self, indices: np.ndarray) -> np.ndarray:
        return np.asarray(indices, dtype=np.int64)


class SeededOrder:
    """A seeded bijection of ``[0, n)``: ``forward(p)`` is the sample visited at
    position ``p``; ``inverse`` undoes it.

    >>> order = SeededOrder(10, seed=1)
    >>> sorted(order.forward(np.arange(10)).tolist()) == list(range(10))
    True
    >>> order.inverse(order.forward(np.arange(10))).tolist() == list(range(10))
    True
    """

    def __init__(self, n: int, seed: int):
        self.n = n
        bits = max(2, int(n - 1).bit_length())
        self._half = np.uint64((bits + 1) // 2)
        self._mask = np.uint64((1 << int(self._half)) - 1)
        self._keys = np.random.default_rng(seed).integers(0, 2**63, _ROUNDS, dtype=np.int64).astype(np.uint64)

    def _mix(self, half: np.ndarray, key: np.uint64) -> np.ndarray:
        """splitmix64's finaliser of ``half + key``, cut to a half's bits."""
        z = (half + key) * _GOLDEN
        z ^= z >> np.uint64(30)
        z *= _MIX1
        z ^= z >> np.uint64(27)
        z *= _MIX2
        z ^= z >> np.uint64(31)
        return z & self._mask

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ self._mix(right, key)
        return (left << self._half) | right

    def _decrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys[::-1]:
            left, right = right ^ self._mix(left, key), left
        return (left << self._half) | right

    def _walk(self, step, values) -> np.ndarray:
        x = step(np.asarray(values, dtype=np.int64).astype(np.uint64))
        n = np.uint64(self.n)
        outside = np.flatnonzero(x >= n)
        while len(outside):
            x[outside] = step(x[outside])
            outside = outside[x[outside] >= n]
        return x.astype(np.int64)

    def forward(self, positions: np.ndarray) -> np.ndarray:
        """The sample index at each of ``positions`` (each in ``[0, n)``)."""
        return self._walk(self._encrypt, positions)

    def inverse(self, indices: np.ndarray) -> np.ndarray:
        """The position of each of ``indices`` (each in ``[0, n)``)."""
        return self._walk(self._decrypt, indices)


def sample_order(n: int, seed: int, order: str) -> SeededOrder | SourceOrder:
    """The order of plan ``order`` (``"seeded"`` or ``"source"``) over ``n`` samples."""
    from ..errors import PlanError

    if order == "seeded":
        return SeededOrder(n, seed)
    if order == "source":
        return SourceOrder(n)
    raise PlanError(f"unknown sample order {order!r}; use 'seeded' or 'source'")
