"""Planned stages: batches and packed rows decided from lengths, globally, before reading.

A planned stage (``batch`` with a budget and ``lengths=``, ``pack``) cuts the epoch order
into windows of ``plan_window`` positions and, for each window, reads the lengths of its
samples without decoding them (:func:`field_lengths`) and forms *groups*: a batch is a
list of epoch positions, a packed row a list of pieces ``(position, offset, length)``.
The groups of all windows, in window order, are the epoch's *group sequence*.

Group ``g`` goes to consumer ``g % C`` as its step ``g // C`` (consumers worker-major, as
:func:`~hpcio.distributed.consumer_order`), and only whole rounds of ``C`` groups are
dealt: every consumer takes the same number of steps, and the last ``G % C`` groups of
the epoch are its remainder.  The sequence depends on the order, the lengths and the
stage's parameters, never on the world size, so a resume state is the number of groups
the job consumed (:meth:`GroupPlan.groups`).
"""

from __future__ import annotations

import abc
import bisect
from collections.abc import Iterator, Sequence

import numpy as np

from .._bijection import Bijection
from ..distributed.epochs import with_provenance
from ..distributed.order import IndexMap, seed_keys, take
from ..errors import InvalidArgumentError, StepPlanError
from .stages import BatchStage

__all__ = ["field_lengths", "pack_best_fit", "pack_next_fit", "plan_batches", "WindowShuffled",
           "Planner", "BatchPlanner", "PackPlanner", "GroupPlan", "read_groups", "DEFAULT_PLAN_WINDOW"]

# Positions planned together: large enough that best-fit packing and buckets find good
# partners, small enough that a window's lengths and groups are a few hundred KB.
DEFAULT_PLAN_WINDOW = 16384
# Key word that keeps the plan's shuffles apart from the epoch orders'.
_PLAN_TAG = 0x706C616E


def field_lengths(dataset, indices, field: str, fn=None) -> np.ndarray:
    """``len()`` (or ``fn``) of ``field`` for the samples at ``indices`` of ``dataset``.

    Formats that count lengths in place (MDS ``str`` and ``bytes`` columns) decode
    nothing; others read the one field.
    """
    idx = np.asarray(indices, dtype=np.int64)
    if dataset.indices is not None:
        idx = take(dataset.indices, idx)
    if fn is None:
        got = dataset.reader.field_lengths(idx, field)
        if got is not None:
            return np.asarray(got, dtype=np.int64)
    values = dataset.reader.read_field(idx, field)
    f = len if fn is None else fn
    return np.fromiter((f(v) for v in values), dtype=np.int64, count=len(values))


