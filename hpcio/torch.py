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
from .distributed.split import (
    REMAINDERS,
    ConsumerOrder,
    consumed_position,
    consumer_order,
    dataset_shard_sizes,
    per_consumer,
    shuffle_mode,
)
from .distributed.order import ORDER_ALGORITHM
from .errors import InvalidArgumentError, MissingDependencyError, WrongTypeError

try:
    import torch
    import torch.utils.data as torch_data
except ImportError as exc:
    raise MissingDependencyError("hpcio.torch needs PyTorch: pip install torch") from exc

from .collate import ragged_collate  # noqa: E402  (needs torch, checked above)

__all__ = ["IterableDataset", "MapDataset", "DataLoader", "BatchSampler", "PipelineDataset", "ragged_collate"]

# Version 2: epoch orders are keyed bijections (ORDER_ALGORITHM), where version 1's were
# numpy permutations: the same position names another sample, so a v1 state is refused.
_STATE_VERSION = 2


class _EpochCursor:
    """Epoch, resume position and split parameters shared by both adapters.

    The epoch and the start position live in a shared-memory tensor so that
    ``set_epoch`` and ``load_state_dict`` reach DataLoader workers, persistent ones
    included (each worker holds its own copy of the dataset object).
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
        self.mode = shuffle_mode(shuffle)
        self.seed = int(seed)
        self.remainder = remainder
        self.window = int(window)
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

    def _indices(self, ctx: RuntimeContext, worker: int, num_workers: int) -> ConsumerOrder:
        """This consumer's part of the epoch, computed a batch at a time."""
        epoch, start = (int(v) for v in self._shared.tolist())
        return consumer_order(
            len(self.dataset),
            ctx.dp_rank,
            ctx.dp_size,
            worker,
            num_workers,
            seed=self.seed,
            epoch=epoch,
            mode=self.mode,
            remainder=self.remainder,
            batch_size=self.batch_size,
            start=start,
            shard_sizes=self.shard_sizes,
            window=self.window,
        )

    def _read(self, indices) -> list:
        """The samples at ``indices``, read with one ``get_batch`` and decoded."""
        samples = self.dataset.get_batch(indices)
        if self.decoder is None:
            return samples
        return [self.decoder(s, int(i)) for s, i in zip(samples, np.asarray(indices).tolist())]

    def _batches_per_rank(self, start: int, dp_size: int, num_workers: int) -> int:
        m = per_consumer(max(0, len(self.dataset) - start), dp_size * num_workers, self.remainder)
        return num_workers * -(-m // self.batch_size)

    # --- state -----------------------------------------------------------------------
    def _state(self) -> tuple[int, int]:
        """(epoch, position) where the next iteration starts."""
        epoch, start = (int(v) for v in self._shared.tolist())
        dp_size = self.context().dp_size
        if self._delivered >= self._batches_per_rank(start, dp_size, self._count_workers):
            return epoch + 1, 0
        position = consumed_position(
            len(self.dataset),
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

    def state_dict(self) -> dict:
        """Epoch and global consumed position (the same on every rank), plus the split
        parameters that ``load_state_dict`` checks."""
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
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Continue from ``state``: the next iteration reads the samples of that epoch
        that no rank consumed yet, split over the current world and workers."""
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
        position = int(state["position"])
        if not 0 <= position <= len(self.dataset):
            raise InvalidArgumentError(f"position {position} is not in [0, {len(self.dataset)}]")
        self._shared[0] = int(state["epoch"])
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
        indices = self._indices(ctx, ctx.worker_id, ctx.num_workers)
        # storage reads the next batch while this one is decoded and the model computes
        for batch_indices in batches_read_ahead(indices, self.batch_size, self.dataset):
            batch = self.collate_fn(self._read(batch_indices))
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

    def __getitems__(self, indices) -> list:
        return self._read(np.asarray(indices, dtype=np.int64))

    def batch_sampler(self) -> "BatchSampler":
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
        indices = self.source._indices(self.source.context(), 0, 1)
        # The epoch is announced and each next batch prefetched here, into the page cache
        # the workers read from: larger than memory, no batch waits for all its records.
        for batch in batches_read_ahead(indices, self.source.batch_size, self.source.dataset):
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
        iterable = isinstance(source, IterableDataset)
        source._begin(max(1, self.num_workers) if iterable else 1)
        if iterable:
            source._by_loader = True
        try:
            for batch in super().__iter__():
                source._delivered += 1
                yield batch
        finally:
            if iterable:
                source._by_loader = False

    def state_dict(self) -> dict:
        """The dataset's state: where the next iteration starts."""
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        self.dataset.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)


class PipelineDataset(torch_data.IterableDataset):
    """An :class:`hpcio.pipeline.Pipeline` run in each DataLoader worker.

    Each worker runs the pipeline over its own part (the context is inferred in the
    worker).  ``set_epoch`` reaches persistent workers.  Stages such as ``select`` or
    ``assemble`` change counts per consumer, so equal counts and exact resume are
    properties of :class:`IterableDataset`, not of arbitrary pipelines.  Use it with
    ``torch.utils.data.DataLoader(..., batch_size=None)`` when the pipeline batches.
    ``decode=`` appends ``pipeline.decode(decode)``: it decodes samples, or the samples
    of each batch when the pipeline batches.
    """

    def __init__(self, pipeline, *, decode=None):
        from .pipeline import Pipeline

        if not isinstance(pipeline, Pipeline):
            raise WrongTypeError(f"expected an hpcio.pipeline.Pipeline, got {type(pipeline).__name__}")
        self.pipeline = pipeline if decode is None else pipeline.decode(decode)
        self._epoch = torch.tensor([pipeline.epoch], dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch: int) -> None:
        self._epoch[0] = int(epoch)

    def __iter__(self):
        context = self.pipeline.context().replace(epoch=int(self._epoch[0]))
        return self.pipeline.iterate(context)
