"""Epoch orders computed, not stored: position -> sample index, for the positions read.

An order of ``n`` samples is an :class:`IndexMap`: ``len(order) == n`` and
``order.take(positions)`` gives the sample index at each position.  Nothing in it
grows with ``n``: a consumer of 10^10 samples evaluates its own positions, a batch at a
time, and holds a few keys (global) or the shard table (block).

The orders, as functions of ``(n, seed, epoch)`` (algorithm :data:`ORDER_ALGORITHM`):

- ``global``: a keyed bijection of ``[0, n)`` (:class:`hpcio._bijection.Bijection`)
  whose six round keys are ``SeedSequence([seed, epoch]).generate_state(6, uint64)``.
- ``block``: the shards in the order of a bijection of ``[0, shards)`` keyed by
  ``[seed, epoch, 1]``; consecutive groups of ``window`` shards form a window whose
  samples are visited in the order of a bijection of the window keyed by
  ``[seed, epoch, 2, w]`` for window ``w``.
- ``none``: ``0..n-1``.
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from collections.abc import Iterator, Sequence

import numpy as np

from .._bijection import ROUNDS, Bijection
from ..errors import IndexOutOfRangeError, InvalidArgumentError

__all__ = [
    "ORDER_ALGORITHM",
    "IndexMap",
    "Arange",
    "Composed",
    "Rotated",
    "GlobalOrder",
    "BlockOrder",
    "seed_keys",
    "as_index_map",
]

# Recorded in every resume state: a state saved under another algorithm names other
# samples at the same positions, so it is refused rather than silently misread.
ORDER_ALGORITHM = "feistel6-splitmix64-v1"

_CHUNK = 1 << 20  # positions evaluated per step when an order is materialised


def seed_keys(*words: int) -> np.ndarray:
    """The round keys of one bijection: ``SeedSequence(words)``'s first six words."""
    for w in words:
        if int(w) < 0:
            raise InvalidArgumentError(f"seeds and epochs must be >= 0, got {w}")
    return np.random.SeedSequence([int(w) for w in words]).generate_state(ROUNDS, np.uint64)


class IndexMap(abc.ABC):
    """A read-only sequence of int64 sample indices, evaluated on demand.

    ``m[i]`` is an int, ``m[a:b]`` and ``m[array]`` numpy arrays; ``np.asarray(m)``
    materialises the whole map (only for maps that fit in memory).
    """

    dtype = np.dtype(np.int64)
    ndim = 1

    @property
    def shape(self) -> tuple[int]:
        return (len(self),)

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def take(self, positions: np.ndarray) -> np.ndarray:
        """Indices at ``positions``, an int64 array already in ``[0, len(self))``."""

    @abc.abstractmethod
    def spec(self) -> dict:
        """What defines this map, as plain values (fingerprints and resume checks)."""

    def at(self, position: int) -> int:
        """The index at one ``position`` already in ``[0, len(self))`` (``ds[i]``'s path)."""
        return int(self.take(np.array([position], dtype=np.int64))[0])

    def _checked(self, key) -> np.ndarray:
        n = len(self)
        key = np.asarray(key, dtype=np.int64)
        if key.size:
            lo, hi = int(key.min()), int(key.max())
            if lo < -n or hi >= n:
                raise IndexOutOfRangeError(f"position {lo if lo < -n else hi} out of range for an order of {n}")
            if lo < 0:
                key = np.where(key < 0, key + n, key)
        return key

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            count = len(range(start, stop, step))
            if step == 1:
                return self.take(np.arange(start, start + count, dtype=np.int64))
            return self.take(start + step * np.arange(count, dtype=np.int64))
        if isinstance(key, (int, np.integer)):
            return self.at(int(self._checked([int(key)])[0]))
        return self.take(self._checked(key))

    def __iter__(self) -> Iterator[int]:
        for lo in range(0, len(self), _CHUNK):
            yield from self[lo : lo + _CHUNK].tolist()

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def tolist(self) -> list:
        return self[:].tolist()

    def tobytes(self) -> bytes:
        """A fingerprint of the map (what defines it), not its materialised indices."""
        return repr(sorted(self.spec().items())).encode()

    def __repr__(self):
        return f"<{type(self).__name__} {self.spec()}>"


def as_index_map(indices) -> IndexMap | np.ndarray:
    """``indices`` as given when lazy, else as a contiguous int64 array."""
    if isinstance(indices, IndexMap):
        return indices
    return np.ascontiguousarray(indices, dtype=np.int64)


def at(indices, position: int) -> int:
    """``indices[position]`` for an array or an :class:`IndexMap` (position in range)."""
    if isinstance(indices, IndexMap):
        return indices.at(position)
    return int(indices[position])


def take(indices, positions: np.ndarray) -> np.ndarray:
    """``indices[positions]`` for an array or an :class:`IndexMap` (positions in range)."""
    if isinstance(indices, IndexMap):
        return indices.take(positions)
    return indices[positions]


class Arange(IndexMap):
    """``start, start + step, ...``: ``length`` of them (slices and splits of a view)."""

    def __init__(self, start: int, step: int, length: int):
        self.start, self.step, self.length = int(start), int(step), max(0, int(length))

    def __len__(self) -> int:
        return self.length

    def take(self, positions):
        return self.start + self.step * np.asarray(positions, dtype=np.int64)

    def at(self, position: int) -> int:
        return self.start + self.step * int(position)

    def spec(self) -> dict:
        return {"order": "range", "start": self.start, "step": self.step, "length": self.length}


