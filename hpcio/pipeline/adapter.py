"""The PyTorch adapter of pipelines: :class:`PipelineDataset`, resumable and elastic.

Its state holds positions and indices, never samples, whatever the stages hold in
memory, for each :attr:`~hpcio.pipeline.Pipeline.step_policy`:

- ``"planned"``: the number of groups (batches, rows, batches of rows) of the epoch's
  group sequence the whole job consumed.  Shuffle buffers, packer leftovers and partial
  batches are functions of positions in a planned pipeline, so nothing else is needed,
  and the groups left are dealt again over any world size and worker count.
- ``"counted"``: the epoch positions consumed, as merged ranges: a prefix, plus at most
  one batch's ranges per save, since DataLoader workers deliver in turn.  The positions
  left are split again over the new consumers.
- ``"fixed"`` (``steps_per_epoch``): the steps each rank delivered of the epoch's
  steps, and, where the stages keep order (maps, selects, position shuffles, one
  ``batch``, maps), how many items of its stream each consumer used up
  (:class:`~hpcio.pipeline.fixed.PassReads`): it resumes at any world size and worker
  count, reading only what no consumer used.  Consumers read at different speeds, so
  each rank's state holds its own consumers' counts: give ``load_state_dict`` the
  states of all ranks (a list, e.g. from ``torch.distributed.all_gather_object``).
  Other fixed pipelines resume by replaying each consumer's stream, at the same world
  size and worker count only.

The count of delivered batches is known only where the loop runs: iterate through
:class:`hpcio.torch.DataLoader` (or directly over the dataset).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.utils.data as torch_data

from ..distributed.context import infer_context
from ..distributed.epochs import check_schedule, is_mixture
from ..distributed.order import ORDER_ALGORITHM
from ..distributed.ranges import Kept, kept_to_epoch, merged_ranges
from ..distributed.split import per_consumer
from ..errors import InvalidArgumentError, UsageError, WrongTypeError
from . import position_shuffles
from .fixed import PassReads, watermark_stages
from .stages import BatchStage, ShuffleStage, UnbatchStage

__all__ = ["PipelineDataset", "PIPELINE_STATE_VERSION", "gather_states"]

PIPELINE_STATE_VERSION = 1
# Consumed ranges a counted pipeline's state can hold in the shared tensor: each save
# adds at most one batch's ranges to the prefix, and ranges merge as the epoch goes on.
_MAX_RANGES = 1024
# A fixed pipeline's workers record each step's watermark in a ring of _RING slots,
# read back for the last step the loop received: deeper prefetching would overwrite it.
_MAX_WORKERS, _RING = 256, 64
# Integers of the encoded PassReads (one per consumer per layer) in the shared tensor.
_READS_CAPACITY = 1 << 20


def gather_states(dataset: PipelineDataset) -> list[dict]:
    """Every rank's ``dataset.state_dict()``, gathered with
    ``torch.distributed.all_gather_object`` when a process group is initialised (a
    collective: call it on every rank), else this process's state alone."""
    import torch.distributed as dist

    state = dataset.state_dict()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [state]
    states: list = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


def merged_states(states: list) -> dict:
    """One state from every rank's: they agree but for a fixed pipeline's ``run``,
    whose consumers' reads are joined."""
    if not states or not all(isinstance(s, Mapping) for s in states):
        raise WrongTypeError("load_state_dict takes a state dict or a list of every rank's state dicts")
    first = dict(states[0])
    for other in states[1:]:
        for key in first:
            if key != "run" and other.get(key) != first[key]:
                raise InvalidArgumentError(f"the ranks' states differ in {key!r} ({first[key]!r} and "
                                           f"{other.get(key)!r}): they were not saved at the same step")
    if first.get("run"):
        read, ranks = {}, []
        for other in states:
            read.update(other["run"]["read"])
            ranks.extend(other["run"]["ranks"])
        first["run"] = {**first["run"], "read": read, "ranks": sorted(set(ranks))}
    return first


