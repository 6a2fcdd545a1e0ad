"""Pipelines: stages over one consumer's part of a dataset, with a cache boundary.

A :class:`Pipeline` starts from an :class:`hpcio.Dataset`, reads this (rank, worker)'s
part of the epoch order (:func:`hpcio.distributed.split_indices`) in batches, and runs
its stages in order.  Stages are ``map``, ``decode`` (images into tensors, arrays or
PIL images, see :mod:`hpcio.decoding`), ``select``, ``batch`` (by count, byte budget
or padded-token budget), ``unbatch``, buffer ``shuffle`` and ``assemble`` (a stateful
many-to-many step such as sequence packing).  Stateful stages receive the
:class:`~hpcio.distributed.RuntimeContext`, so their randomness depends on seed,
epoch, rank and worker.

``batch(..., lengths=)`` and ``pack`` are *planned* (:mod:`hpcio.pipeline.plan`): their
groups are formed for the whole job from lengths read without decoding, and dealt in
whole rounds, so every consumer takes the same number of steps
(:attr:`Pipeline.step_policy`); :class:`hpcio.torch.PipelineDataset` saves the groups
consumed as its state.

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
import itertools
import json
import os
from collections.abc import Callable, Iterator

from ..dataset import Dataset
from ..decoding import SampleDecoder
from ..distributed.context import RuntimeContext, infer_context
from ..distributed.epochs import check_mixture_shuffle, epoch_plan, is_mixture, with_provenance
from ..distributed.order import Arange, IndexMap, take
from ..distributed.split import (
    circular_shift as rotate,
    consumer_order,
    dataset_shard_sizes,
    per_consumer,
    shuffle_mode,
)
from ..errors import (
    CacheTimeoutError,
    InvalidArgumentError,
    StepPlanError,
    UnequalStepsError,
    UnstableIdentityError,
    UsageError,
    WrongTypeError,
)
from ..mixture import MixtureReader
from .cache import CacheBoundary, materialise
from .fixed import PassReads, Watermarked, watermark_stages
from .plan import DEFAULT_PLAN_WINDOW, GroupPlan, WindowShuffled, read_groups
from .stages import (
    AssembleStage,
    BatchStage,
    DecodeStage,
    MapStage,
    PackStage,
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
    "StepPlanError",
    "UnequalStepsError",
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


def position_shuffles(stages) -> tuple[list, list]:
    """The buffer shuffles that only maps and selects precede, taken out of ``stages``:
    they permute epoch positions within windows of their buffer size before reading
    (:class:`~hpcio.pipeline.plan.WindowShuffled`), so they hold no sample and need
    no state.  Returns ``(shuffles, other stages)``."""
    shuffles, rest = [], list(stages)
    k = 0
    while k < len(rest) and isinstance(rest[k], (MapStage, SelectStage, ShuffleStage)):
        if isinstance(rest[k], ShuffleStage):
            shuffles.append(rest.pop(k))
        else:
            k += 1
    return shuffles, rest


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
    steps_per_epoch : int, optional
        Every consumer yields exactly this many steps per epoch, reading on into its
        parts of the next epochs' orders when its own part runs out (the ``"fixed"``
        policy, for stages whose output counts cannot be planned).
    plan_window : int
        Epoch positions planned together by a planned ``batch`` or ``pack``.

    A :func:`hpcio.mix` mixture is read in its own order (``shuffle=True``), epoch ``e``
    being its stream positions ``[e * E, (e + 1) * E)``; a cache boundary over it keeps
    epoch 0's positions, read in a global shuffle afterwards.
    """

    def __init__(self, source: Dataset, *, shuffle=True, seed: int = 0, epoch: int = 0,
                 remainder: str = "drop", shard_sizes=None, window: int = 1,
                 circular_shift: bool = False, context=None, provenance: bool = False,
                 steps_per_epoch: int | None = None, plan_window: int = DEFAULT_PLAN_WINDOW):
        if not isinstance(source, Dataset):
            raise WrongTypeError(f"expected an hpcio.Dataset, got {type(source).__name__}")
        if steps_per_epoch is not None and int(steps_per_epoch) < 1:
            raise InvalidArgumentError(f"steps_per_epoch must be >= 1, got {steps_per_epoch}")
        if int(plan_window) < 1:
            raise InvalidArgumentError(f"plan_window must be >= 1, got {plan_window}")
        self.source = source
        mode = check_mixture_shuffle(shuffle) if is_mixture(source) else shuffle_mode(shuffle)
        self.options = {
            "mode": mode, "seed": int(seed), "remainder": remainder,
            "shard_sizes": shard_sizes, "window": int(window), "provenance": bool(provenance),
            "steps_per_epoch": None if steps_per_epoch is None else int(steps_per_epoch),
            "plan_window": int(plan_window),
        }
        self.circular_shift = circular_shift
        self.epoch = int(epoch)
        if isinstance(context, RuntimeContext):
            context = {"rank": context.rank, "world_size": context.world_size,
                       "tp_size": context.tp_size}
        self.explicit = dict(context or {})
        self.stages: tuple[Stage, ...] = ()

    def _then(self, stage: Stage) -> Pipeline:
        new = object.__new__(Pipeline)
        new.__dict__.update(self.__dict__)
        new.stages = self.stages + (stage,)
        return new

    # --- stages ----------------------------------------------------------------------
    def map(self, fn: Callable) -> Pipeline:
        """Apply ``fn`` to every sample."""
        return self._then(MapStage(fn))

    def decode(self, decode="torchrgb8", *, backend: str = "auto") -> Pipeline:
        """Decode images (or what ``decode`` names) in every sample, in the consumer.

        ``decode`` is a name such as ``"torchrgb8"``, ``"rgb8"`` or ``"pil"``, a callable
        applied to each image, or ``{field: name or callable}``; ``backend`` picks the
        image decoder (``"auto"``, ``"torchvision"``, ``"simplejpeg"``, ``"pillow"``).
        See :class:`hpcio.decoding.SampleDecoder`.
        """
        decoder = decode if isinstance(decode, SampleDecoder) else SampleDecoder(decode, backend)
        return self._then(DecodeStage(decoder))

    def select(self, predicate: Callable, *, lengths: str | None = None) -> Pipeline:
        """Keep the samples for which ``predicate(sample)`` is true.

        With ``lengths`` (a source field), ``predicate`` takes that field's length
        instead; before a planned stage it is then applied when planning, to lengths
        read without decoding, so rejected samples never enter a group and every
        consumer keeps full batches and equal steps.
        """
        return self._then(SelectStage(predicate, lengths))

    def batch(self, size: int | None = None, *, max_bytes: int | None = None,
              max_tokens: int | None = None, token_field: str | None = None,
              drop_last: bool = False, lengths=None, buckets=None) -> Pipeline:
        """Lists of samples, closed at ``size`` samples and/or before a budget is exceeded.

        ``max_bytes`` bounds the summed :func:`sample_nbytes`; ``max_tokens`` bounds the
        padded token count ``len(batch) * longest`` of ``token_field``.  A sample alone
        over budget forms its own batch.  ``drop_last`` drops a final batch shorter than
        ``size``.

        ``lengths`` plans the batches from the source instead (see :mod:`.plan`): a field
        name of the source whose ``len()`` is each sample's cost (tokens under
        ``max_tokens``, defaulting ``token_field`` to it; bytes under ``max_bytes``), or
        ``(field, fn)`` with ``fn(value) -> int``.  The whole job's batches are then formed
        from lengths read without decoding and dealt in whole rounds, so every consumer
        takes the same number of steps.  ``buckets`` (upper length edges, or a number of
        equal-count buckets) batches similar lengths together, batches visited in a seeded
        order.  A planned ``max_tokens`` batch checks that ``token_field`` has the planned
        length when read (:class:`~hpcio.errors.StepPlanError` otherwise).
        """
        return self._then(BatchStage(size, max_bytes, max_tokens, token_field, drop_last, lengths, buckets))

    def pack(self, max_len: int, *, field: str = "tokens", eos: int | None = None, pad: int = 0,
             split_documents: bool = False, lengths=None) -> Pipeline:
        """Rows of at most ``max_len`` tokens of ``field``, planned from lengths.

        Documents (each followed by ``eos`` when given) are packed by best-fit decreasing
        over each plan window (:func:`~hpcio.pipeline.plan.pack_best_fit`); a document
        is never cut unless ``split_documents`` (a longer one then raises
        :class:`~hpcio.errors.StepPlanError`).  A row is ``{"tokens", "cu_seqlens",
        "position_ids", "doc_ids", "length"}`` (see :func:`~hpcio.pipeline.plan.build_row`).
        ``lengths`` is the source field counted for each document (default ``field``) or
        ``(field, fn)``.  A following ``batch(k)`` groups ``k`` rows per step, in the plan.
        """
        return self._then(PackStage(max_len, field, eos, pad, split_documents, lengths))

    def unbatch(self) -> Pipeline:
        """The samples of each list, one by one."""
        return self._then(UnbatchStage())

    def shuffle(self, buffer_size: int, seed: int | None = None) -> Pipeline:
        """Shuffle within windows of ``buffer_size``, seeded by (seed or the context's seed,
        epoch).  Where only maps and selects come before it, or before a planned stage,
        it permutes epoch positions before reading (stateless, checkpointed as
        positions); after a ``batch`` or ``assemble`` it is a buffer of the consumer's
        items, seeded per consumer too, which a checkpoint cannot hold."""
        return self._then(ShuffleStage(buffer_size, seed))

    def assemble(self, factory: Callable[[RuntimeContext], object]) -> Pipeline:
        """A stateful many-to-many step: ``factory(context)`` makes an object with
        ``push(sample) -> iterable`` and ``flush() -> iterable`` (at the end of the part)."""
        return self._then(AssembleStage(factory))

    def cache(self, directory, *, format: str = "mds", timeout: float = 3600.0,
              **writer_options) -> Pipeline:
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

    # --- steps -----------------------------------------------------------------------
    def _split_stages(self, stages=None):
        """``(before, planned stage, planner, after)`` of the stages after the last cache
        boundary, or ``(stages, None, None, ())`` when none is planned."""
        stages = list(self.stages if stages is None else stages)
        for k in range(len(stages) - 1, -1, -1):
            if isinstance(stages[k], CacheBoundary):
                stages = stages[k + 1 :]
                break
        for k, stage in enumerate(stages):
            planner = stage.planner() if isinstance(stage, (BatchStage, PackStage)) else None
            if planner is None:
                continue
            before, after = stages[:k], stages[k + 1 :]
            for b in before:
                if not isinstance(b, (MapStage, SelectStage, ShuffleStage)):
                    raise InvalidArgumentError(
                        f"a planned {stage.kind}() reads samples of the source: only map, decode, "
                        f"select and shuffle can come before it, got {b.kind}()")
            if isinstance(stage, PackStage) and after and isinstance(after[0], BatchStage) \
                    and after[0].counted and after[0].lengths is None and after[0].size:
                planner = stage.planner(after[0].size, after[0].drop_last)
                after = after[1:]
            return before, stage, planner, tuple(after)
        return stages, None, None, ()

    @property
    def step_policy(self) -> str:
        """How consumers' step counts compare in an epoch.

        ``"planned"``: a planned ``batch`` or ``pack`` deals whole rounds of groups, with
        only maps after it (whatever ``remainder``, the last partial round is left);
        ``"counted"``: only maps, buffer shuffles, ``batch(size)`` and ``unbatch``, over
        equal parts; ``"fixed"``: ``steps_per_epoch`` is set, and every consumer
        yields that many steps, reading its part of the next epochs' orders when its own
        runs out; ``"unequal"``: a ``select``, a budget ``batch`` without ``lengths=``,
        or an ``assemble`` changes counts per consumer.
        """
        if self.options["steps_per_epoch"] is not None:
            return "fixed"
        before, stage, planner, after = self._split_stages()
        if stage is not None:
            return "planned" if all(isinstance(a, MapStage) for a in after) else "unequal"
        for st in before:
            if isinstance(st, (SelectStage, AssembleStage)):
                return "unequal"
            if isinstance(st, BatchStage) and not st.counted:
                return "unequal"
        return "counted"

    def check_equal_steps(self, ctx: RuntimeContext) -> None:
        """Raise :class:`~hpcio.errors.UnequalStepsError` when several consumers would
        take different numbers of steps."""
        if ctx.consumers > 1 and self.step_policy == "unequal":
            raise UnequalStepsError(
                f"this pipeline's consumers would take different numbers of steps ({ctx.consumers} "
                "consumers; a select, budget batch or assemble changes counts): plan the "
                "batches from lengths (batch(..., lengths=), pack()) or give the Pipeline "
                "steps_per_epoch=")

    def plan(self, context: RuntimeContext | None = None) -> GroupPlan:
        """The :class:`~hpcio.pipeline.plan.GroupPlan` of the context's epoch (a planned
        pipeline without a cache boundary)."""
        ctx = self.context() if context is None else context
        if any(isinstance(st, CacheBoundary) for st in self.stages):
            source, shard_sizes, _ = self._materialised(ctx)
        else:
            source, shard_sizes = self.source, self._shard_sizes(self.source)
        return self._group_plan(source, shard_sizes, ctx)[0]

    def plan_spec(self) -> dict | None:
        """What defines the group sequence of a planned pipeline (its planner and plan
        window), as plain values, without reading anything; None when not planned."""
        before, _, planner, _ = self._split_stages()
        if planner is None:
            return None
        selects = [st.fingerprint() for st in before if isinstance(st, SelectStage) and st.lengths]
        return {"planner": planner.spec(), "window": self.options["plan_window"], "selects": selects}

    def steps(self, context: RuntimeContext | None = None, start: int = 0) -> int:
        """Steps each consumer takes in the context's epoch from group (or, for a
        counted pipeline, epoch position) ``start``; planning reads every window's lengths."""
        ctx = self.context() if context is None else context
        if self.options["steps_per_epoch"] is not None:
            return self.options["steps_per_epoch"]
        policy = self.step_policy
        if policy == "planned":
            return self.plan(ctx).count(start) // ctx.consumers
        if policy == "counted":
            source, _, stages = self._materialised(ctx)
            items = per_consumer(max(0, len(source) - start), ctx.consumers, self.options["remainder"])
            levels = []  # (items before, size, drop_last) of each open batch level
            for st in stages:
                if isinstance(st, BatchStage):
                    levels.append((items, st.size, st.drop_last))
                    items = items // st.size if st.drop_last else -(-items // st.size)
                elif isinstance(st, UnbatchStage) and levels:
                    before, size, drop = levels.pop()
                    items = items * size if drop else before
            return items
        raise UnequalStepsError("the steps of an unequal pipeline are not known before it runs")

    # --- running ---------------------------------------------------------------------
    def _shard_sizes(self, source):
        shard_sizes = self.options["shard_sizes"]
        if shard_sizes is None and self.options["mode"] == "block":
            shard_sizes = dataset_shard_sizes(source)
        return shard_sizes

    def _materialised(self, ctx: RuntimeContext):
        """The dataset after the last cache boundary, its shard sizes and the stages after."""
        source, shard_sizes = self.source, self._shard_sizes(self.source)
        stages = list(self.stages)
        done = 0
        for k, stage in enumerate(self.stages):
            if isinstance(stage, CacheBoundary):
                upstream = stages[done:k]
                source = materialise(stage, self.fingerprint(k + 1), source, upstream, ctx)
                shard_sizes = source.reader.shard_sizes()
                done = k + 1
        return source, shard_sizes, stages[done:]

    def iterate(self, context: RuntimeContext | None = None, *, start: int = 0,
                skip_steps: int = 0, reads: PassReads | None = None, steps: int | None = None,
                skip: int = 0, allow_unequal: bool = False) -> Iterator:
        """Run the pipeline for this consumer (context inferred unless given).

        ``start`` resumes an epoch: the global group a planned pipeline continues from,
        or the epoch position a counted one does (:meth:`step_policy`).  A
        ``steps_per_epoch`` pipeline takes ``steps`` steps (``steps_per_epoch`` unless
        given); one whose stages keep order reads the positions ``reads`` leaves, after
        the first ``skip`` items of its stream, and returns a
        :class:`~hpcio.pipeline.fixed.Watermarked` iterator; another resumes
        by dropping its first ``skip_steps`` steps (a replay).  Refuses an ``"unequal"``
        pipeline over several consumers (:meth:`check_equal_steps`), whose loop would
        hang in a collective, unless ``allow_unequal`` (a loop with no collective).
        """
        ctx = self.context() if context is None else context
        if not allow_unequal:
            self.check_equal_steps(ctx)
        fixed = self.options["steps_per_epoch"] if steps is None else int(steps)
        source, shard_sizes, stages = self._materialised(ctx)
        before, stage, planner, after = self._split_stages(stages)
        shuffles: list = []
        if stage is None:
            shuffles, stages = position_shuffles(stages)

        def read(c: RuntimeContext, at, skip=0):
            if stage is None:
                return self._read(source, shard_sizes, c, at, shuffles, skip)
            return self._read_planned(source, shard_sizes, c, before, stage, at)

        if fixed is None:
            stream = read(ctx, start)
            for st in (stages if stage is None else after):
                stream = st.apply(stream, ctx)
            return iter(stream)
        marked = watermark_stages(stages) if stage is None else None
        if reads is not None and marked is None:
            raise UsageError("only a steps_per_epoch pipeline of maps, selects, position shuffles "
                             "and one batch records what it read; this one resumes by replay")

        def passes():
            # The consumer's reads continue into its parts of the next epochs' orders, so
            # stages see one stream and batches span the pass boundary.
            to_skip, idle = skip, 0
            for i in itertools.count():
                epoch = ctx.epoch + i
                at = reads.kept(i, len(source)) if marked is not None else (start if i == 0 else 0)
                if marked is not None and i < len(reads.layers) and \
                        not per_consumer(len(at), ctx.consumers, self.options["remainder"]):
                    continue  # earlier runs left fewer positions than consumers: the remainder
                got = 0
                if to_skip:
                    part = per_consumer(len(at), ctx.consumers, self.options["remainder"])
                    here, to_skip = min(to_skip, part), to_skip - min(to_skip, part)
                    if here == part:
                        continue
                else:
                    here = 0
                before_pass = kept[0]
                for item in read(ctx.replace(epoch=epoch), at, here):
                    got += 1
                    yield item
                if not got:
                    raise UsageError(f"epoch {epoch} gave this consumer nothing to read; "
                                     f"steps_per_epoch={self.options['steps_per_epoch']} cannot be filled")
                idle = idle + 1 if kept[0] == before_pass else 0
                if idle == 2:  # a select that keeps nothing would read forever
                    raise UsageError(f"two whole passes (epochs {epoch - 1} and {epoch}) kept nothing for "
                                     f"this consumer: its selects reject all of its {got} samples per pass")

        kept = [0]

        def count_kept(items):
            for item in items:
                kept[0] += 1
                yield item

        if marked is not None:
            reads = reads or PassReads()
            return Watermarked(passes(), *marked, ctx, fixed, on_kept=count_kept)
        stream = passes()
        rest = list(stages if stage is None else after)
        while rest and isinstance(rest[0], (MapStage, SelectStage)):
            stream = rest.pop(0).apply(stream, ctx)
        stream = count_kept(stream)
        for st in rest:
            stream = st.apply(stream, ctx)
        return itertools.islice(stream, skip_steps, fixed)

    def _group_plan(self, source, shard_sizes, ctx):
        o = self.options
        before, stage, planner, _ = self._split_stages()
        if stage is None:
            raise UsageError("this pipeline has no planned stage (batch(..., lengths=) or pack())")
        mode = o["mode"]
        if mode == "mixture" and not is_mixture(source):
            mode = "global"
        plan = epoch_plan(source, ctx.epoch, mode, o["seed"], shard_sizes, o["window"])
        order = plan.order
        for st in before:
            if isinstance(st, ShuffleStage):  # a buffer shuffle of positions, stateless
                order = WindowShuffled(order, st.buffer_size, ctx.seed if st.seed is None else st.seed, ctx.epoch)
        filters = [(st.lengths, st.predicate) for st in before if isinstance(st, SelectStage) and st.lengths]
        groups = GroupPlan(plan.dataset, order, planner, window=o["plan_window"], seed=o["seed"],
                           epoch=ctx.epoch, filters=filters)
        return groups, plan, planner

    def _read_planned(self, source, shard_sizes, ctx, before, stage, start) -> Iterator:
        if self.circular_shift:
            raise InvalidArgumentError("circular_shift does not apply to a planned pipeline: "
                                       "its groups are dealt round by round")
        groups, plan, planner = self._group_plan(source, shard_sizes, ctx)
        # shuffles reorder positions and length selects filter them, both when planning
        per_sample = [st for st in before if not isinstance(st, ShuffleStage)
                      and not (isinstance(st, SelectStage) and st.lengths)]
        return read_groups(groups, plan, planner, stage, per_sample, ctx, start, self.options["provenance"])

    def _read(self, source: Dataset, shard_sizes, ctx: RuntimeContext, start=0, shuffles=(),
              skip: int = 0) -> Iterator:
        o = self.options
        mode = o["mode"]
        if mode == "mixture" and not is_mixture(source):  # the cache of a mixture's epoch 0
            mode = "global"
        plan = epoch_plan(source, ctx.epoch, mode, o["seed"], shard_sizes, o["window"])
        order = plan.order
        for st in shuffles:  # a buffer shuffle of positions, stateless
            order = WindowShuffled(order, st.buffer_size, ctx.seed if st.seed is None else st.seed, ctx.epoch)
        n = len(order)
        kept = start if isinstance(start, IndexMap) else Arange(int(start), 1, n - int(start))
        part = consumer_order(
            len(kept), ctx.dp_rank, ctx.dp_size, ctx.worker_id, ctx.num_workers,
            remainder=o["remainder"], order=kept,
        )
        if self.circular_shift:
            part = rotate(part, ctx.consumer, ctx.consumers)
        step = plan.dataset.reader.batch_size
        for lo in range(skip, len(part), step):
            positions = part[lo : lo + step]
            indices = take(order, positions)
            samples = plan.dataset.get_batch(indices)
            if o["provenance"]:
                samples = with_provenance(samples, *plan.provenance(indices), positions)
            yield from samples
