"""A keyed bijection of ``[0, n)``, evaluated on demand: the shared core of every order.

A balanced Feistel network over the smallest even number of bits that covers ``n``,
restricted to ``[0, n)`` by cycle walking (an output outside the range is permuted again
until it falls inside, which keeps the map a bijection of the range).  Six rounds of
splitmix64's finaliser keyed by six 64-bit words.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Bijection", "ROUNDS"]

ROUNDS = 6
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


class Bijection:
    """``forward(p)`` is the image of position ``p``; ``inverse`` undoes it.

    >>> b = Bijection(10, np.arange(1, 7, dtype=np.uint64))
    >>> sorted(b.forward(np.arange(10)).tolist()) == list(range(10))
    True
    """

    def __init__(self, n: int, keys: np.ndarray):
        self.n = int(n)
        self.keys = np.asarray(keys, dtype=np.uint64)
        bits = max(2, int(self.n - 1).bit_length())
        self._half = np.uint64((bits + 1) // 2)
        self._mask = np.uint64((1 << int(self._half)) - 1)

    def _mix(self, half, key):
        z = (half + key) * _GOLDEN
        z ^= z >> np.uint64(30)
        z *= _MIX1
        z ^= z >> np.uint64(27)
        z *= _MIX2
        z ^= z >> np.uint64(31)
        return z & self._mask

    def _encrypt(self, x):
        left, right = x >> self._half, x & self._mask
        for key in self.keys:
            left, right = right, left ^ self._mix(right, key)
        return (left << self._half) | right

    def _decrypt(self, x):
        left, right = x >> self._half, x & self._mask
        for key in self.keys[::-1]:
            left, right = right ^ self._mix(left, key), left
        return (left << self._half) | right

    def _walk(self, step, values) -> np.ndarray:
        with np.errstate(over="ignore"):
            x = step(np.asarray(values, dtype=np.int64).astype(np.uint64))
            n = np.uint64(self.n)
            outside = np.flatnonzero(x >= n)
            while len(outside):
                x[outside] = step(x[outside])
                outside = outside[x[outside] >= n]
        return x.astype(np.int64)

    def forward(self, positions) -> np.ndarray:
        return self._walk(self._encrypt, positions)

    def inverse(self, indices) -> np.ndarray:
        return self._walk(self._decrypt, indices)

    def forward_range(self, start: int, count: int) -> np.ndarray:
        return self.forward(np.arange(start, start + count, dtype=np.int64))
