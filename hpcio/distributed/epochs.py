"""What a consumer reads in one epoch, where each sample came from, and whether a saved
mixture schedule may resume under the current one: the pieces the :mod:`hpcio.torch`
adapters and :mod:`hpcio.pipeline` share over a dataset or a mixture."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..dataset import Dataset
from ..errors import InvalidArgumentError
from ..mixture import Mixture, MixtureReader
from .order import Arange

__all__ = ["EpochPlan", "epoch_plan", "is_mixture", "check_mixture_shuffle", "with_provenance",
           "check_schedule"]


def is_mixture(dataset) -> bool:
    """True for a mixture read in its own order: a :class:`Mixture` or a ``select`` of it.
    A view that reorders or slices a mixture is an ordinary dataset of its positions."""
    return isinstance(getattr(dataset, "reader", None), MixtureReader) and dataset.indices is None


def check_mixture_shuffle(shuffle) -> str:
    """The shuffle mode of a mixture: its own order (``shuffle=True``), nothing else."""
    if shuffle is not True:
        raise InvalidArgumentError(
            f"a mixture is read in its own order, epoch by epoch: leave shuffle=True (the default), "
            f"got shuffle={shuffle!r}; to reorder its positions, pass a view such as mixture[:]")
    return "mixture"


class EpochPlan:
    """What a consumer reads in one epoch: ``dataset.get_batch(order.take(positions))``
    for epoch-order ``positions``, and where each sample comes from.

    A mixture's epoch ``e`` is its view of stream positions ``[e * E, (e + 1) * E)``
    read in order; any other dataset is read in its epoch order.
    """

    def __init__(self, dataset: Dataset, order, epoch: int, mixture: bool):
        self.dataset, self.order, self.epoch, self.mixture = dataset, order, int(epoch), mixture

    def provenance(self, indices: np.ndarray) -> tuple[list[str] | str, np.ndarray]:
        """``(source name(s), index in that source)`` of the samples at ``indices``."""
        indices = np.asarray(indices, dtype=np.int64)
        if self.mixture:
            return self.dataset.reader.locate(self.dataset.indices.take(indices))  # type: ignore[attr-defined]
        return self.dataset.reader.path, indices


def epoch_plan(dataset: Dataset, epoch: int, mode: str, seed: int = 0, shard_sizes=None,
               window: int = 1) -> EpochPlan:
    """The :class:`EpochPlan` of ``dataset`` in ``epoch`` under shuffle ``mode``
    (``"mixture"`` for a mixture, see :func:`check_mixture_shuffle`)."""
    from .split import epoch_order

    if mode == "mixture":
        view = Mixture(dataset.reader, None, dataset.fields).epoch(epoch)  # type: ignore[arg-type]
        return EpochPlan(view, Arange(0, 1, len(view)), epoch, True)
    return EpochPlan(dataset, epoch_order(len(dataset), seed, epoch, mode, shard_sizes, window), epoch, False)


def with_provenance(samples: list, sources, indices, positions) -> list:
    """``samples`` with :data:`PROVENANCE_FIELDS` added: ``sources`` (one name for all, or
    one per sample), ``indices`` in those sources and epoch-order ``positions``.  A dict
    sample is copied (readers may hand out the same dict again), any other mapping is
    chained, so a lazy sample decodes nothing more."""
    from collections import ChainMap

    indices = np.asarray(indices).tolist()
    positions = np.asarray(positions).tolist()
    names = [sources] * len(samples) if isinstance(sources, str) else list(sources)
    out = []
    for sample, name, index, position in zip(samples, names, indices, positions):
        added = {"__source__": name, "__index__": index, "__position__": position}
        out.append({**sample, **added} if isinstance(sample, dict) else ChainMap(added, sample))
    return out


def check_schedule(saved, current: Mapping, position: int) -> None:
    """Refuse to resume under ``current`` a state saved with schedule ``saved`` at stream
    ``position`` unless both agree on everything before it: algorithm, seed, epoch size,
    the segments starting before it and the lengths of the sources those draw from.
    Segments from ``position`` on may differ (a re-weighting at the resume point)."""
    if not isinstance(saved, Mapping):
        raise InvalidArgumentError("state was saved reading a dataset, not a mixture; this dataset is one")
    rebuild = ("rebuild the mixture with hpcio.mixture.from_schedule(sources, state['mixture']), "
               f"then change weights at {position} or later")
    for key in ("algorithm", "seed", "epoch_size"):
        if saved.get(key) != current[key]:
            raise InvalidArgumentError(f"state was saved with a mixture of {key}={saved.get(key)!r} but "
                                       f"this one has {key}={current[key]!r}; {rebuild}")
    before = [[dict(g) for g in schedule["segments"] if int(g["at"]) < position]
              for schedule in (saved, current)]
    for k, (old, new) in enumerate(zip(*before)):
        if old != new:
            raise InvalidArgumentError(f"state was saved with mixture segment {k} = {old} but this one "
                                       f"has {new}, before stream position {position}; {rebuild}")
    if len(before[0]) != len(before[1]):
        k = min(len(before[0]), len(before[1]))
        extra = (before[0] if len(before[0]) > k else before[1])[k]
        raise InvalidArgumentError(f"the mixture segment at {extra['at']} is in only one of the saved "
                                   f"state and this mixture, before stream position {position}; {rebuild}")
    used = {name for g in before[1] for name, w in g["weights"].items()}
    for name in sorted(used):
        old, new = saved["sources"].get(name), current["sources"].get(name)
        if old != new:
            raise InvalidArgumentError(f"state was saved with source {name!r} of {old} samples but this "
                                       f"mixture's has {new}; {rebuild}")
