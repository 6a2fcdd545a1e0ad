"""``hpcio bench --open-cost``, run for real on a few samples: every system is timed in
fresh processes on the data its own writer wrote, and hpcio's modules had their bytecode
cached, as an installed wheel's have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcio.bench.open_cost import SYSTEMS

pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("open-cost")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "hpcio.cli.main", "bench", "--open-cost", "--vlm-samples", "40", "--repeats", "1",
         "--no-interop", "--out", str(tmp / "report"), "--data", str(tmp / "data")],
        capture_output=True, text=True, env=env, timeout=900, cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((tmp / "report" / "open_cost.json").read_text())
    return result, (tmp / "report" / "open_cost.md").read_text(), proc.stdout, tmp / "data" / "open-cost-40"


def test_every_system_is_timed_or_says_why_not(report):
    result, table, printed, _data = report
    rows = {r["system"]: r for r in result["rows"]}
    assert list(rows) == [s.label for s in SYSTEMS]
    for s in SYSTEMS:
        if s.interop:
            assert rows[s.label]["error"] == "the interop environment is missing (tools/interop-env.sh)"
            continue
        r = rows[s.label]
        assert "error" not in r, r
        assert r["import_open_s"] == pytest.approx(r["import_s"] + r["open_s"])
        assert r["first_s"] > 0 and r["modules"] > 1
    assert result["fastest_peer"] in {s.label for s in SYSTEMS if s.peer}
    assert [line.split("|")[1].strip() for line in table.splitlines()[4:]] == [s.label for s in SYSTEMS]
    assert table in printed


def test_hpcio_imports_what_it_reads_with_its_bytecode_cached(report):
    result, _table, _printed, _data = report
    for r in result["rows"]:
        if not r["peer"]:
            assert r["bytecode_share"] == 1.0, r
            # the format modules load inside the open, not with the library
            assert r["import_s"] < r["open_s"], r


def test_each_dataset_is_its_own_writer_s(report):
    _result, _table, _printed, data = report
    index = json.loads((data / "streaming-mds" / "index.json").read_text())
    assert index["shards"][0]["column_encodings"] == ["str", "pkl", "json"]  # sorted by name, as MDSWriter does
    assert sorted(os.listdir(data / "webdataset"))[0] == "shard-000000.tar"
    assert os.listdir(data / "parquet") == ["data.parquet"]
