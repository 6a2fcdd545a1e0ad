"""Pipelines: stages over one consumer's part of a dataset, with a cache boundary.

A :class:`Pipeline` starts from an :class:`hpcio.Dataset`, reads this (rank, worker)'s
part of the epoch order (:func:`hpcio.distributed.split_indices`) in batches, and runs
its stages in order.  Stages are ``map``, ``decode`` (images into tensors, arrays or
PIL images, see :mod:`hpcio.decoding`), ``select``, ``batch`` (by count, byte budget
or padded-token budget), ``unbatch``, buffer ``shuffle`` and ``assemble`` (a stateful
many-to-many step such as sequence packing).  Stateful stages receive the
:class:`~hpcio.distributed.RuntimeContext`, so their randomness depends on seed,
epoch, rank and worker.

``cache(directory)`` is a boundary: everything before it runs once and is written as
hpcio shards under a fingerprint of the source and of every stage before it; later
runs with the same fingerprint read the shards instead.  Stages after it run every
epoch, over a fresh split of the cached samples.

>>> import hpcio.pipeline as hp  # doctest: +SKIP
>>> pipe = (hp.Pipeline(ds, seed=1).map(tokenize).cache("/scratch/cache")  # doctest: +SKIP
...         .shuffle(1024).assemble(hp.SequencePacker.factory(2048)).batch(8))  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator

from ..dataset import Dataset
from ..decoding import SampleDecoder
from ..distributed.context import RuntimeContext, infer_context
from ..distributed.split import (
    circular_shift as rotate,
    dataset_shard_sizes,
    shuffle_mode,
    consumer_order,
)
from ..distributed.order import Arange, take
from ..errors import CacheTimeoutError, UnstableIdentityError, WrongTypeError
from ..mixture import MixtureReader, check_mixture_shuffle, epoch_plan, is_mixture, with_provenance
from .cache import CacheBoundary, materialise
from .stages import (
    AssembleStage,
    BatchStage,
    DecodeStage,
    MapStage,
    SelectStage,
    SequencePacker,
    ShuffleStage,
    Stage,
    UnbatchStage,
    fingerprint_callable,
    sample_nbytes,
)

__all__ = [
    "Pipeline",
    "Stage",
    "SequencePacker",
    "fingerprint_callable",
    "sample_nbytes",
    "UnstableIdentityError",
    "CacheTimeoutError",
]


# --- the pipeline --------------------------------------------------------------------
def _source_fingerprint(ds: Dataset) -> str:
    """Names the source's files (name, size, mtime), its view and projection."""
    h = hashlib.sha256()
    path = ds.reader.path
    h.update(f"{type(ds.reader).__module__}.{type(ds.reader).__qualname__}|{path}|{len(ds)}".encode())
    if os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                st = os.stat(os.path.join(root, name))
                rel = os.path.relpath(os.path.join(root, name), path)
                h.update(f"|{rel}:{st.st_size}:{st.st_mtime_ns}".encode())
    elif os.path.exists(path):
        st = os.stat(path)
        h.update(f"|{st.st_size}:{st.st_mtime_ns}".encode())
    if isinstance(ds.reader, MixtureReader):  # its schedule and every source it reads
        h.update(json.dumps(ds.reader.schedule.spec(), sort_keys=True).encode())
        for name, part in ds.reader.sources.items():
            h.update(f"|{name}:{_source_fingerprint(part)}".encode())
    if ds.indices is not None:
        h.update(ds.indices.tobytes())
    h.update(repr(ds.fields).encode())
    return h.hexdigest()


