"""Weighted mixtures of datasets: an endless, computed order over several sources.

A mixture maps a *stream position* ``p >= 0`` to ``(source, index in that source)``:

- **Blocks.**  The stream is cut into blocks of ``block`` positions.  Every block holds
  exactly each source's largest-remainder share of ``block`` (:func:`block_counts`):
  ``floor(block * w / sum(w))`` each, and the positions left over go to the largest
  fractional parts, ties to the source named first.  Within block ``b`` the sources are
  arranged by a keyed bijection of ``[0, block)`` (keys ``seed_keys(seed, MIX_TAG, at, b)``
  for the segment starting at ``at``): O(block) work for a block, never O(stream).
- **Draws and passes.**  The k-th position of source ``s`` in the stream is its k-th
  *draw*: pass ``k // len(s)``, position ``k % len(s)`` of pass order
  ``GlobalOrder(len(s), source_seed(seed, s), pass)``.  A source that runs out starts a
  new pass in a fresh order (up-sampling); within a pass no sample repeats.  The draws of
  a source before a position are counted arithmetically: the draws of every earlier
  segment, ``share * whole blocks`` of this one, and the block's own arrangement.
- **Epochs.**  Epoch ``e`` is the positions ``[e * E, (e + 1) * E)`` of the one stream
  (``E = epoch_size``, by default the sum of the sources' lengths), so passes continue
  across epochs.  ``len(mixture) == E`` and ``mixture[i]`` is position ``i`` of epoch 0;
  :meth:`Mixture.epoch` is the view of another epoch.
- **Schedule.**  The weights can change, and sources come and go, at a block boundary:
  :meth:`Mixture.with_weights` adds a *segment* starting there.  Draw counters continue
  across segments, so nothing served is served again within its pass and nothing is
  skipped.  :meth:`Mixture.schedule` is the whole of it as plain values (what the
  :mod:`hpcio.torch` adapters record), :func:`from_schedule` rebuilds it.

>>> import hpcio, os, tempfile
>>> root = tempfile.mkdtemp()
>>> for name, n in (("a", 6), ("b", 2)):
...     with hpcio.open_writer(os.path.join(root, name), format="mds") as w:
...         for i in range(n):
...             w.write({"text": f"{name} {i}"})
>>> sources = {k: hpcio.open(os.path.join(root, k)) for k in ("a", "b")}
>>> m = hpcio.mix(sources, {"a": 0.75, "b": 0.25}, block=4, seed=1)
>>> m.block_counts()
{'a': 3, 'b': 1}
>>> [s["text"] for s in m[:8]]  # 3 of a and 1 of b in each block of 4
['a 2', 'a 3', 'a 4', 'b 1', 'a 5', 'b 0', 'a 0', 'a 1']
>>> m.served(8)
{'a': 6, 'b': 2}
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np

from ._bijection import Bijection
from .dataset import Dataset
from .distributed.order import ORDER_ALGORITHM, Arange, GlobalOrder, seed_keys
from .errors import InvalidArgumentError, WrongTypeError
from .formats.base import Reader

__all__ = ["mix", "from_schedule", "Mixture", "MixtureReader", "block_counts", "source_seed",
           "MIX_ALGORITHM", "DEFAULT_BLOCK", "PROVENANCE_FIELDS"]

# Recorded in every schedule: another arrangement names other samples at the same
# positions, so a schedule saved under another one is refused.
MIX_ALGORITHM = f"mix-lr-v1+{ORDER_ALGORITHM}"
# The block when none is given: fine enough that a source of weight 0.001 gets a
# position in most blocks.  Set it to the global batch (batch size x data-parallel ranks)
# to make every training step hold the exact shares.
DEFAULT_BLOCK = 1024
# First key word of the block arrangements: keeps them apart from the epoch orders'.
MIX_TAG = 0x6D6978


def source_seed(seed: int, name: str) -> int:
    """The seed of source ``name``'s pass orders: 63 bits of SHA-256 of ``"seed:name"``.

    >>> source_seed(0, "web")
    2919123110020382980
    """
    digest = hashlib.sha256(f"{int(seed)}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def block_counts(weights: Sequence[float], block: int) -> list[int]:
    """Largest-remainder shares of ``block`` positions for ``weights`` (in that order).

    Each share is ``floor(block * w / sum(w))``; the positions left over go one each to
    the largest fractional parts, ties to the earlier weight.  Computed in exact
    rational arithmetic, so the result does not depend on float rounding.

    >>> block_counts([0.5, 0.47, 0.03], 32)
    [16, 15, 1]
    >>> block_counts([1, 1, 1], 4)
    [2, 1, 1]
    """
    exact = [Fraction(w) for w in weights]
    total = sum(exact)
    quotas = [Fraction(block) * w / total for w in exact]
    counts = [math.floor(q) for q in quotas]
    left = block - sum(counts)
    by_remainder = sorted(range(len(quotas)), key=lambda k: (-(quotas[k] - counts[k]), k))
    for k in by_remainder[:left]:
        counts[k] += 1
    return counts


def _check_weights(weights, names: Sequence[str], known: Mapping[str, int]) -> dict[str, float]:
    """``weights`` (a mapping or a sequence in ``names`` order) as ``{name: float}``."""
    if isinstance(weights, Mapping):
        given = dict(weights)
    elif isinstance(weights, Sequence) and not isinstance(weights, (str, bytes)):
        if len(weights) != len(names):
            raise InvalidArgumentError(f"{len(weights)} weights for {len(names)} sources; give one "
                                       f"weight per source, or a mapping name -> weight")
        given = dict(zip(names, weights))
    else:
        raise WrongTypeError(f"weights must be a mapping name -> weight or a sequence, got "
                             f"{type(weights).__name__}")
    unknown = [name for name in given if name not in known]
    if unknown:
        raise InvalidArgumentError(f"weights name {', '.join(map(repr, unknown))}, which "
                                   f"{'is not a source' if len(unknown) == 1 else 'are not sources'}; "
                                   f"the sources are {', '.join(map(repr, known))}")
    out = {}
    for name, w in given.items():
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(w)) or w < 0:
            raise InvalidArgumentError(f"the weight of {name!r} must be a finite number >= 0, got {w!r}")
        out[name] = float(w)
        if w > 0 and known[name] == 0:
            raise InvalidArgumentError(f"source {name!r} has no samples but weight {w!r}")
    if not any(w > 0 for w in out.values()):
        raise InvalidArgumentError("the weights sum to 0: at least one source needs a positive weight")
    return out


def _check_block(block) -> int:
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise InvalidArgumentError(f"block must be an int >= 1 positions, got {block!r}")
    return int(block)


class _Segment:
    """The schedule from stream position ``at`` on: ``counts`` per block of ``block``."""

    def __init__(self, at: int, block: int, weights: dict[str, float], gids: np.ndarray,
                 counts: np.ndarray, draws_before: np.ndarray):
        self.at, self.block, self.weights = at, block, weights
        self.gids = gids  # global source ids of the sources with a positive count, in order
        self.counts = counts  # their positions per block
        self.ends = np.cumsum(counts)
        self.starts = self.ends - counts
        self.draws_before = draws_before  # per global source id: draws before ``at``
        self.per_block = np.zeros(len(draws_before), dtype=np.int64)
        self.per_block[gids] = counts

    def spec(self) -> dict:
        return {"at": self.at, "block": self.block, "weights": dict(self.weights)}


class Schedule:
    """The arithmetic of a mixture: segments, block arrangements, draw counts.

    Pure integers and numpy: the same on every rank and worker, nothing that grows with
    the stream.  ``lengths`` are the sources' sample counts, in first-named order.
    """

    _KEEP = 64  # block arrangements kept: a batch touches one or two blocks

    def __init__(self, lengths: Mapping[str, int], seed: int, epoch_size: int,
                 segments: Sequence[Mapping]):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise InvalidArgumentError(f"seed must be an int >= 0, got {seed!r}")
        if isinstance(epoch_size, bool) or not isinstance(epoch_size, (int, np.integer)) or epoch_size < 1:
            raise InvalidArgumentError(f"epoch_size must be an int >= 1 positions, got {epoch_size!r}")
        self.lengths = {str(k): int(v) for k, v in lengths.items()}
        self.names = list(self.lengths)
        self.seed, self.epoch_size = int(seed), int(epoch_size)
        self._n = np.array([self.lengths[k] for k in self.names], dtype=np.int64)
        self.segments: list[_Segment] = []
        draws = np.zeros(len(self.names), dtype=np.int64)
        for spec in segments:
            at, block = int(spec["at"]), _check_block(spec["block"])
            weights = _check_weights(spec["weights"], self.names, self.lengths)
            if self.segments:
                last = self.segments[-1]
                if at <= last.at:
                    raise InvalidArgumentError(f"schedule segments must start at increasing positions, "
                                               f"got {at} after {last.at}")
                off = (at - last.at) % last.block
                if off:
                    lo = at - off
                    raise InvalidArgumentError(
                        f"weights can change only at a block boundary: position {at} is {off} "
                        f"positions into the block of {last.block} starting at {lo}; use {lo} or "
                        f"{lo + last.block}")
                draws = draws + (at - last.at) // last.block * last.per_block
            elif at != 0:
                raise InvalidArgumentError(f"the first schedule segment starts at 0, got {at}")
            names = [k for k, w in weights.items()]
            counts = block_counts([weights[k] for k in names], block)
            keep = [k for k, c in zip(names, counts) if c > 0]
            gids = np.array([self.names.index(k) for k in keep], dtype=np.int64)
            self.segments.append(_Segment(at, block, weights, gids,
                                          np.array([c for c in counts if c > 0], dtype=np.int64),
                                          draws.copy()))
        if not self.segments:
            raise InvalidArgumentError("a schedule needs at least one segment")
        self._starts = np.array([g.at for g in self.segments], dtype=np.int64)
        self._blocks: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._passes: OrderedDict[tuple[int, int], GlobalOrder] = OrderedDict()

    # --- plain values ------------------------------------------------------------------
    def spec(self) -> dict:
        """The schedule as JSON-able values: what ``from_schedule`` rebuilds it from."""
        return {"algorithm": MIX_ALGORITHM, "seed": self.seed, "epoch_size": self.epoch_size,
                "sources": dict(self.lengths), "segments": [g.spec() for g in self.segments]}

    def segment_at(self, position: int) -> _Segment:
        return self.segments[int(np.searchsorted(self._starts, position, side="right")) - 1]

    # --- blocks ------------------------------------------------------------------------
    def arrangement(self, g: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Block ``b`` of segment ``g``: the global source id at each of its positions and
        that position's rank among the block's positions of the same source."""
        key = (g, b)
        found = self._blocks.get(key)
        if found is not None:
            self._blocks.move_to_end(key)
            return found
        seg = self.segments[g]
        slots = Bijection(seg.block, seed_keys(self.seed, MIX_TAG, seg.at, b)).forward_range(0, seg.block)
        local = np.searchsorted(seg.ends, slots, side="right")
        by_source = np.argsort(local, kind="stable")
        rank = np.empty(seg.block, dtype=np.int64)
        rank[by_source] = np.arange(seg.block, dtype=np.int64) - seg.starts[local[by_source]]
        found = self._blocks[key] = (seg.gids[local], rank)
        if len(self._blocks) > self._KEEP:
            self._blocks.popitem(last=False)
        return found

    def locate(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """``(source id, draw number)`` at each stream position (int64 arrays)."""
        p = np.asarray(positions, dtype=np.int64)
        gid = np.empty(p.shape, dtype=np.int64)
        draw = np.empty(p.shape, dtype=np.int64)
        if p.size == 0:
            return gid, draw
        if int(p.min()) < 0:
            raise InvalidArgumentError(f"mixture positions are >= 0, got {int(p.min())}")
        seg_of = np.searchsorted(self._starts, p, side="right") - 1
        for g in np.unique(seg_of).tolist():
            in_seg = np.flatnonzero(seg_of == g)
            seg = self.segments[g]
            blocks, offsets = np.divmod(p[in_seg] - seg.at, seg.block)
            for b in np.unique(blocks).tolist():
                sel = in_seg[blocks == b]
                ids, rank = self.arrangement(g, b)
                j = offsets[blocks == b]
                s = ids[j]
                gid[sel] = s
                draw[sel] = seg.draws_before[s] + b * seg.per_block[s] + rank[j]
        return gid, draw

    def source_indices(self, gid: np.ndarray, draw: np.ndarray) -> np.ndarray:
        """Index in its source of each draw: its pass's order at ``draw % len``."""
        out = np.empty(draw.shape, dtype=np.int64)
        n = self._n[gid]
        passes, within = np.divmod(draw, np.maximum(n, 1))
        keys = np.stack([gid, passes], axis=1) if draw.size else np.empty((0, 2), np.int64)
        for s, k in np.unique(keys, axis=0).tolist():
            sel = np.flatnonzero((gid == s) & (passes == k))
            out[sel] = self.pass_order(s, k).take(within[sel])
        return out

    def pass_order(self, s: int, k: int) -> GlobalOrder:
        """Pass ``k`` of source ``s``: ``GlobalOrder(len, source_seed(seed, name), k)``."""
        key = (s, k)
        order = self._passes.get(key)
        if order is None:
            name = self.names[s]
            order = self._passes[key] = GlobalOrder(self.lengths[name], source_seed(self.seed, name), k)
            if len(self._passes) > self._KEEP:
                self._passes.popitem(last=False)
        return order

    def served(self, position: int) -> np.ndarray:
        """Draws of every source at stream positions ``< position`` (per global id)."""
        position = int(position)
        if position <= 0:
            return np.zeros(len(self.names), dtype=np.int64)
        g = int(np.searchsorted(self._starts, position, side="right")) - 1
        seg = self.segments[g]
        b, j = divmod(position - seg.at, seg.block)
        out = seg.draws_before + b * seg.per_block
        if j:
            ids, _ = self.arrangement(g, b)
            out = out + np.bincount(ids[:j], minlength=len(self.names))
        return out


class MixtureReader(Reader):
    """Reads stream positions of a :class:`Schedule` from its source datasets.

    ``len`` is one epoch; ``read_many`` takes any stream position ``>= 0`` (later epochs'
    included): a batch is grouped by source, each source read with one ``get_batch``,
    and the samples handed back in request order.
    """

    def __init__(self, sources: Mapping[str, Dataset], schedule: Schedule):
        super().__init__("mixture(" + ", ".join(schedule.names) + ")")
        self.sources = dict(sources)
        self.schedule = schedule
        self._selected: dict[tuple, dict[str, Dataset]] = {}

    def __len__(self) -> int:
        return self.schedule.epoch_size

    def read(self, i, fields=None):
        # any stream position: an epoch view's positions lie beyond the first epoch
        i = self.check_index(i) if i < 0 else int(i)
        return self.read_many(np.array([i], dtype=np.int64), fields)[0]

    def locate(self, positions) -> tuple[list[str], np.ndarray]:
        """``(source names, indices in those sources)`` of stream ``positions``."""
        gid, draw = self.schedule.locate(positions)
        names = self.schedule.names
        return [names[s] for s in gid.tolist()], self.schedule.source_indices(gid, draw)

    def _sources(self, fields) -> dict[str, Dataset]:
        if fields is None:
            return self.sources
        key = tuple(fields)
        found = self._selected.get(key)
        if found is None:
            found = self._selected[key] = {k: ds.select(list(fields)) for k, ds in self.sources.items()}
        return found

    def read_many(self, indices, fields=None):
        positions = np.asarray(indices, dtype=np.int64)
        gid, draw = self.schedule.locate(positions)
        index = self.schedule.source_indices(gid, draw)
        sources = self._sources(fields)
        out: list = [None] * len(positions)
        for s in np.unique(gid).tolist():
            where = np.flatnonzero(gid == s)
            got = sources[self.schedule.names[s]].get_batch(index[where])
            for k, sample in zip(where.tolist(), got):
                out[k] = sample
        return out

    def mean_sample_bytes(self) -> float | None:
        """The sources' averages weighted by the last segment's shares (it sizes read
        batches), when every source drawn from knows its own."""
        seg = self.schedule.segments[-1]
        hints = [self.sources[self.schedule.names[s]].reader.mean_sample_bytes() for s in seg.gids.tolist()]
        if any(h is None for h in hints):
            return None
        return float(np.dot(hints, seg.counts)) / seg.block

    def will_read(self, indices) -> None:
        """Announce to each source its part of the pass, in the order the mixture reads
        it: a node cache under the sources then evicts and prefetches by their future."""
        self._announce(indices, after=False)

    def will_read_after(self, indices) -> None:
        self._announce(indices, after=True)

    def _announce(self, indices, after: bool) -> None:
        gid, draw = self.schedule.locate(np.asarray(indices, dtype=np.int64))
        index = self.schedule.source_indices(gid, draw)
        for s in np.unique(gid).tolist():
            self.sources[self.schedule.names[s]].will_read(index[gid == s], after=after)

    def prefetch(self, indices) -> None:
        gid, draw = self.schedule.locate(indices)
        index = self.schedule.source_indices(gid, draw)
        for s in np.unique(gid).tolist():
            self.sources[self.schedule.names[s]].prefetch(index[gid == s])

    def close(self) -> None:
        for ds in self.sources.values():
            ds.close()


class Mixture(Dataset):
    """A weighted mixture of datasets: an :class:`hpcio.Dataset` of one epoch of the
    mixture stream (see the module documentation), made by :func:`mix`.

    Views of it (``select``, slices, ``split``) are ordinary datasets over the same
    reader; the :mod:`hpcio.torch` adapters and :class:`hpcio.pipeline.Pipeline` read
    the mixture itself (or a ``select`` of it) in the mixture's own order, epoch by epoch.
    """

    reader: MixtureReader

    def __init__(self, reader: MixtureReader, indices=None, fields=None):
        if not isinstance(reader, MixtureReader):
            raise WrongTypeError(f"a Mixture reads a MixtureReader, got {type(reader).__name__}")
        super().__init__(reader, indices, fields)

    @property
    def sources(self) -> dict[str, Dataset]:
        """Every source named by the schedule, in first-named order."""
        return dict(self.reader.sources)

    @property
    def epoch_size(self) -> int:
        return self.reader.schedule.epoch_size

    @property
    def seed(self) -> int:
        return self.reader.schedule.seed

    def schedule(self) -> dict:
        """The schedule as JSON-able values (seed, epoch size, sources' lengths, segments);
        :func:`from_schedule` rebuilds the mixture from it."""
        return self.reader.schedule.spec()

    def block_counts(self, position: int = 0) -> dict[str, int]:
        """Positions per block of each source in the segment holding stream ``position``
        (sources with none left out)."""
        seg = self.reader.schedule.segment_at(int(position))
        names = self.reader.schedule.names
        return {names[s]: int(c) for s, c in zip(seg.gids.tolist(), seg.counts.tolist())}

    def epoch(self, epoch: int) -> Dataset:
        """The view of epoch ``epoch``: stream positions ``[epoch * E, (epoch + 1) * E)``."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise InvalidArgumentError(f"epoch must be an int >= 0, got {epoch!r}")
        size = self.epoch_size
        return Dataset(self.reader, Arange(int(epoch) * size, 1, size), self.fields)

    def locate(self, positions) -> tuple[list[str], np.ndarray]:
        """``(source names, indices in those sources)`` at stream ``positions``:
        ``mixture.sources[name][index]`` is the sample there."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and int(positions.min()) < 0:
            raise InvalidArgumentError(f"mixture positions are >= 0, got {int(positions.min())}")
        return self.reader.locate(positions)

    def served(self, position: int) -> dict[str, int]:
        """Samples of each source at stream positions ``< position``, counted
        arithmetically: what a run that consumed that far has drawn from each."""
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or position < 0:
            raise InvalidArgumentError(f"position must be an int >= 0, got {position!r}")
        counts = self.reader.schedule.served(int(position)).tolist()
        return dict(zip(self.reader.schedule.names, counts))

    def with_weights(self, weights, *, at: int, sources: Mapping[str, Dataset] | None = None,
                     block: int | None = None) -> Mixture:
        """The mixture whose schedule is this one before stream position ``at`` and
        ``weights`` from ``at`` on (``at`` a block boundary of the segment it falls in).

        ``sources`` adds datasets not mixed so far; a source left out of ``weights`` (or
        given weight 0) is not drawn from ``at`` on, and continues its pass where it
        stopped if weighted again later.  ``block`` defaults to the current one.  A change
        at the start of the last segment replaces that segment.
        """
        schedule = self.reader.schedule
        if isinstance(at, bool) or not isinstance(at, (int, np.integer)) or at < 0:
            raise InvalidArgumentError(f"at must be a stream position (an int >= 0), got {at!r}")
        at = int(at)
        all_sources = dict(self.reader.sources)
        for name, ds in (sources or {}).items():
            if name in all_sources:
                raise InvalidArgumentError(f"source {name!r} is already mixed; give only new sources")
            all_sources[name] = _checked_source(name, ds)
        specs = [g.spec() for g in schedule.segments if g.at < at]
        last = schedule.segment_at(at)
        specs.append({"at": at, "block": last.block if block is None else block,
                      "weights": _check_weights(weights, list(all_sources),
                                                {k: len(v) for k, v in all_sources.items()})})
        return _build(all_sources, schedule.seed, schedule.epoch_size, specs, self.fields)

    def __repr__(self):
        names = ", ".join(self.reader.schedule.names)
        return f"<hpcio.Mixture of {names} n={len(self)} block={self.reader.schedule.segments[-1].block}>"


def _checked_source(name, ds) -> Dataset:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"source names are non-empty strings, got {name!r}")
    if not isinstance(ds, Dataset):
        raise WrongTypeError(f"source {name!r} is a {type(ds).__name__}, not an hpcio.Dataset")
    return ds


