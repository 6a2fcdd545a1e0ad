"""The order a conversion's plan visits the selected samples in, computed, not stored.

A seeded plan permutes the ``n`` selected samples.  Stored, that permutation costs 8
bytes per sample on every rank, which a conversion of billions of samples cannot hold.
:class:`SeededOrder` is instead a bijection of ``[0, n)`` evaluated on demand
(:class:`hpcio._bijection.Bijection`: a Feistel network restricted to ``[0, n)`` by cycle
walking).  Its round keys come from ``numpy.random.default_rng(seed)``, so a seed gives
the same order on every rank and machine.
"""

from __future__ import annotations

import numpy as np

# numpy loads its random module on first use: imported here, with the rest of the
# converter, it is not paid inside a conversion's own time by rank 0 alone.
import numpy.random

from .._bijection import ROUNDS, Bijection

__all__ = ["SeededOrder", "SourceOrder", "sample_order"]


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
        # The keys a plan's order was defined with: changing how they are drawn changes
        # which samples every seeded conversion writes where.
        keys = np.random.default_rng(seed).integers(0, 2**63, ROUNDS, dtype=np.int64)
        self._bijection = Bijection(n, keys.astype(np.uint64))

    def forward(self, positions: np.ndarray) -> np.ndarray:
        """The sample index at each of ``positions`` (each in ``[0, n)``)."""
        return self._bijection.forward(positions)

    def inverse(self, indices: np.ndarray) -> np.ndarray:
        """The position of each of ``indices`` (each in ``[0, n)``)."""
        return self._bijection.inverse(indices)


def sample_order(n: int, seed: int, order: str) -> SeededOrder | SourceOrder:
    """The order of plan ``order`` (``"seeded"`` or ``"source"``) over ``n`` samples."""
    from ..errors import PlanError

    if order == "seeded":
        return SeededOrder(n, seed)
    if order == "source":
        return SourceOrder(n)
    raise PlanError(f"unknown sample order {order!r}; use 'seeded' or 'source'")
