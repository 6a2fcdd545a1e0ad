"""A keyed bijection of ``[0, n)``, evaluated on demand: the shared core of every order.

A balanced Feistel network over the smallest even number of bits that covers ``n``,
restricted to ``[0, n)`` by cycle walking (an output outside the range is permuted again
until it falls inside, which keeps the map a bijection of the range).  Six rounds of
splitmix64's finaliser keyed by six 64-bit words.  It is computed by the C kernel
``hpcio_bijection_*`` (``csrc/order.c``) with the GIL released; this module only checks
and converts the arguments.
"""

from __future__ import annotations

import operator

import numpy as np

from .errors import InvalidArgumentError, WrongTypeError

__all__ = ["Bijection", "ROUNDS"]

# Feistel rounds, one key word each (HPCIO_BIJECTION_ROUNDS in csrc/hpcio.h): four
# already make a Feistel network a pseudo-random permutation; two more cost little.  A
# plain number here, so that importing hpcio does not load the compiled core.
ROUNDS = 6


def _as_keys(keys) -> np.ndarray:
    """``ROUNDS`` key words as a uint64 array; signed integers must be non-negative."""
    arr = np.asarray(keys)
    if arr.dtype.kind not in "iu":
        raise WrongTypeError(f"bijection keys must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise InvalidArgumentError(f"bijection keys must be in [0, 2**64), got {int(arr.min())}")
    if arr.shape != (ROUNDS,):
        raise InvalidArgumentError(
            f"bijection keys must be {ROUNDS} words (one per round), got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.uint64)


class Bijection:
    """``forward(p)`` is the image of position ``p``; ``inverse`` undoes it.

    ``n`` is in ``[0, 2**63)``; ``keys`` holds one integer in ``[0, 2**64)`` per round.
    Positions and indices outside ``[0, n)`` raise
    :class:`~hpcio.errors.IndexOutOfRangeError` naming the first of them.

    >>> b = Bijection(10, np.arange(1, 7, dtype=np.uint64))
    >>> sorted(b.forward(np.arange(10)).tolist()) == list(range(10))
    True
    >>> b.inverse(b.forward_range(0, 10)).tolist() == list(range(10))
    True
    """

    def __init__(self, n: int, keys: np.ndarray):
        n = operator.index(n)
        if n < 0 or n >= 2**63:
            raise InvalidArgumentError(f"a bijection covers 0 <= n < 2**63 values, got n = {n}")
        self.n = n
        self.keys = _as_keys(keys)

    def forward(self, positions) -> np.ndarray:
        """The image of each of ``positions`` (integers in ``[0, n)``), shaped like them."""
        from ._core import _index

        return _index.bijection_forward(self.keys, self.n, positions)

    def inverse(self, indices) -> np.ndarray:
        """The position whose image is each of ``indices`` (integers in ``[0, n)``)."""
        from ._core import _index

        return _index.bijection_inverse(self.keys, self.n, indices)

    def forward_range(self, start: int, count: int) -> np.ndarray:
        """``forward(arange(start, start + count))``, without the positions array."""
        from ._core import _index

        return _index.bijection_forward_range(self.keys, self.n, start, count)
