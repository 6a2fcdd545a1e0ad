"""Pipelines with ``steps_per_epoch``: consumer streams over passes, and what they read.

Each consumer of a ``steps_per_epoch`` pipeline reads its part of epoch ``e``'s order,
then its part of epoch ``e + 1``'s, and so on (*passes*), until it has taken its steps.
When a ``select`` on decoded content or a budget ``batch`` makes consumers read at
different speeds, what the job consumed is one count per consumer: the items of its
stream that it has used up (delivered, or dropped by a ``select``).  For a stream whose
stages keep order, the items used up are a prefix, so :class:`PassReads` records the
counts, per pass, as layers of :class:`~hpcio.distributed.ranges.Unread`; a resumed run
reads only the positions left, split over its own consumers, at any world size and
worker count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..distributed.order import Arange, Composed, IndexMap
from ..distributed.ranges import Unread
from ..distributed.split import per_consumer
from ..errors import InvalidArgumentError
from .stages import BatchStage, MapStage, SelectStage, Stage

__all__ = ["PassReads", "Watermarked", "watermark_stages"]

_END = object()


class PassReads:
    """The positions of passes ``epoch, epoch + 1, ...`` that earlier runs read.

    ``layers[i]`` lists, for pass ``epoch + i``, the runs that read in it as
    ``(consumers, counts)``: a run's consumers split what the runs before it left.
    """

    def __init__(self, layers: Sequence[Sequence[tuple[int, Sequence[int]]]] = ()):
        self.layers = [[(int(c), [int(v) for v in counts]) for c, counts in chain] for chain in layers]
        for chain in self.layers:
            for c, counts in chain:
                if c < 1 or len(counts) != c:
                    raise InvalidArgumentError(f"a read layer holds one count per consumer: {c} "
                                               f"consumers, {len(counts)} counts")

    def kept(self, i: int, n: int) -> IndexMap:
        """The positions of pass ``epoch + i`` (of ``n``) no earlier run read."""
        kept: IndexMap = Arange(0, 1, n)
        for _, counts in (self.layers[i] if i < len(self.layers) else ()):
            kept = Composed(Unread(len(kept), counts), kept)
        return kept

    def after(self, n: int, consumers: int, remainder: str, totals: Sequence[int]) -> PassReads:
        """These reads plus a run of ``consumers`` whose consumer ``c`` used up the first
        ``totals[c]`` items of its stream (its part of each pass, pass after pass)."""
        left = [int(t) for t in totals]
        layers = [list(chain) for chain in self.layers]
        i = 0
        while any(left) or i < len(layers):
            part = per_consumer(len(self.kept(i, n)), consumers, remainder)
            if part == 0 and i >= len(layers):
                raise InvalidArgumentError(f"a pass of {n} positions gives {consumers} consumers nothing to read")
            counts = [min(t, part) for t in left]
            if any(counts):
                while len(layers) <= i:
                    layers.append([])
                layers[i].append((consumers, counts))
            left = [t - c for t, c in zip(left, counts)]
            i += 1
        return PassReads(layers)

    def spec(self) -> list:
        return [[[c, list(counts)] for c, counts in chain] for chain in self.layers]

    def encode(self) -> list[int]:
        """The layers as integers: passes, then per pass its layer count and each layer's
        consumers and counts (for a shared tensor that persistent workers read)."""
        out = [len(self.layers)]
        for chain in self.layers:
            out.append(len(chain))
            for c, counts in chain:
                out.extend([c, *counts])
        return out

    @classmethod
    def decode(cls, values: Sequence[int]) -> PassReads:
        it = iter(int(v) for v in values)
        layers = []
        for _ in range(next(it)):
            chain = []
            for _ in range(next(it)):
                c = next(it)
                chain.append((c, [next(it) for _ in range(c)]))
            layers.append(chain)
        return cls(layers)


def watermark_stages(stages: Sequence[Stage]) -> tuple[list[Stage], BatchStage | None, list[Stage]] | None:
    """``(before, batch, after)`` when a stream through ``stages`` keeps order and holds at
    most the one item a budget batch defers, so a count says what was used up: maps,
    selects and position shuffles, at most one ``batch``, then maps.  None otherwise."""
    before: list[Stage] = []
    k = 0
    while k < len(stages) and isinstance(stages[k], (MapStage, SelectStage)):
        before.append(stages[k])
        k += 1
    batch = None
    if k < len(stages) and isinstance(stages[k], BatchStage):
        batch = stages[k]
        k += 1
    after = list(stages[k:])
    if not all(isinstance(st, MapStage) for st in after):
        return None  # a buffer shuffle, unbatch, second batch or assemble holds items
    return before, batch, after  # type: ignore[return-value]


class Watermarked:
    """The steps of a consumer's stream, with :attr:`mark`: how many items of the
    stream the steps delivered so far used up (read, and delivered or dropped)."""

    def __init__(self, source: Iterator, before, batch: BatchStage | None, after, context, steps: int,
                 on_kept=None):
        self.mark = 0
        self._read = self._arrived = self._batched = 0
        stream = self._count_read(source)
        for st in before:
            stream = st.apply(stream, context)
        if on_kept is not None:  # sees every item the selects keep
            stream = on_kept(stream)
        if batch is not None:
            stream = self._count_batched(batch.apply(self._count_arrived(stream), context))
        for st in after:
            stream = st.apply(stream, context)
        self._steps = self._marked(stream, steps)

    def _count_read(self, items):
        for item in items:
            self._read += 1
            yield item

    def _count_arrived(self, items):
        for item in items:
            self._arrived += 1
            yield item

    def _count_batched(self, batches):
        for b in batches:
            self._batched += len(b)
            yield b

    def _marked(self, stream, steps):
        stream = iter(stream)
        for _ in range(steps):  # no read beyond the last step
            step = next(stream, _END)
            if step is _END:
                return
            # a budget batch that closed on an item holds it for the next batch
            self.mark = self._read - (self._arrived - self._batched)
            yield step

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._steps)