# --- packing -------------------------------------------------------------------------
def pack_best_fit(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Best-fit decreasing: each item, longest first, goes to the open row it fills
    most tightly, or opens a row.  Items are indices into ``lengths`` (all ``<=
    capacity``); rows list them in increasing index order.

    >>> pack_best_fit(np.array([5, 3, 4, 2, 6]), 10)
    [[2, 4], [0, 1, 3]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, row), sorted
    for i in np.argsort(-lengths, kind="stable").tolist():
        need = int(lengths[i])
        k = bisect.bisect_left(free, (need, -1))
        if k < len(free):
            room, r = free.pop(k)
            rows[r].append(i)
            room -= need
        else:
            r = len(rows)
            rows.append([i])
            room = capacity - need
        if room > 0:
            bisect.insort(free, (room, r))
    return [sorted(r) for r in rows]


def pack_next_fit(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Rows filled in order, a row closed when the next item does not fit (greedy
    packing that cuts no document): the baseline best-fit is measured against.

    >>> pack_next_fit(np.array([5, 3, 4, 2, 6]), 10)
    [[0, 1], [2, 3], [4]]
    """
    rows: list[list[int]] = []
    used = capacity
    for i, n in enumerate(np.asarray(lengths, dtype=np.int64).tolist()):
        if used + n > capacity:
            rows.append([])
            used = 0
        rows[-1].append(i)
        used += n
    return rows


# --- batching ------------------------------------------------------------------------
def _greedy(items: Sequence[int], lengths: np.ndarray, size, max_tokens, max_bytes) -> list[list[int]]:
    """Batches of ``items`` in order, closed as :class:`~hpcio.pipeline.stages.BatchStage`
    closes them: at ``size`` items or before a budget is exceeded."""
    out: list[list[int]] = []
    batch: list[int] = []
    total = longest = 0
    for i in items:
        n = int(lengths[i])
        over = batch and (
            (max_bytes is not None and total + n > max_bytes)
            or (max_tokens is not None and max(longest, n) * (len(batch) + 1) > max_tokens)
        )
        if over:
            out.append(batch)
            batch, total, longest = [], 0, 0
        batch.append(i)
        total += n
        longest = max(longest, n)
        if size is not None and len(batch) == size:
            out.append(batch)
            batch, total, longest = [], 0, 0
    if batch:
        out.append(batch)
    return out


def plan_batches(lengths: np.ndarray, *, size=None, max_tokens=None, max_bytes=None,
                 buckets=None, rng: np.random.Generator | None = None) -> list[list[int]]:
    """Batches of indices into ``lengths`` within the budgets.

    Without ``buckets`` the items are batched in order.  With ``buckets`` (upper length
    edges, increasing; or an int: that many equal-count buckets of these lengths) each
    item joins the first bucket whose edge is at least its length (the last bucket takes
    the rest), each bucket is batched in order, and the batches of all buckets are
    visited in the order of ``rng``'s permutation: similar lengths share a batch, and
    the order of lengths over steps stays random.

    >>> plan_batches(np.array([1, 9, 2, 8]), max_tokens=18)
    [[0, 1], [2, 3]]
    >>> plan_batches(np.array([1, 9, 2, 8]), max_tokens=18, buckets=[4],
    ...              rng=np.random.default_rng(0))
    [[0, 2], [1, 3]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if buckets is None:
        return _greedy(range(len(lengths)), lengths, size, max_tokens, max_bytes)
    if isinstance(buckets, (int, np.integer)):
        if buckets < 1:
            raise InvalidArgumentError(f"buckets must be >= 1, got {buckets}")
        edges = np.quantile(lengths, np.arange(1, buckets) / buckets) if len(lengths) else []
    else:
        edges = np.asarray(buckets, dtype=np.float64)
    which = np.searchsorted(np.asarray(edges, dtype=np.float64), lengths, side="left")
    out: list[list[int]] = []
    for b in np.unique(which).tolist():
        out.extend(_greedy(np.flatnonzero(which == b).tolist(), lengths, size, max_tokens, max_bytes))
    if rng is not None:
        out = [out[k] for k in rng.permutation(len(out)).tolist()]
    return out


# --- orders --------------------------------------------------------------------------
class WindowShuffled(IndexMap):
    """``base`` with its positions permuted within consecutive windows of ``window``
    (a keyed bijection per window): a buffer shuffle computed from positions, so it has
    no state to save."""

    def __init__(self, base, window: int, seed: int, epoch: int):
        self.base, self.window = base, int(window)
        self.seed, self.epoch = int(seed), int(epoch)
        self._cache: dict[int, Bijection] = {}

    def __len__(self) -> int:
        return len(self.base)

    def _bijection(self, w: int) -> Bijection:
        b = self._cache.get(w)
        if b is None:
            size = min(self.window, len(self.base) - w * self.window)
            if len(self._cache) > 64:
                self._cache.clear()
            b = self._cache[w] = Bijection(size, seed_keys(self.seed, self.epoch, _PLAN_TAG, w))
        return b

    def take(self, positions):
        p = np.asarray(positions, dtype=np.int64)
        out = np.empty_like(p)
        w = p // self.window
        for win in np.unique(w).tolist():
            sel = w == win
            out[sel] = win * self.window + self._bijection(win).forward(p[sel] - win * self.window)
        return take(self.base, out)

    def spec(self) -> dict:
        base = self.base.spec() if isinstance(self.base, IndexMap) else {"array": len(self.base)}
        return {"order": "window-shuffled", "base": base, "window": self.window,
                "seed": self.seed, "epoch": self.epoch}


# --- planners ------------------------------------------------------------------------
class Planner(abc.ABC):
    """Forms one window's groups from the lengths of its samples."""

    field: str
    length_fn = None
    extra = 0  # tokens added to every sample's length (an end-of-document token)

    @abc.abstractmethod
    def groups(self, lengths: np.ndarray, rng: np.random.Generator) -> list:
        """The window's groups, from its samples' lengths and a seeded generator."""

    @abc.abstractmethod
    def spec(self) -> dict:
        """The planner's parameters as plain values (part of a resume state)."""


class BatchPlanner(Planner):
    """Batches within a token or byte budget, optionally bucketed by length; a group is
    an array of window offsets."""

    def __init__(self, field, size, max_tokens, max_bytes, buckets, length_fn=None):
        self.field, self.length_fn = field, length_fn
        self.size, self.max_tokens, self.max_bytes, self.buckets = size, max_tokens, max_bytes, buckets

    def groups(self, lengths, rng):
        return [np.asarray(b, dtype=np.int64) for b in plan_batches(
            lengths, size=self.size, max_tokens=self.max_tokens, max_bytes=self.max_bytes,
            buckets=self.buckets, rng=rng)]

    def spec(self):
        buckets = self.buckets if self.buckets is None or isinstance(self.buckets, int) else list(self.buckets)
        return {"kind": "batch", "field": self.field, "size": self.size, "max_tokens": self.max_tokens,
                "max_bytes": self.max_bytes, "buckets": buckets}


class PackPlanner(Planner):
    """Rows of at most ``max_len`` tokens by best-fit decreasing; a group is a row, an
    int64 array of ``(offset, start, length)`` pieces, documents in window order.
    ``rows`` rows make one group (``pack(...).batch(rows)``)."""

    def __init__(self, field, max_len, eos, split_documents, length_fn=None, rows=None, drop_last=False):
        self.field, self.max_len, self.eos = field, int(max_len), eos
        self.split_documents, self.length_fn = bool(split_documents), length_fn
        self.extra = 0 if eos is None else 1
        self.rows, self.drop_last = rows, drop_last

    def pieces(self, lengths: np.ndarray) -> np.ndarray:
        """The window's documents as pieces ``(offset, start, length)``: whole, or cut
        into ``max_len`` pieces when ``split_documents``."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if not self.split_documents:
            over = np.flatnonzero(lengths > self.max_len)
            if over.size:
                raise StepPlanError(
                    f"a document of {int(lengths[over[0]])} tokens does not fit a row of "
                    f"{self.max_len}; pack(split_documents=True) cuts long documents into rows")
            return np.stack([np.arange(len(lengths)), np.zeros_like(lengths), lengths], axis=1)
        count = np.maximum(1, -(-lengths // self.max_len))
        doc = np.repeat(np.arange(len(lengths)), count)
        first = np.repeat(np.cumsum(count) - count, count)
        start = (np.arange(len(doc)) - first) * self.max_len
        return np.stack([doc, start, np.minimum(self.max_len, lengths[doc] - start)], axis=1)

    def groups(self, lengths, rng):
        pieces = self.pieces(lengths)
        rows = [pieces[r] for r in pack_best_fit(pieces[:, 2], self.max_len)]
        # rows come out longest first: visit them in a seeded order
        rows = [rows[k] for k in rng.permutation(len(rows)).tolist()]
        if self.rows is None:
            return rows
        out = [rows[k : k + self.rows] for k in range(0, len(rows), self.rows)]
        if self.drop_last and out and len(out[-1]) < self.rows:
            out.pop()
        return out

    def spec(self):
        return {"kind": "pack", "field": self.field, "max_len": self.max_len, "eos": self.eos,
                "split_documents": self.split_documents, "rows": self.rows, "drop_last": self.drop_last}


class GroupPlan:
    """The group sequence of one epoch: ``planner`` over windows of ``window`` positions
    of ``order`` (epoch position -> index of ``dataset``)."""

    def __init__(self, dataset, order, planner: Planner, *, window: int, seed: int, epoch: int,
                 filters=()):
        if window < 1:
            raise InvalidArgumentError(f"plan_window must be >= 1, got {window}")
        self.dataset, self.order, self.planner = dataset, order, planner
        self.window, self.seed, self.epoch = int(window), int(seed), int(epoch)
        self.filters = list(filters)  # (field, predicate of its length): length selects

    def window_groups(self, w: int) -> tuple[np.ndarray, list]:
        """Window ``w``'s epoch positions kept by the length selects, and its groups
        (over offsets into those positions)."""
        lo = w * self.window
        positions = np.arange(lo, min(lo + self.window, len(self.order)), dtype=np.int64)
        indices = take(self.order, positions)
        for field, predicate in self.filters:
            keep = np.fromiter((bool(predicate(n)) for n in field_lengths(self.dataset, indices, field).tolist()),
                               dtype=bool, count=len(indices))
            positions, indices = positions[keep], indices[keep]
        p = self.planner
        lengths = field_lengths(self.dataset, indices, p.field, p.length_fn) + p.extra
        rng = np.random.default_rng(seed_keys(self.seed, self.epoch, _PLAN_TAG, 1 << 32, w))
        return positions, p.groups(lengths, rng)

    def groups(self, start: int = 0) -> Iterator[tuple[np.ndarray, object]]:
        """``(window positions, group)`` for groups ``start, start + 1, ...`` of the sequence."""
        seen = 0
        for w in range(-(-len(self.order) // self.window)):
            positions, groups = self.window_groups(w)
            if seen + len(groups) <= start:
                seen += len(groups)
                continue
            for g in groups[max(0, start - seen):]:
                yield positions, g
            seen += len(groups)

    def count(self, start: int = 0) -> int:
        """Groups of the sequence from ``start`` on (plans every window)."""
        total = sum(len(self.window_groups(w)[1]) for w in range(-(-len(self.order) // self.window)))
        return max(0, total - start)

    def deal(self, start: int, consumer: int, consumers: int) -> Iterator[tuple[np.ndarray, object]]:
        """Consumer ``consumer``'s groups from group ``start`` on: one per whole round of
        ``consumers`` groups."""
        it = self.groups(start)
        while True:
            round_ = [g for _, g in zip(range(consumers), it)]
            if len(round_) < consumers:
                return
            yield round_[consumer]

    def spec(self) -> dict:
        return {"planner": self.planner.spec(), "window": self.window}  # see Pipeline.plan_spec


# --- filling groups ------------------------------------------------------------------
def _mismatch(expected: int, got: int, field: str, position: int) -> StepPlanError:
    return StepPlanError(
        f"the plan counted {expected} tokens for {field!r} at epoch position {position} but the "
        f"sample has {got}; lengths= must name what the stages leave in {field!r}")


def check_lengths(samples: list, positions, field: str, expected) -> None:
    """Refuse a batch whose token field differs from the planned lengths."""
    for s, p, n in zip(samples, np.asarray(positions).tolist(), np.asarray(expected).tolist()):
        if s is not None and len(s[field]) != n:
            raise _mismatch(n, len(s[field]), field, p)


def build_row(pieces: np.ndarray, samples: dict, positions: dict, planner: PackPlanner, field: str,
              pad: int, provenance: bool) -> dict:
    """One packed row from its pieces ``(offset, start, length)`` and the processed
    samples by offset (None for a sample a ``select`` removed).

    ``tokens`` has ``max_len`` entries, padded after ``length`` with ``pad``;
    ``cu_seqlens`` (int32) are the offsets of its sequences, ``[0, l1, l1 + l2, ...,
    length]``, as flash-attention's varlen kernels take them; ``position_ids`` restart
    at 0 in every sequence (and count on through the padding); ``doc_ids`` number the
    sequences, -1 on padding.
    """
    max_len, eos = planner.max_len, planner.eos
    tokens = np.empty(max_len, dtype=np.int64)
    bounds = [0]
    held = []
    at = 0
    for off, start, length in pieces.tolist():
        s = samples[off]
        if s is None:
            continue
        t = s[field]
        n = len(t) + (eos is not None)
        if start + length > n or (not planner.split_documents and length != n):
            raise _mismatch(length, n, field, positions[off])
        body = min(start + length, len(t)) - start  # tokens of t in this piece; eos after them
        tokens[at : at + body] = t[start : start + body]
        if body < length:
            tokens[at + body] = eos
        at += length
        bounds.append(at)
        held.append(s)
    used = at
    tokens[used:] = pad
    cu = np.asarray(bounds, dtype=np.int32)
    lengths = np.diff(cu)
    doc_ids = np.full(max_len, -1, dtype=np.int64)
    doc_ids[:used] = np.repeat(np.arange(len(lengths)), lengths)
    position_ids = np.arange(max_len, dtype=np.int64)
    position_ids[:used] -= np.repeat(cu[:-1].astype(np.int64), lengths)
    position_ids[used:] -= used
    row = {"tokens": tokens, "cu_seqlens": cu, "position_ids": position_ids, "doc_ids": doc_ids, "length": used}
    if provenance:
        from ..mixture import PROVENANCE_FIELDS

        for name in PROVENANCE_FIELDS:
            row[name] = [s[name] for s in held]
    return row


def read_groups(groups: GroupPlan, plan, planner: Planner, stage, per_sample, ctx, start: int,
                provenance: bool) -> Iterator:
    """Consumer ``ctx``'s groups from group ``start`` on, read and filled: a batch as the
    list of its samples after the ``per_sample`` stages, a packed row by
    :func:`build_row` (a list of rows for ``pack(...).batch(k)``).  ``plan`` is the
    epoch's :class:`~hpcio.distributed.epochs.EpochPlan`."""
    def process(samples):
        out = []
        for s in samples:
            got = [s]
            for st in per_sample:
                got = list(st.apply(iter(got), ctx))
            out.append(got[0] if got else None)
        return out

    for window_positions, group in groups.deal(start, ctx.consumer, ctx.consumers):
        rows = group if isinstance(group, list) else [group]
        if isinstance(stage, BatchStage):
            positions = window_positions[group]  # type: ignore[call-overload]
        else:
            positions = np.unique(np.concatenate([window_positions[r[:, 0]] for r in rows]))  # type: ignore[index]
        indices = take(groups.order, positions)
        samples = plan.dataset.get_batch(indices)
        if provenance:
            samples = with_provenance(samples, *plan.provenance(indices), positions)  # type: ignore[call-arg]
        samples = process(samples)
        if isinstance(stage, BatchStage):
            if stage.max_tokens is not None:
                field = stage.lengths if isinstance(stage.lengths, str) else stage.lengths[0]
                expected = field_lengths(plan.dataset, indices, field, planner.length_fn) \
                    if stage.token_field != field or planner.length_fn else None
                if expected is not None:
                    check_lengths(samples, positions, stage.token_field, expected)
            yield [s for s in samples if s is not None]
            continue
        by_position = dict(zip(positions.tolist(), samples))
        built = []
        for r in rows:
            offsets = r[:, 0].tolist()  # type: ignore[index]
            epos = window_positions[r[:, 0]].tolist()  # type: ignore[index]
            built.append(build_row(r, dict(zip(offsets, (by_position[p] for p in epos))),  # type: ignore[arg-type]
                                   dict(zip(offsets, epos)), planner, stage.field, stage.pad, provenance))  # type: ignore[arg-type]
        yield built if isinstance(group, list) else built[0]
