"""The conversion's storage reads, measured for real: cold sources, mpiexec, block input."""

from __future__ import annotations

import json

import pytest

from hpcio.bench.conversion_reads import conversion_reads, reads_markdown

pytestmark = pytest.mark.bench


def test_cold_jsonl_conversion_reads_its_source_once_to_twice(tmp_path):
    src = tmp_path / "raw.jsonl"
    with open(src, "w") as f:
        for i in range(20000):
            f.write(json.dumps({"id": i, "text": f"document {i} " + "lorem ipsum " * 40}) + "\n")
    records = conversion_reads([str(src)], "mds", ranks=(1, 2), round_size="1MB", workdir=str(tmp_path),
                               log=lambda *_: None)
    assert [r["ranks"] for r in records] == [1, 2]
    for r in records:
        assert r["returncode"] == 0, r
        assert r["resident_before"] < 0.01, r
        # the evicted source is read from storage at least once, and never once per round
        assert 0.9 <= r["ratio"] <= 2.2, r
    table = reads_markdown(records)
    assert table.count("\n") == 4 and "| 2 | mds |" in table
