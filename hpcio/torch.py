"""PyTorch adapters: an IterableDataset, a map-style Dataset and a resumable DataLoader.

Every (data-parallel rank, DataLoader worker) reads its own part of the epoch order
given by :func:`hpcio.distributed.split_indices`; all parts have the same number of
samples, so DDP never waits at epoch end.  Batches are read with one
``Dataset.get_batch`` call each.

Exact resume needs the number of batches the training loop received, which only the
main process knows: iterate through :class:`DataLoader` (a thin subclass of PyTorch's)
or directly over the dataset.  ``state_dict()`` then holds the epoch and the global
consumed position, valid on every rank, and ``load_state_dict()`` continues with the
remaining samples of that epoch at any world size and worker count.

A :func:`hpcio.mix` mixture is read in its own order, epoch by epoch, and its schedule
is part of the state; ``skip=`` leaves ranges of positions out (removed before the
split, so counts stay equal) and ``provenance=True`` adds each sample's ``__source__``,
``__index__`` and ``__position__`` (see docs/mixtures.md).

``decode=`` decodes images in the workers (``"torchrgb8"``, ``"pil"``, a callable, ...:
see :mod:`hpcio.decoding`), and batches are collated by :func:`ragged_collate`, which
keeps ragged fields (chat messages, lists of images of different sizes) as lists::

    import hpcio.torch
    data = hpcio.torch.IterableDataset(ds, batch_size=32, seed=1, decode="torchrgb8")
    loader = hpcio.torch.DataLoader(data, num_workers=4, persistent_workers=True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .dataset import Dataset, batches_read_ahead
from .decoding import sample_decoder
from .distributed.context import RuntimeContext, infer_context
from .distributed.epochs import (
    EpochPlan,
    check_mixture_shuffle,
    check_schedule,
    epoch_plan,
    is_mixture,
    with_provenance,
)
from .distributed.order import ORDER_ALGORITHM, Arange, Composed, IndexMap
from .distributed.ranges import (
    Kept as _Kept,
    epoch_skip as _epoch_skip,
    merged_ranges as _skip_ranges,
    subtract as _subtract,
)
from .distributed.split import (
    REMAINDERS,
    ConsumerOrder,
    consumed_position,
    consumer_order,
    dataset_shard_sizes,
    per_consumer,
    shuffle_mode,
)
from .errors import InvalidArgumentError, MissingDependencyError, WrongTypeError

try:
    import torch
    import torch.utils.data as torch_data
except ImportError as exc:
    raise MissingDependencyError("hpcio.torch needs PyTorch: pip install torch") from exc

from .collate import ragged_collate  # noqa: E402  (needs torch, checked above)
from .pipeline.adapter import PipelineDataset, gather_states  # noqa: E402

__all__ = ["IterableDataset", "MapDataset", "DataLoader", "BatchSampler", "PipelineDataset", "gather_states",
           "ragged_collate"]

# Version 2: epoch orders are keyed bijections (ORDER_ALGORITHM), where version 1's were
# numpy permutations: the same position names another sample, so a v1 state is refused.
_STATE_VERSION = 2


# --- the cursor ----------------------------------------------------------------------------
class _EpochCursor:
    """Epoch, resume position and split parameters shared by both adapters.

    The epoch and the start position live in a shared-memory tensor so that
    ``set_epoch`` and ``load_state_dict`` reach DataLoader workers, persistent ones
    included (each worker holds its own copy of the dataset object).  The position
    counts the epoch order's positions left after the skip ranges: the skipped ones are
    removed before splitting, so every consumer still gets the same count.
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int = 1,
        shuffle=True,
        seed: int = 0,
        epoch: int = 0,
        remainder: str = "drop",
        shard_sizes: Sequence[int] | None = None,
        window: int = 1,
        decode=None,
        context: RuntimeContext | Mapping | None = None,
        skip: Sequence[tuple[int, int]] | None = None,
        provenance: bool = False,
    ):
        if not isinstance(dataset, Dataset):
            raise WrongTypeError(f"expected an hpcio.Dataset, got {type(dataset).__name__}")
        if batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}")
        if remainder not in REMAINDERS:
            raise InvalidArgumentError(f"unknown remainder {remainder!r}; expected one of drop, pad")
        self.dataset = dataset
        self.decoder = sample_decoder(decode)
        self.batch_size = int(batch_size)
        self.mixture = is_mixture(dataset)
        self.mode = check_mixture_shuffle(shuffle) if self.mixture else shuffle_mode(shuffle)
        # a mixture's order is keyed by its own seed
        self.seed = dataset.reader.schedule.seed if self.mixture else int(seed)  # type: ignore[attr-defined]
        if self.mixture and int(seed) not in (0, self.seed):
            raise InvalidArgumentError(
                f"a mixture's order is keyed by its own seed ({self.seed}, given to hpcio.mix); "
                f"leave the adapter's seed unset, got seed={seed}")
        self.remainder = remainder
        self.window = int(window)
        self.skip = _skip_ranges(skip)
        self.provenance = bool(provenance)
        self.shard_sizes = None if shard_sizes is None else np.asarray(shard_sizes, np.int64)
        if self.mode == "block" and self.shard_sizes is None:
            self.shard_sizes = dataset_shard_sizes(dataset)
            if self.shard_sizes is None:
                raise InvalidArgumentError(
                    "shuffle='block' needs shard_sizes (samples per shard, in order): this "
                    "dataset is a view or its format does not report shards"
                )
        if isinstance(context, RuntimeContext):
            context = {
                "rank": context.rank,
                "world_size": context.world_size,
                "tp_size": context.tp_size,
            }
        self._explicit = dict(context or {})
        self._shared = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._shared[0] = int(epoch)
        self._delivered = 0  # batches received by the main process since _begin
        self._rank_context: RuntimeContext | None = None
        self._count_workers = 1  # round-robin width of that delivery
        self._plans: dict[int, tuple] = {}

    # --- context and indices ---------------------------------------------------------
    def context(self) -> RuntimeContext:
        """The runtime context of the calling process (worker info included).

        Workers reuse the rank context the main process found when the iteration
        began, so a forked worker never queries MPI or torch.distributed itself.
        """
        info = torch_data.get_worker_info()
        if info is not None and self._rank_context is not None:
            return self._rank_context.replace(worker_id=info.id, num_workers=info.num_workers)
        return infer_context(**self._explicit)

    def _plan(self, epoch: int) -> tuple[EpochPlan, IndexMap]:
        """Epoch ``epoch``'s plan and the epoch positions left after the skip ranges."""
        found = self._plans.get(epoch)
        if found is None:
            plan = epoch_plan(self.dataset, epoch, self.mode, self.seed, self.shard_sizes, self.window)
            n = len(self.dataset)
            ranges = _epoch_skip(self.skip, epoch, n)
            kept = _Kept(n, ranges) if ranges else Arange(0, 1, n)
            found = (plan, kept)
            self._plans = {epoch: found}  # one epoch at a time
        return found

    def _announce_next(self, dataset, ctx: RuntimeContext, worker: int, num_workers: int) -> None:
        """Tell a node cache this consumer's part of the next epoch too: its eviction then
        keeps the shards the next epoch begins with (other readers have no use for it)."""
        if not hasattr(dataset.reader, "will_read_after"):
            return
        epoch = int(self._shared[0]) + 1
        plan = epoch_plan(self.dataset, epoch, self.mode, self.seed, self.shard_sizes, self.window)
        n = len(self.dataset)
        ranges = _epoch_skip(self.skip, epoch, n)
        kept = _Kept(n, ranges) if ranges else Arange(0, 1, n)
        part = consumer_order(len(kept), ctx.dp_rank, ctx.dp_size, worker, num_workers, remainder=self.remainder,
                              batch_size=self.batch_size, start=0, order=kept)
        plan.dataset.will_read(Composed(part, plan.order)[:], after=True)

    def _remaining(self, epoch: int) -> int:
        """Positions of ``epoch`` left after the skip ranges."""
        return len(self._plan(epoch)[1])

    def _part(self, ctx: RuntimeContext, worker: int, num_workers: int) -> tuple[EpochPlan, ConsumerOrder]:
        """The plan and this consumer's part of the epoch (as epoch positions), computed a
        batch at a time."""
        epoch, start = (int(v) for v in self._shared.tolist())
        plan, kept = self._plan(epoch)
        part = consumer_order(
            len(kept),
            ctx.dp_rank,
            ctx.dp_size,
            worker,
            num_workers,
            remainder=self.remainder,
            batch_size=self.batch_size,
            start=start,
            order=kept,
        )
        return plan, part

    def _indices(self, ctx: RuntimeContext, worker: int, num_workers: int) -> IndexMap:
        """This consumer's part of the epoch as indices of the dataset it reads."""
        plan, part = self._part(ctx, worker, num_workers)
        return Composed(part, plan.order)

    def _read(self, plan: EpochPlan, indices, positions=None) -> list:
        """The samples at ``indices`` of ``plan.dataset``, read with one ``get_batch``,
        decoded, and with their provenance when asked (``positions`` their epoch
        positions)."""
        indices = np.asarray(indices, dtype=np.int64)
        samples = plan.dataset.get_batch(indices)
        if self.decoder is not None:
            samples = [self.decoder(s, int(i)) for s, i in zip(samples, indices.tolist())]
        if self.provenance:
            sources, within = plan.provenance(indices)
            samples = with_provenance(samples, sources, within, positions)
        return samples

    def _batches_per_rank(self, start: int, dp_size: int, num_workers: int) -> int:
        epoch = int(self._shared[0])
        m = per_consumer(max(0, self._remaining(epoch) - start), dp_size * num_workers, self.remainder)
        return num_workers * -(-m // self.batch_size)

    # --- state -----------------------------------------------------------------------
    def _state(self) -> tuple[int, int]:
        """(epoch, position) where the next iteration starts."""
        epoch, start = (int(v) for v in self._shared.tolist())
        dp_size = self.context().dp_size
        if self._delivered >= self._batches_per_rank(start, dp_size, self._count_workers):
            return epoch + 1, 0
        position = consumed_position(
            self._remaining(epoch),
            start,
            dp_size,
            self._count_workers,
            self.batch_size,
            self._delivered,
            self.remainder,
        )
        return epoch, position

    def _begin(self, num_workers: int) -> None:
        """Start an iteration where the previous one stopped."""
        epoch, position = self._state()
        self._rank_context = infer_context(**self._explicit)
        self._shared[0] = epoch
        self._shared[1] = position
        self._delivered = 0
        self._count_workers = max(1, num_workers)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads."""
        return self._state()[0]

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` from its beginning on the next iteration."""
        self._shared[0] = int(epoch)
        self._shared[1] = 0
        self._delivered = 0

    def stream_position(self, epoch: int, position: int, skip=None) -> int:
        """The stream position (``epoch * len(dataset) + epoch position``) that a state's
        ``position`` (counted without the ``skip`` ranges, default this adapter's) stands for."""
        n = len(self.dataset)
        ranges = _epoch_skip(self.skip if skip is None else _skip_ranges(skip), epoch, n)
        kept = _Kept(n, ranges)
        at = n if position >= len(kept) else int(kept.take(np.array([position]))[0])
        return epoch * n + at

    def state_dict(self) -> dict:
        """Epoch and global consumed position (the same on every rank), plus the split
        parameters that ``load_state_dict`` checks: the skip ranges and, for a mixture,
        its whole schedule."""
        epoch, position = self._state()
        return {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "position": position,
            "n": len(self.dataset),
            "seed": self.seed,
            "shuffle": self.mode,
            "order": ORDER_ALGORITHM,
            "remainder": self.remainder,
            "skip": [list(r) for r in self.skip],
            "mixture": self.dataset.reader.schedule.spec() if self.mixture else None,  # type: ignore[attr-defined]
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Continue from ``state``: the next iteration reads the samples of that epoch
        that no rank consumed yet, split over the current world and workers.

        Skip ranges and a mixture's schedule may differ from the saved ones only after
        the saved position: ranges can be added that start at or after it, and a mixture
        re-weighted at or after it (:meth:`hpcio.Mixture.with_weights`)."""
        if state.get("version") == 1:
            raise InvalidArgumentError(
                "state was saved by an hpcio whose epoch orders were numpy permutations; this "
                f"one computes them ({ORDER_ALGORITHM}), so the saved position names other "
                "samples: restart the epoch (set_epoch) instead of resuming it"
            )
        expected = {
            "version": _STATE_VERSION,
            "order": ORDER_ALGORITHM,
            "n": len(self.dataset),
            "seed": self.seed,
            "shuffle": self.mode,
        }
        for key, value in expected.items():
            if state.get(key) != value:
                raise InvalidArgumentError(
                    f"state was saved with {key}={state.get(key)!r} but this dataset has "
                    f"{key}={value!r}; resuming would read a different order"
                )
        epoch, position = int(state["epoch"]), int(state["position"])
        saved_skip = _skip_ranges(state.get("skip") or [])
        n = len(self.dataset)
        remaining = n - sum(e - s for s, e in _epoch_skip(saved_skip, epoch, n))
        if not 0 <= position <= remaining:
            raise InvalidArgumentError(f"position {position} is not in [0, {remaining}]")
        at = self.stream_position(epoch, position, saved_skip)
        dropped = _subtract(saved_skip, self.skip)
        if dropped:
            raise InvalidArgumentError(
                f"state was saved with skip={[list(r) for r in saved_skip]} but this dataset has "
                f"skip={[list(r) for r in self.skip]}: a skipped range cannot be read again")
        early = [r for r in _subtract(self.skip, saved_skip) if r[0] < at]
        if early:
            raise InvalidArgumentError(
                f"skip range {list(early[0])} starts before stream position {at}, where the saved "
                "state stopped: a range must start at or after it")
        if self.mixture:
            check_schedule(state.get("mixture"), self.dataset.reader.schedule.spec(), at)  # type: ignore[attr-defined]
        elif state.get("mixture") is not None:
            raise InvalidArgumentError("state was saved reading a mixture; this dataset is not one")
        self._shared[0] = epoch
        self._shared[1] = position
        self._delivered = 0


class IterableDataset(_EpochCursor, torch_data.IterableDataset):
    """Batches of this rank's and worker's samples, read with one ``get_batch`` each.

    Parameters
    ----------
    dataset : hpcio.Dataset
        The samples (any view: shuffled, selected, sorted).
    batch_size : int
        Samples per yielded batch (default 1).  Use ``batch_size=None`` on a plain
        PyTorch DataLoader; :class:`DataLoader` does this for you.
    shuffle : bool or {"global", "block", "none"}
        ``True`` is ``"global"``: a new global permutation each epoch.  ``"block"``
        shuffles shards, then samples within ``window`` shards (needs ``shard_sizes``).
    seed, epoch : int
        Shuffle seed and the first epoch.
    remainder : {"drop", "pad"}
        Equal counts per (rank, worker): drop the last ``R % consumers`` positions of
        the epoch order (default) or repeat the first ones.
    decode : str, callable or mapping, optional
        Decode images in the worker: a name such as ``"torchrgb8"`` or ``"pil"``, a
        callable, or ``{field: name or callable}`` (see :mod:`hpcio.decoding`).
    collate_fn : callable, optional
        Applied to each list of samples in the worker (default :func:`ragged_collate`;
        ``functools.partial(ragged_collate, pad=True)`` pads ragged tensors); pass
        ``list`` to get the samples themselves.
    context : RuntimeContext or mapping, optional
        Explicit ``rank``, ``world_size``, ``tp_size``; anything else is inferred.
    skip : sequence of (start, end), optional
        Stream positions never served (``epoch * len(dataset) + epoch position``, so in
        epoch 0 the epoch positions).  They are removed from the epoch order before it
        is split, so every consumer still reads the same count; the resume position
        counts the positions left.
    provenance : bool
        Add ``__source__`` (the mixture source's name, or the dataset's path),
        ``__index__`` (index in that dataset) and ``__position__`` (position in the
        epoch order) to every sample, before collation.

    A :func:`hpcio.mix` mixture is read in its own order (``shuffle=True``, other modes
    are refused), epoch ``e`` being its stream positions ``[e * E, (e + 1) * E)``; its
    seed is the mixture's, and ``state_dict`` records its schedule.
    """

    def __init__(self, dataset: Dataset, *, collate_fn: Callable | None = None, **cursor_options):
        super().__init__(dataset, **cursor_options)
        self.collate_fn = ragged_collate if collate_fn is None else collate_fn
        self._by_loader = False
        self._loader_workers = 1

    def __len__(self) -> int:
        """Batches this rank receives in the current epoch (all workers together)."""
        epoch, start = (int(v) for v in self._shared.tolist())
        return self._batches_per_rank(start, self.context().dp_size, self._loader_workers)

    def __iter__(self):
        ctx = self.context()
        in_main = torch_data.get_worker_info() is None
        if in_main and not self._by_loader:
            self._begin(1)
        plan, part = self._part(ctx, ctx.worker_id, ctx.num_workers)
        b = self.batch_size
        # storage reads the next batch while this one is decoded and the model computes
        for k, batch_indices in enumerate(batches_read_ahead(Composed(part, plan.order), b, plan.dataset)):
            positions = part[k * b : (k + 1) * b] if self.provenance else None
            batch = self.collate_fn(self._read(plan, batch_indices, positions))
            if k == 0:
                self._announce_next(plan.dataset, ctx, ctx.worker_id, ctx.num_workers)
            if in_main and not self._by_loader:
                self._delivered += 1
            yield batch


class MapDataset(_EpochCursor, torch_data.Dataset):
    """Map-style access to an hpcio Dataset, with a resumable distributed batch sampler.

    ``ds[i]`` reads one sample; a DataLoader fetches a whole batch with one
    ``get_batch`` call through ``__getitems__`` (decoding it there, in the worker).
    :meth:`batch_sampler` yields this rank's batches of the epoch order;
    :class:`DataLoader` uses it automatically, with :func:`ragged_collate` unless
    given another ``collate_fn``.  Parameters are those of :class:`IterableDataset`
    except ``collate_fn``.  A plain ``torch.utils.data.DataLoader`` over it needs
    ``collate_fn=hpcio.torch.ragged_collate`` for samples with ragged fields.
    """

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        sample = self.dataset[int(i)]
        return sample if self.decoder is None else self.decoder(sample, int(i))

    def __getitems__(self, keys) -> list:
        """The samples of one batch: dataset indices, or the ``(epoch, position)`` pairs
        :meth:`batch_sampler` yields for a mixture or with provenance."""
        if len(keys) and isinstance(keys[0], tuple):
            epoch = int(keys[0][0])
            positions = np.array([p for _, p in keys], dtype=np.int64)
            plan = self._plan(epoch)[0]
            return self._read(plan, plan.order.take(positions), positions)
        indices = np.asarray(keys, dtype=np.int64)
        plan = EpochPlan(self.dataset, None, 0, False)
        return self._read(plan, indices, indices)

    def batch_sampler(self) -> BatchSampler:
        """A sampler of this rank's index batches for the current epoch and position."""
        return BatchSampler(self)


class BatchSampler(torch_data.Sampler):
    """This rank's batches of a :class:`MapDataset`'s epoch order (main process)."""

    def __init__(self, source: MapDataset):
        self.source = source

    def __len__(self) -> int:
        epoch, start = (int(v) for v in self.source._shared.tolist())
        return self.source._batches_per_rank(start, self.source.context().dp_size, 1)

    def __iter__(self):
        # Workers fetch batches in the order this sampler yields them, so delivery
        # has width 1 whatever the worker count.
        source = self.source
        plan, part = source._part(source.context(), 0, 1)
        b = source.batch_size
        # A mixture's epoch, or provenance, needs the epoch positions: the batch is then
        # (epoch, position) pairs, resolved by MapDataset.__getitems__ in the worker.
        tagged = source.mixture or source.provenance
        # The epoch is announced and each next batch prefetched here, into the page cache
        # the workers read from: larger than memory, no batch waits for all its records.
        for k, batch in enumerate(batches_read_ahead(Composed(part, plan.order), b, plan.dataset)):
            if tagged:
                yield [(plan.epoch, p) for p in part[k * b : (k + 1) * b].tolist()]
            else:
                yield batch.tolist()


def _as_collated(batch):
    """A batch the dataset collated already, unchanged."""
    return batch


class DataLoader(torch_data.DataLoader):
    """PyTorch's DataLoader, counting delivered batches so ``state_dict`` is exact.

    For an :class:`IterableDataset` the dataset batches and collates (``batch_size=None``
    here, and batches are handed over as they are, where PyTorch's default would walk
    each one again converting arrays, a third of a vlm epoch's time without workers);
    for a :class:`MapDataset` its :meth:`~MapDataset.batch_sampler` is used with
    ``collate_fn`` (default :func:`ragged_collate`).  Other keyword arguments go to
    PyTorch (``num_workers``, ``persistent_workers``, ``pin_memory``, ...).
    """

    def __init__(self, dataset, **kwargs):
        if isinstance(dataset, IterableDataset):
            kwargs.setdefault("batch_size", None)
            if kwargs["batch_size"] is not None:
                raise InvalidArgumentError(
                    "the dataset already batches (IterableDataset(batch_size=...)); "
                    "leave the DataLoader's batch_size unset"
                )
            kwargs.setdefault("collate_fn", _as_collated)
            dataset._loader_workers = max(1, kwargs.get("num_workers", 0))
        elif isinstance(dataset, PipelineDataset):
            kwargs.setdefault("batch_size", None)
            if kwargs["batch_size"] is not None:
                raise InvalidArgumentError("a pipeline batches itself (Pipeline.batch); leave the "
                                           "DataLoader's batch_size unset")
            kwargs.setdefault("collate_fn", _as_collated)
            dataset._loader_workers = max(1, kwargs.get("num_workers", 0))
        elif isinstance(dataset, MapDataset):
            for key in ("batch_size", "sampler", "batch_sampler", "shuffle", "drop_last"):
                if key in kwargs:
                    raise InvalidArgumentError(
                        f"{key}= is set by the MapDataset; pass it to MapDataset instead"
                    )
            kwargs["batch_sampler"] = dataset.batch_sampler()
            kwargs.setdefault("collate_fn", ragged_collate)
        else:
            raise WrongTypeError(
                "hpcio.torch.DataLoader takes an hpcio.torch.IterableDataset or MapDataset, "
                f"got {type(dataset).__name__}"
            )
        super().__init__(dataset, **kwargs)

    def __iter__(self):
        source = self.dataset
        iterable = isinstance(source, (IterableDataset, PipelineDataset))
        source._begin(max(1, self.num_workers) if iterable else 1)
        if iterable:
            source._by_loader = True
        try:
            for batch in super().__iter__():
                source._delivered += 1
                yield batch
            if isinstance(source, PipelineDataset):
                source._finished = True  # the epoch ran out on every worker
        finally:
            if iterable:
                source._by_loader = False

    def state_dict(self) -> dict:
        """The dataset's state: where the next iteration starts."""
        return self.dataset.state_dict()  # type: ignore[attr-defined]

    def load_state_dict(self, state: Mapping) -> None:
        self.dataset.load_state_dict(state)  # type: ignore[attr-defined]

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)  # type: ignore[attr-defined]