class Pipeline:
    """Stages over this consumer's part of ``source``; every method returns a new one.

    Parameters
    ----------
    source : hpcio.Dataset
        The samples.
    shuffle : bool or {"global", "block", "none"}
        Epoch order, as in :func:`hpcio.distributed.split_indices` (``True`` is global).
    seed, epoch, remainder, shard_sizes, window
        As in :func:`~hpcio.distributed.split_indices`.
    circular_shift : bool
        Rotate each consumer's part so consumers start at different places (different
        shards) of the dataset, as fairseq2's ``files_circular_shift``.
    context : RuntimeContext or mapping, optional
        Explicit context fields; the rest is inferred when iterating.
    provenance : bool
        Add ``__source__`` (mixture source name, or the dataset's path), ``__index__``
        (index in that dataset) and ``__position__`` (position in the epoch order) to
        every sample read.  Stages keep them as long as they keep the sample's fields;
        ``batch`` keeps them per sample, :class:`SequencePacker` gives each row the lists
        of its documents'.  After a ``cache`` boundary they name the cached samples.

    A :func:`hpcio.mix` mixture is read in its own order (``shuffle=True``), epoch ``e``
    being its stream positions ``[e * E, (e + 1) * E)``; a cache boundary over it keeps
    epoch 0's positions, read in a global shuffle afterwards.
    """

    def __init__(self, source: Dataset, *, shuffle=True, seed: int = 0, epoch: int = 0,
                 remainder: str = "drop", shard_sizes=None, window: int = 1,
                 circular_shift: bool = False, context=None, provenance: bool = False):
        if not isinstance(source, Dataset):
            raise WrongTypeError(f"expected an hpcio.Dataset, got {type(source).__name__}")
        self.source = source
        mode = check_mixture_shuffle(shuffle) if is_mixture(source) else shuffle_mode(shuffle)
        self.options = {
            "mode": mode, "seed": int(seed), "remainder": remainder,
            "shard_sizes": shard_sizes, "window": int(window), "provenance": bool(provenance),
        }
        self.circular_shift = circular_shift
        self.epoch = int(epoch)
        if isinstance(context, RuntimeContext):
            context = {"rank": context.rank, "world_size": context.world_size,
                       "tp_size": context.tp_size}
        self.explicit = dict(context or {})
        self.stages: tuple[Stage, ...] = ()

    def _then(self, stage: Stage) -> "Pipeline":
        new = object.__new__(Pipeline)
        new.__dict__.update(self.__dict__)
        new.stages = self.stages + (stage,)
        return new

    # --- stages ----------------------------------------------------------------------
    def map(self, fn: Callable) -> "Pipeline":
        """Apply ``fn`` to every sample."""
        return self._then(MapStage(fn))

    def decode(self, decode="torchrgb8", *, backend: str = "auto") -> "Pipeline":
        """Decode images (or what ``decode`` names) in every sample, in the consumer.

        ``decode`` is a name such as ``"torchrgb8"``, ``"rgb8"`` or ``"pil"``, a callable
        applied to each image, or ``{field: name or callable}``; ``backend`` picks the
        image decoder (``"auto"``, ``"torchvision"``, ``"simplejpeg"``, ``"pillow"``).
        See :class:`hpcio.decoding.SampleDecoder`.
        """
        decoder = decode if isinstance(decode, SampleDecoder) else SampleDecoder(decode, backend)
        return self._then(DecodeStage(decoder))

    def select(self, predicate: Callable) -> "Pipeline":
        """Keep the samples for which ``predicate`` is true."""
        return self._then(SelectStage(predicate))

    def batch(self, size: int | None = None, *, max_bytes: int | None = None,
              max_tokens: int | None = None, token_field: str | None = None,
              drop_last: bool = False) -> "Pipeline":
        """Lists of samples, closed at ``size`` samples and/or before a budget is exceeded.

        ``max_bytes`` bounds the summed :func:`sample_nbytes`; ``max_tokens`` bounds the
        padded token count ``len(batch) * longest`` of ``token_field``.  A sample alone
        over budget forms its own batch.  ``drop_last`` drops a final batch shorter than
        ``size``.
        """
        return self._then(BatchStage(size, max_bytes, max_tokens, token_field, drop_last))

    def unbatch(self) -> "Pipeline":
        """The samples of each list, one by one."""
        return self._then(UnbatchStage())

    def shuffle(self, buffer_size: int, seed: int | None = None) -> "Pipeline":
        """Buffer shuffle, seeded by (seed or the context's seed, epoch, rank, worker)."""
        return self._then(ShuffleStage(buffer_size, seed))

    def assemble(self, factory: Callable[[RuntimeContext], object]) -> "Pipeline":
        """A stateful many-to-many step: ``factory(context)`` makes an object with
        ``push(sample) -> iterable`` and ``flush() -> iterable`` (at the end of the part)."""
        return self._then(AssembleStage(factory))

    def cache(self, directory, *, format: str = "mds", timeout: float = 3600.0,
              **writer_options) -> "Pipeline":
        """Materialise everything upstream once, as ``format`` shards under ``directory``.

        The key is a fingerprint of the source listing and every stage before; each
        consumer's data-parallel leader writes one part, the others wait for all parts
        (up to ``timeout`` seconds) and then read them.
        """
        for stage in self.stages:
            stage.fingerprint()  # reject unstable stages now, not after hours of work
        return self._then(CacheBoundary(directory, format, timeout, dict(writer_options)))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    # --- running ---------------------------------------------------------------------
    def context(self) -> RuntimeContext:
        return infer_context(**{"seed": self.options["seed"], "epoch": self.epoch, **self.explicit})

    def fingerprint(self, upto: int | None = None) -> str:
        """Fingerprint of the source and of the stages before index ``upto``."""
        h = hashlib.sha256(_source_fingerprint(self.source).encode())
        for stage in self.stages[:upto]:
            h.update(b"\0" + stage.fingerprint().encode())
        return h.hexdigest()[:24]

    def __iter__(self) -> Iterator:
        return self.iterate()

    def iterate(self, context: RuntimeContext | None = None) -> Iterator:
        """Run the pipeline for this consumer (context inferred unless given)."""
        ctx = self.context() if context is None else context
        source, shard_sizes = self.source, self.options["shard_sizes"]
        if shard_sizes is None and self.options["mode"] == "block":
            shard_sizes = dataset_shard_sizes(source)
        stages = list(self.stages)
        done = 0
        for k, stage in enumerate(self.stages):
            if isinstance(stage, CacheBoundary):
                upstream = stages[done:k]
                source = materialise(stage, self.fingerprint(k + 1), source, upstream, ctx)
                shard_sizes = source.reader.shard_sizes()
                done = k + 1
        stream = self._read(source, shard_sizes, ctx)
        for stage in stages[done:]:
            stream = stage.apply(stream, ctx)
        return iter(stream)

    def _read(self, source: Dataset, shard_sizes, ctx: RuntimeContext) -> Iterator:
        o = self.options
        mode = o["mode"]
        if mode == "mixture" and not is_mixture(source):  # the cache of a mixture's epoch 0
            mode = "global"
        plan = epoch_plan(source, ctx.epoch, mode, o["seed"], shard_sizes, o["window"])
        n = len(plan.order)
        part = consumer_order(
            n, ctx.dp_rank, ctx.dp_size, ctx.worker_id, ctx.num_workers,
            remainder=o["remainder"], order=Arange(0, 1, n),
        )
        if self.circular_shift:
            part = rotate(part, ctx.consumer, ctx.consumers)
        step = plan.dataset.reader.batch_size
        for lo in range(0, len(part), step):
            positions = part[lo : lo + step]
            indices = take(plan.order, positions)
            samples = plan.dataset.get_batch(indices)
            if o["provenance"]:
                samples = with_provenance(samples, *plan.provenance(indices), positions)
            yield from samples
