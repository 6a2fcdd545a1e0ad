"""``hpcio bench --node-cache``, run for real on a tiny dataset behind the emulated tier:
every run is in the table, every byte a cache fetched was counted by the tier, and no
cache fetched less than the Belady minimum of the shard sequence it served."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcio.bench.node_cache import NO_GLOBAL_LITDATA, ORDERS, SYSTEMS

pytestmark = [pytest.mark.bench,
              pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="this machine has no /dev/fuse")]

ROOT = Path(__file__).resolve().parents[1]
# shards of hpcio's read batch (4 MiB), as at full size; a cache of 8 shards
SHARDS, SHARD_BYTES, SAMPLE_BYTES = 32, 4 << 20, 1 << 20
SAMPLES = SHARDS * (SHARD_BYTES // SAMPLE_BYTES)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("node-cache")
    out = tmp / "report"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "hpcio.cli.main", "bench", "--node-cache", "--out", str(out), "--data", str(tmp / "data"),
         "--node-cache-shards", str(SHARDS), "--node-cache-shard-bytes", str(SHARD_BYTES),
         "--node-cache-sample-bytes", str(SAMPLE_BYTES), "--tier-latency-us", "1000", "--tier-bandwidth", "200MB"],
        capture_output=True, text=True, env=env, timeout=900, cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads((out / "node_cache.json").read_text()), (out / "node_cache.md").read_text(), proc.stdout


def _runs(result) -> dict:
    return {(r["order"], r["system"]): r for r in result["runs"]}


def test_every_run_is_in_the_table(report):
    result, table, printed = report
    runs = _runs(result)
    assert set(runs) == {(o, s) for o in ORDERS for s in SYSTEMS}
    assert runs["global", "litdata"]["error"] == NO_GLOBAL_LITDATA
    litdata = result["setup"].get("litdata_error")
    for key, r in runs.items():
        if key == ("global", "litdata") or (key[1] == "litdata" and litdata):
            continue
        assert "error" not in r, r
        assert len(r["epochs"]) == 2 and r["every_sample_once"], key
        assert all(e["samples"] == SAMPLES for e in r["epochs"]), key
        assert r["resident_before"] == 0.0, key  # cold: nothing of the tier's files was cached
    rows = [line for line in table.splitlines() if line.startswith("| global |") or line.startswith("| block |")]
    assert [tuple(c.strip() for c in line.split("|")[1:3]) for line in rows] == [(o, s) for o in ORDERS for s in SYSTEMS]
    assert table in printed


def test_the_tier_counts_what_each_cache_fetched(report):
    result, _table, _printed = report
    total = sum(result["setup"]["layouts"]["mds"]["bytes"])
    limit = result["limit"]
    assert limit == int(total * 0.25)
    for (order, system), r in _runs(result).items():
        if "error" in r:
            continue
        first = r["epochs"][0]
        # a cold cache fetches every shard at least once in the first epoch, and only
        # through the tier
        assert first["tier_bytes"] >= r["dataset_bytes"], (order, system)
        assert r["belady_min_bytes"] > 0
        if not system.startswith("hpcio"):
            # a cache serving that sequence a sample at a time within that limit fetches
            # no less than Belady's minimum (hpcio's fetches a batch's shards together)
            assert r["tier_bytes"] >= r["belady_min_bytes"], (order, system)
            assert max(e["cache_dir_peak_bytes"] for e in r["epochs"]) <= 1.01 * limit, (order, system)
        if system.startswith("hpcio"):
            # the tier served every byte the cache says it fetched
            assert sum(e["cache"]["fetched_bytes"] for e in r["epochs"]) <= r["tier_bytes"], (order, system)


def _around_the_cache(r) -> tuple[int, int]:
    """(bytes the tier served the run, the most of them the cache's fetches account for:
    what it fetched plus the page each request may end on)."""
    fetched = sum(e["cache"]["fetched_bytes"] for e in r["epochs"])
    fetches = sum(e["cache"]["fetches"] for e in r["epochs"])
    return r["tier_bytes"], fetched + 4096 * fetches


def test_no_run_reads_from_the_tier_around_the_cache(report):
    result, _table, _printed = report
    for (order, system), r in _runs(result).items():
        if system.startswith("hpcio"):
            served, fetched = _around_the_cache(r)
            assert served <= fetched, (order, system)


def test_both_policies_serve_the_same_sequence(report):
    result, _table, _printed = report
    runs = _runs(result)
    for order in ORDERS:
        # the same seeds: the same sequence, the same minimum
        assert runs[order, "hpcio belady"]["belady_min_bytes"] == runs[order, "hpcio lru"]["belady_min_bytes"]
    # a quarter of the dataset cannot hold a global shuffle's shards: more than one
    # dataset's bytes an epoch; the block order reads each shard to its end
    assert runs["global", "hpcio belady"]["belady_min_ratio"] > 2 > runs["block", "hpcio belady"]["belady_min_ratio"]


def test_belady_fetches_no_more_than_lru(report):
    result, _table, _printed = report
    runs = _runs(result)
    for order in ORDERS:
        assert runs[order, "hpcio belady"]["tier_bytes"] <= runs[order, "hpcio lru"]["tier_bytes"], order
