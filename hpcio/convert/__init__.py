"""Conversion: any readable dataset into sharded training data, on one or many ranks.

``hpcio.convert(src, dst, to="mds", ...)`` (also ``hpcio convert`` and
``hpcio-convert``) lists the sources, plans shards (:mod:`.plan`), writes them on every
MPI rank (:mod:`.driver`), skips and reports bad samples (:mod:`.faults`), resumes after a
crash (:mod:`.resume`) and shows one aggregated progress display (:mod:`.progress`).
"""

import sys
import types

from ..errors import BadSampleError, PlanError, ResumeError
from .driver import convert
from .faults import BadSample
from .plan import Recommendation, ShardPlan, assign_shards, recommend, shard_count

__all__ = [
    "convert",
    "BadSample",
    "BadSampleError",
    "PlanError",
    "ResumeError",
    "Recommendation",
    "ShardPlan",
    "assign_shards",
    "recommend",
    "shard_count",
]


def checked_convert(src, dst, to: str, **options):
    """:func:`convert` with its keyword options checked first: an unknown one is an
    OptionError listing the valid ones, raised before any source is read."""
    from ..options import check_options, option_names

    check_options(options, option_names(convert, skip=("src", "dst", "to")), "convert")
    return convert(src, dst, to=to, **options)


class _CallableModule(types.ModuleType):
    """Importing ``hpcio.convert`` binds the package over the ``hpcio.convert`` function
    (the import system sets the parent's attribute); calling the package calls the
    checked function, so ``hpcio.convert(...)`` behaves the same either way."""

    def __call__(self, *args, **kwargs):
        return checked_convert(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
