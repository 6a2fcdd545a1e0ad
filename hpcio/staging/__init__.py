"""Storage tiers and staging: put a dataset on the fastest tier a job can reach.

>>> from hpcio.staging import stage, unstage, resolve_tiers   # doctest: +SKIP
"""

from .manifest import MANIFEST_NAME, Digest, FileRecord, Manifest, read_manifest
from .plan import StagePlan, plan_stage
from .stage import StageResult, default_threads, stage
from .tiers import Tier, bench_tier, fs_usage, is_node_local, resolve_tiers, tier_for_path
from .unstage import unstage

__all__ = [
    "stage",
    "unstage",
    "plan_stage",
    "StagePlan",
    "StageResult",
    "default_threads",
    "Tier",
    "resolve_tiers",
    "tier_for_path",
    "fs_usage",
    "is_node_local",
    "bench_tier",
    "MANIFEST_NAME",
    "Manifest",
    "FileRecord",
    "Digest",
    "read_manifest",
]