class PipelineDataset(torch_data.IterableDataset):
    """An :class:`hpcio.pipeline.Pipeline` run in each DataLoader worker, with
    ``state_dict`` / ``load_state_dict``.

    Each worker runs the pipeline over its own part (the context is inferred in the
    worker).  ``set_epoch`` and ``load_state_dict`` reach persistent workers.  Every
    consumer must take the same number of steps
    (:attr:`hpcio.pipeline.Pipeline.step_policy`): a pipeline whose ``select``, budget
    ``batch`` or ``assemble`` would make them differ raises
    :class:`~hpcio.errors.UnequalStepsError` unless planned or given
    ``steps_per_epoch``.  Iterate through :class:`hpcio.torch.DataLoader` for exact
    state (a plain ``torch.utils.data.DataLoader(..., batch_size=None)`` reads correctly
    but cannot checkpoint).  ``decode=`` appends ``pipeline.decode(decode)``: it
    decodes samples, or the samples of each batch when the pipeline batches.
    """

    def __init__(self, pipeline, *, decode=None):
        from . import Pipeline

        if not isinstance(pipeline, Pipeline):
            raise WrongTypeError(f"expected an hpcio.pipeline.Pipeline, got {type(pipeline).__name__}")
        self.pipeline = pipeline if decode is None else pipeline.decode(decode)
        # epoch, start (groups, or steps for "fixed"), range count, ranges...
        self._shared = torch.zeros(3 + 2 * _MAX_RANGES, dtype=torch.int64).share_memory_()
        self._shared[0] = pipeline.epoch
        # fixed: [rank steps of the epoch (0: not begun), encoded PassReads...]
        self._reads = torch.zeros(_READS_CAPACITY, dtype=torch.int64).share_memory_()
        self._marks = torch.full((_MAX_WORKERS, _RING, 2), -1, dtype=torch.int64).share_memory_()
        # fixed: items of its stream each local worker's consumer used up in earlier
        # iterations of this run (a loop broken and started again)
        self._offsets = torch.zeros(_MAX_WORKERS, dtype=torch.int64).share_memory_()
        self._delivered = 0
        self._count_workers = 1
        self._finished = False
        self._by_loader = False
        self._rank_context = None
        self._saved_consumers = None
        self._loader_workers = 1  # set by hpcio.torch.DataLoader

    # --- context -------------------------------------------------------------------
    def context(self):
        """The runtime context of the calling process, at the shared epoch."""
        info = torch_data.get_worker_info()
        epoch = int(self._shared[0])
        if info is not None and self._rank_context is not None:
            return self._rank_context.replace(worker_id=info.id, num_workers=info.num_workers, epoch=epoch)
        ctx = self.pipeline.context().replace(epoch=epoch)
        return ctx if info is None else ctx.replace(worker_id=info.id, num_workers=info.num_workers)

    def _ranges(self) -> list[tuple[int, int]]:
        k = int(self._shared[2])
        flat = self._shared[3 : 3 + 2 * k].tolist()
        return [(flat[i], flat[i + 1]) for i in range(0, 2 * k, 2)]

    def _write(self, epoch: int, start: int, ranges) -> None:
        if len(ranges) > _MAX_RANGES:
            raise UsageError(f"{len(ranges)} consumed ranges exceed the {_MAX_RANGES} a state holds; "
                             "save less often than every batch or plan the pipeline")
        self._shared[0], self._shared[1], self._shared[2] = int(epoch), int(start), len(ranges)
        flat = [v for r in ranges for v in r]
        if flat:
            self._shared[3 : 3 + len(flat)] = torch.tensor(flat, dtype=torch.int64)
        self._delivered = 0
        self._finished = False

    def _n(self, ctx) -> int:
        return len(self.pipeline._materialised(ctx)[0])

    def _items_per_batch(self) -> int:
        """Samples of the epoch order in each item a counted pipeline yields."""
        b = 1
        for st in position_shuffles(self.pipeline._split_stages()[0])[1]:
            if isinstance(st, ShuffleStage):
                raise UsageError(
                    "a buffer shuffle after a batch holds samples read but not delivered, so its "
                    "state is not positions: shuffle before the batch, where shuffle() permutes "
                    "positions, or rely on the epoch order (shuffle=True)")
            if isinstance(st, BatchStage):
                b *= st.size
            elif isinstance(st, UnbatchStage) and b > 1:
                b = 1
        return b

    # --- iteration -----------------------------------------------------------------
    def __iter__(self):
        ctx = self.context()
        pipe = self.pipeline
        pipe.check_equal_steps(ctx)
        in_main = torch_data.get_worker_info() is None
        if in_main and not self._by_loader:
            self._begin(1)
            ctx = self.context()
        start, policy = int(self._shared[1]), pipe.step_policy
        if policy == "fixed" and self._watermarked():
            yield from self._iter_marked(ctx, start)
            return
        if policy == "fixed":
            d, w, workers = start, ctx.worker_id, ctx.num_workers
            stream = pipe.iterate(ctx, skip_steps=d // workers + (1 if w < d % workers else 0))
        elif policy == "counted" and self._ranges():
            stream = pipe.iterate(ctx, start=Kept(self._n(ctx), self._ranges()))
        else:
            stream = pipe.iterate(ctx, start=start)
        for item in stream:
            if in_main and not self._by_loader:
                self._delivered += 1
            yield item
        if in_main and not self._by_loader:
            self._finished = True

    def _watermarked(self) -> bool:
        """A fixed pipeline whose consumers' reads a count describes (:mod:`~hpcio.pipeline.fixed`)."""
        pipe = self.pipeline
        if pipe.step_policy != "fixed":
            return False
        before, stage, _, _ = pipe._split_stages()
        return stage is None and watermark_stages(position_shuffles(before)[1]) is not None

    def _fixed_reads(self) -> tuple[int, PassReads]:
        """(rank steps of the epoch, what earlier runs read) from the shared tensor."""
        epoch_steps = int(self._reads[0])
        if not int(self._reads[1]):
            return epoch_steps, PassReads()
        return epoch_steps, PassReads.decode(self._reads[1:].tolist())

    def _iter_marked(self, ctx, delivered: int):
        epoch_steps, reads = self._fixed_reads()
        w, workers = ctx.worker_id, ctx.num_workers
        if w >= _MAX_WORKERS:
            raise InvalidArgumentError(f"a steps_per_epoch pipeline records at most {_MAX_WORKERS} workers")
        left = max(0, (epoch_steps or self.pipeline.options["steps_per_epoch"] * workers) - delivered)
        stream = self.pipeline.iterate(ctx, reads=reads, skip=int(self._offsets[w]),
                                       steps=left // workers + (1 if w < left % workers else 0))
        in_main = torch_data.get_worker_info() is None
        for j, item in enumerate(stream):
            self._marks[w, j % _RING, 0] = j
            self._marks[w, j % _RING, 1] = stream.mark
            if in_main and not self._by_loader:
                self._delivered += 1
            yield item
        if in_main and not self._by_loader:
            self._finished = True

    def _read_totals(self, ctx) -> dict[int, int]:
        """Items of its stream each of this rank's consumers used up in this run."""
        full, extra = divmod(self._delivered, self._count_workers)
        totals = {}
        for w in range(self._count_workers):
            d = full + (1 if w < extra else 0)
            t = int(self._offsets[w])
            if d:
                step, mark = self._marks[w, (d - 1) % _RING].tolist()
                t += mark
                if step != d - 1:
                    raise UsageError(f"worker {w} ran more than {_RING} steps ahead of the loop "
                                     f"(step {step}, the loop took {d}): lower prefetch_factor")
            totals[w * ctx.dp_size + ctx.dp_rank] = t
        return totals

    def __len__(self) -> int:
        """Steps this rank receives from where the next iteration starts (all workers
        together); a planned pipeline plans every window to count them."""
        ctx = self.context()
        if self.pipeline.step_policy == "unequal":
            self.pipeline.check_equal_steps(ctx)
            # a TypeError, so that list() and len() hints treat the length as unknown
            raise WrongTypeError("this pipeline's steps are not known before it runs (a select, "
                                 "budget batch or assemble changes them)")
        workers = self._loader_workers
        ctx = ctx.replace(num_workers=workers, worker_id=0)
        if self._watermarked():
            epoch_steps = self._fixed_reads()[0] or self.pipeline.options["steps_per_epoch"] * workers
            return max(0, epoch_steps - int(self._shared[1]))
        if self.pipeline.step_policy == "counted" and self._ranges():
            kept = Kept(self._n(ctx), self._ranges())
            return workers * self.pipeline.steps(ctx, start=self._n(ctx) - len(kept))
        return workers * self.pipeline.steps(ctx, start=int(self._shared[1]))

    def _begin(self, num_workers: int) -> None:
        """Start an iteration where the previous one stopped."""
        marked, finished = self._watermarked(), self._finished
        if marked and finished:  # the epoch's steps are done: the next one starts afresh
            self._write_reads(0, PassReads())
        elif marked and self._delivered:  # a loop broken and begun again
            rank = self._rank_context or self.context()
            for c, t in self._read_totals(rank).items():
                self._offsets[c // rank.dp_size] = t
        epoch, start, ranges = self._state()
        self._rank_context = infer_context(**{"seed": self.pipeline.options["seed"], **self.pipeline.explicit})
        workers = max(1, num_workers)
        if marked and workers != self._count_workers and bool(self._offsets.any()):
            raise InvalidArgumentError(
                f"this run's {self._count_workers} workers of a steps_per_epoch pipeline read part of "
                f"the epoch; to go on with {workers}, save the state of every rank and load the list")
        if self._saved_consumers is not None and self.pipeline.step_policy == "fixed" and start:
            now = [self._rank_context.dp_size, workers]
            if list(self._saved_consumers) != now:
                raise InvalidArgumentError(
                    f"a steps_per_epoch pipeline resumes by replaying its consumers' streams: the state "
                    f"was saved with (data-parallel ranks, workers) = {tuple(self._saved_consumers)}, "
                    f"this run has {tuple(now)}")
        self._write(epoch, start, ranges)
        self._count_workers = workers
        if marked:
            epoch_steps, reads = self._fixed_reads()
            self._write_reads(epoch_steps or self.pipeline.options["steps_per_epoch"] * workers, reads)

    def _write_reads(self, epoch_steps: int, reads: PassReads) -> None:
        values = [int(epoch_steps), *reads.encode()]
        if len(values) > _READS_CAPACITY:
            raise UsageError(f"the reads of this steps_per_epoch state take {len(values)} integers, "
                             f"more than the {_READS_CAPACITY} a state holds")
        self._reads[: len(values)] = torch.tensor(values, dtype=torch.int64)
        self._marks.fill_(-1)
        if not epoch_steps:
            self._offsets.zero_()

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` from its beginning on the next iteration."""
        self._write(epoch, 0, [])
        self._write_reads(0, PassReads())
        self._saved_consumers = None

    # --- state ---------------------------------------------------------------------
    def _state(self) -> tuple[int, int, list]:
        """(epoch, start, consumed ranges) where the next iteration starts."""
        epoch, start = int(self._shared[0]), int(self._shared[1])
        ranges = self._ranges()
        if self._finished:
            return epoch + 1, 0, []
        d = self._delivered
        if not d:
            return epoch, start, ranges
        ctx = self._rank_context or self.context()
        dp, workers = ctx.dp_size, self._count_workers
        full, extra = divmod(d, workers)
        policy = self.pipeline.step_policy
        if policy == "planned":  # whole rounds, then the first workers' batches: a prefix
            return epoch, start + full * dp * workers + extra * dp, []
        if policy == "fixed":
            return epoch, start + d, []
        b, consumers = self._items_per_batch(), dp * workers
        n = self._n(ctx)
        kept = len(Kept(n, ranges)) - (start if not ranges else 0)
        m = per_consumer(kept, consumers, self.pipeline.options["remainder"])
        lo, hi = min(full * b, m), min((full + 1) * b, m) if extra else min(full * b, m)
        done = [(0, lo * consumers)] + [(j * consumers, j * consumers + extra * dp) for j in range(lo, hi)]
        base = ranges if ranges else ([(0, start)] if start else [])
        new = [r for a, z in done for r in kept_to_epoch(n, base, a, z)]
        return epoch, 0, merged_ranges(base + new)

    def state_dict(self) -> dict:
        """Where the next iteration starts, as positions: the epoch, the groups (planned)
        or steps (fixed) consumed, or the consumed ranges of epoch positions (counted);
        and what ``load_state_dict`` checks (order, seed, plan, mixture schedule)."""
        pipe = self.pipeline
        epoch, start, ranges = self._state()
        policy = pipe.step_policy
        ctx = self._rank_context or self.context()
        source = pipe.source
        state = {
            "version": PIPELINE_STATE_VERSION,
            "policy": policy,
            "epoch": epoch,
            "position": start,
            "consumed": [list(r) for r in ranges],
            "n": len(source),
            "seed": pipe.options["seed"],
            "shuffle": pipe.options["mode"],
            "order": ORDER_ALGORITHM,
            "stages": [st.kind for st in pipe.stages],
            "plan": pipe.plan_spec() if policy == "planned" else None,
            "consumers": [ctx.dp_size, self._count_workers] if policy == "fixed" else None,
            "mixture": source.reader.schedule.spec() if is_mixture(source) else None,
        }
        if self._watermarked():
            state.update(self._marked_state(ctx))
        return state

    def _marked_state(self, ctx) -> dict:
        """A fixed pipeline's steps, earlier runs' reads and this rank's consumers' reads."""
        epoch_steps, reads = self._fixed_reads()
        workers = self._count_workers
        epoch_steps = epoch_steps or self.pipeline.options["steps_per_epoch"] * workers
        if self._finished:
            return {"steps": None, "reads": [], "run": None}
        run = {"consumers": ctx.dp_size * workers, "ranks": [ctx.dp_rank],
               "read": {str(c): t for c, t in self._read_totals(ctx).items()}}
        return {"position": int(self._shared[1]) + self._delivered, "consumers": None,
                "steps": epoch_steps, "reads": reads.spec(), "run": run}

    def load_state_dict(self, state) -> None:
        """Continue from ``state``: the next iteration reads what no rank consumed yet,
        over the current world size and workers (a ``"fixed"`` pipeline that replays:
        the same ones).  A list of every rank's states is merged first; a fixed pipeline
        over several ranks needs it (see the module's notes)."""
        if not isinstance(state, Mapping):
            state = merged_states(list(state))
        current = self.state_dict()
        for key in ("version", "policy", "n", "seed", "shuffle", "order", "stages", "plan", "mixture"):
            if key == "mixture" and state.get(key) is not None and current[key] is not None:
                continue  # a schedule may change from where the resumed run reads
            if state.get(key) != current[key]:
                raise InvalidArgumentError(
                    f"state was saved with {key}={state.get(key)!r} but this pipeline has "
                    f"{key}={current[key]!r}; resuming would read a different sequence")
        if current["mixture"] is not None:
            # An epoch begun was planned (or split) from its whole order: a new weight
            # applies from the next epoch boundary the saved reads have not reached.
            epoch = int(state["epoch"])
            begun = bool(state["position"] or state.get("consumed") or state.get("run"))
            passes = max(1, len(state.get("reads") or []))
            check_schedule(state["mixture"], current["mixture"],
                           (epoch + (passes if begun else 0)) * int(current["n"]))
        self._write(int(state["epoch"]), int(state["position"]), merged_ranges(state.get("consumed") or []))
        self._saved_consumers = state.get("consumers")
        if self._watermarked():
            self._load_reads(state)

    def _load_reads(self, state: Mapping) -> None:
        reads = PassReads(state.get("reads") or [])
        run = state.get("run")
        if run:
            c = int(run["consumers"])
            read = {int(k): int(v) for k, v in run["read"].items()}
            missing = sorted(set(range(c)) - set(read))
            if missing:
                raise InvalidArgumentError(
                    f"this steps_per_epoch state holds the reads of rank(s) {sorted(run['ranks'])} only "
                    f"({len(missing)} of {c} consumers missing): give load_state_dict the states of "
                    "all ranks, as a list")
            reads = reads.after(self._n(self.context()), c, self.pipeline.options["remainder"],
                                [read[k] for k in range(c)])
        self._write_reads(int(state.get("steps") or 0), reads)
        self._offsets.zero_()