class Composed(IndexMap):
    """``inner[outer[p]]``: a view of a view, neither materialised."""

    def __init__(self, outer, inner):
        self.outer, self.inner = outer, inner

    def __len__(self) -> int:
        return len(self.outer)

    def take(self, positions):
        return take(self.inner, take(self.outer, positions))

    def at(self, position: int) -> int:
        return at(self.inner, at(self.outer, position))

    def spec(self) -> dict:
        def part(m):
            return m.spec() if isinstance(m, IndexMap) else {"array": len(m)}

        return {"order": "composed", "outer": part(self.outer), "inner": part(self.inner)}

    def tobytes(self) -> bytes:
        return b"composed|" + self.outer.tobytes() + b"|" + self.inner.tobytes()


class Rotated(IndexMap):
    """``base`` read from position ``shift`` on, wrapping around to its start."""

    def __init__(self, base, shift: int):
        self.base = base
        self.shift = int(shift) % len(base) if len(base) else 0

    def __len__(self) -> int:
        return len(self.base)

    def take(self, positions):
        return take(self.base, (np.asarray(positions, dtype=np.int64) + self.shift) % len(self.base))

    def spec(self) -> dict:
        base = self.base.spec() if isinstance(self.base, IndexMap) else {"array": len(self.base)}
        return {"order": "rotated", "base": base, "shift": self.shift}


class GlobalOrder(IndexMap):
    """A true global shuffle of ``n`` samples: any sample at any position.

    >>> order = GlobalOrder(10, seed=1, epoch=0)
    >>> sorted(order.tolist()) == list(range(10))
    True
    >>> int(order.position_of([order[3]])[0])
    3
    """

    def __init__(self, n: int, seed: int = 0, epoch: int = 0):
        if int(n) < 0 or int(n) >= 2**63:
            raise InvalidArgumentError(f"an order covers 0 <= n < 2**63 samples, got {n}")
        self.n, self.seed, self.epoch = int(n), int(seed), int(epoch)
        self._bijection = Bijection(self.n, seed_keys(self.seed, self.epoch))

    def __len__(self) -> int:
        return self.n

    def take(self, positions):
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size == 0:
            return np.empty(0, dtype=np.int64)
        return self._bijection.forward(positions)

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n)
            if step == 1:
                return self._bijection.forward_range(start, max(0, stop - start))
        return super().__getitem__(key)

    def at(self, position: int) -> int:
        return int(self._bijection.forward_range(position, 1)[0])

    def position_of(self, indices) -> np.ndarray:
        """The position at which each of ``indices`` is read (the inverse order)."""
        return self._bijection.inverse(self._checked(indices))

    def spec(self) -> dict:
        return {"order": "global", "algorithm": ORDER_ALGORITHM, "n": self.n,
                "seed": self.seed, "epoch": self.epoch}


class BlockOrder(IndexMap):
    """Shards in a random order, samples shuffled within each ``window`` of shards.

    At any time a reader draws from about ``window`` shards and consumes each before it
    leaves the window, so whole-shard fetches from slow storage are used once.  It
    holds the shard table and evaluates a window's bijection for the positions asked.

    Shard 1 (samples 3, 4) is read first here, then shard 0, each shuffled:

    >>> BlockOrder([3, 2], seed=4, epoch=0, window=1).tolist()
    [3, 4, 2, 0, 1]
    """

    _KEEP = 64  # window bijections kept: a batch touches one or two windows

    def __init__(self, shard_sizes: Sequence[int] | np.ndarray, seed: int = 0, epoch: int = 0,
                 window: int = 1):
        sizes = np.asarray(shard_sizes, dtype=np.int64)
        if sizes.ndim != 1 or (sizes < 0).any():
            raise InvalidArgumentError("shard_sizes must be a 1-d sequence of non-negative counts")
        if int(window) < 1:
            raise InvalidArgumentError(f"window must be >= 1 shard, got {window}")
        self.seed, self.epoch, self.window = int(seed), int(epoch), int(window)
        self.shards = int(sizes.size)
        starts = np.zeros(sizes.size, dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        perm = Bijection(self.shards, seed_keys(self.seed, self.epoch, 1)).forward_range(0, self.shards)
        lengths = sizes[perm]
        self._slot_ends = np.cumsum(lengths)
        self._slot_starts = self._slot_ends - lengths
        self._slot_first = starts[perm]  # first sample index of the shard in each slot
        self.n = int(self._slot_ends[-1]) if sizes.size else 0
        bounds = np.concatenate(([0], self._slot_ends[self.window - 1 :: self.window]))
        if bounds[-1] != self.n:
            bounds = np.append(bounds, self.n)
        self._bounds = bounds.astype(np.int64)
        self._windows: OrderedDict[int, Bijection] = OrderedDict()

    def __len__(self) -> int:
        return self.n

    def _window(self, w: int) -> Bijection:
        b = self._windows.get(w)
        if b is None:
            size = int(self._bounds[w + 1] - self._bounds[w])
            b = self._windows[w] = Bijection(size, seed_keys(self.seed, self.epoch, 2, w))
            if len(self._windows) > self._KEEP:
                self._windows.popitem(last=False)
        return b

    def take(self, positions):
        p = np.asarray(positions, dtype=np.int64)
        if p.size == 0:
            return np.empty(0, dtype=np.int64)
        w = np.searchsorted(self._bounds, p, side="right") - 1
        g = np.empty_like(p)
        for win in np.unique(w).tolist():
            sel = w == win
            lo = int(self._bounds[win])
            g[sel] = lo + self._window(win).forward(p[sel] - lo)
        slot = np.searchsorted(self._slot_ends, g, side="right")
        return self._slot_first[slot] + (g - self._slot_starts[slot])

    def spec(self) -> dict:
        return {"order": "block", "algorithm": ORDER_ALGORITHM, "n": self.n, "shards": self.shards,
                "seed": self.seed, "epoch": self.epoch, "window": self.window}
