"""hpcio.bench.shardcount: the same samples at several shard counts, and its table."""

from __future__ import annotations

import hpcio
from hpcio.bench.shardcount import markdown, sharded_datasets


def test_sharded_datasets_scale_the_shard_count(tmp_path):
    datasets = sharded_datasets("text", 600, str(tmp_path), formats=("mds", "webdataset", "jinx"), multiples=(1, 4),
                                base=2, log=lambda _m: None)
    counts = {}
    for d in datasets:
        with hpcio.open(d.path) as ds:
            assert [s["id"] for s in ds] == list(range(600))
            counts[d.name] = len(ds.reader.shard_sizes() or [1])
    assert counts["mds-x4"] >= 3 * counts["mds-x1"] >= 6
    assert counts["webdataset-x4"] == 4 * counts["webdataset-x1"] == 8
    assert counts["jinx-x4"] >= 2 * counts["jinx-x1"] >= 4


def test_markdown_reports_the_spread_over_shard_counts():
    rows = [{"system": "hpcio", "format": "mds", "op": "shuffle", "cache": "warm", "multiple": m,
             "shards": 21 * m, "samples_per_s": 1e6 / us, "us_per_sample": us}
            for m, us in ((1, 10.0), (4, 10.5), (16, 11.0))]
    table = markdown(rows)
    assert "| hpcio | mds | shuffle | warm | 10.0 (100,000, 21 shards)" in table
    assert table.rstrip().endswith("| 1.10 |")