def _build(sources: Mapping[str, Dataset], seed, epoch_size, segments, fields=None) -> Mixture:
    lengths = {name: len(ds) for name, ds in sources.items()}
    return Mixture(MixtureReader(sources, Schedule(lengths, seed, epoch_size, segments)), None, fields)


def mix(sources: Mapping[str, Dataset], weights, *, seed: int = 0, block: int | None = None,
        epoch_size: int | None = None) -> Mixture:
    """A weighted mixture of ``sources`` (name -> :class:`hpcio.Dataset`, any format, any view).

    Parameters
    ----------
    sources : mapping
        The datasets, by name; the order of the mapping breaks ties between equal
        remainders (:func:`block_counts`).
    weights : mapping or sequence
        Non-negative weights (``{name: w}``, or one per source in order); they need not
        sum to 1.
    seed : int
        Keys the block arrangements and every source's pass orders.
    block : int, optional
        Positions per block, each holding exactly the sources' shares (default
        :data:`DEFAULT_BLOCK`).  Set it to the global batch for exact steps.
    epoch_size : int, optional
        Positions per epoch (default: the sum of the sources' lengths).
    """
    if not isinstance(sources, Mapping) or not sources:
        raise InvalidArgumentError("a mixture needs a non-empty mapping name -> hpcio.Dataset")
    checked = {name: _checked_source(name, ds) for name, ds in sources.items()}
    if epoch_size is None:
        epoch_size = sum(len(ds) for ds in checked.values())
    block = DEFAULT_BLOCK if block is None else block
    names = list(checked)
    lengths = {k: len(v) for k, v in checked.items()}
    segment = {"at": 0, "block": _check_block(block), "weights": _check_weights(weights, names, lengths)}
    return _build(checked, seed, epoch_size, [segment])


