"""Conversion: any readable dataset into sharded training data, on one or many ranks.

``hpcio.convert(src, dst, to="mds", ...)`` (:mod:`.api`; also ``hpcio convert`` and
``hpcio-convert``) takes its options as one :class:`ConvertOptions` (:mod:`.spec`); the
driver (:mod:`.driver`) lists the sources, plans shards (:mod:`.plan`), has every MPI
rank write its shards (:mod:`.writer`), skips and reports bad samples (:mod:`.faults`),
resumes after a crash (:mod:`.resume`), shows one aggregated progress display
(:mod:`.progress`) and publishes the dataset (:mod:`.publish`).
"""

from ..errors import BadSampleError, PlanError, ResumeError
from .api import convert
from .faults import BadSample
from .plan import Recommendation, ShardPlan, assign_shards, recommend, shard_count
from .spec import ConvertOptions

__all__ = [
    "convert",
    "ConvertOptions",
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