def from_schedule(sources: Mapping[str, Dataset], schedule: Mapping) -> Mixture:
    """The mixture a :meth:`Mixture.schedule` (or an adapter state's ``"mixture"``)
    describes, over ``sources`` (every source it names, with the same lengths)."""
    if not isinstance(schedule, Mapping) or "segments" not in schedule:
        raise InvalidArgumentError("a schedule is the mapping Mixture.schedule() returns")
    if schedule.get("algorithm") != MIX_ALGORITHM:
        raise InvalidArgumentError(f"the schedule was made by mixture algorithm "
                                   f"{schedule.get('algorithm')!r}, this hpcio has {MIX_ALGORITHM!r}")
    lengths = dict(schedule["sources"])
    missing = [k for k in lengths if k not in sources]
    if missing:
        raise InvalidArgumentError(f"the schedule names source(s) {', '.join(map(repr, missing))} "
                                   "that are not given")
    checked = {}
    for name in lengths:
        ds = checked[name] = _checked_source(name, sources[name])
        if len(ds) != int(lengths[name]):
            raise InvalidArgumentError(f"source {name!r} has {len(ds)} samples; the schedule was made "
                                       f"with {lengths[name]}")
    return _build(checked, schedule["seed"], schedule["epoch_size"], schedule["segments"])


# The fields provenance adds to a sample: where it comes from and where it was read
# (hpcio.distributed.epochs.with_provenance adds them).
PROVENANCE_FIELDS = ("__source__", "__index__", "__position__")
