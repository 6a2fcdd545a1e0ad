"""hpcio changes no process-wide state (the garbage collector, Arrow's memory pool; glibc's
heap thresholds in tests/kernels/test_kernels_io.py) unless the user opts in with
hpcio.tune or HPCIO_TUNE.

Each case runs in a fresh process: one that has already changed any of these would hide
whether hpcio did."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpcio.errors import TuningError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROBE = """
import gc, json, sys
import numpy as np
import pyarrow as pa, pyarrow.parquet as pq
import hpcio

path, how = sys.argv[1], sys.argv[2]
if how == "tune":
    hpcio.tune(keep_freed_heap=True, pause_gc=True, arrow_jemalloc=True)
seen = []
read_row_group = pq.ParquetFile.read_row_group

def observing(self, i, *args, **kwargs):  # runs inside the batch read
    seen.append((gc.isenabled(), pa.default_memory_pool().backend_name))
    return read_row_group(self, i, *args, **kwargs)

pq.ParquetFile.read_row_group = observing
pool = pa.default_memory_pool().backend_name
ds = hpcio.open(path)
for _ in range(3):
    ds.get_batch(np.arange(0, 400, 7))
    ds.reader.cache.clear()
print(json.dumps({"gc_enabled": sorted({s[0] for s in seen}), "pools": sorted({s[1] for s in seen}),
                  "pool_before": pool, "pool_after": pa.default_memory_pool().backend_name,
                  "gc_after": gc.isenabled(), "tune": hpcio.tune()}))
"""


@pytest.fixture(scope="module")
def parquet_file(tmp_path_factory):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path_factory.mktemp("tuning") / "data.parquet"
    pq.write_table(pa.table({"id": list(range(400)), "blob": [bytes([i % 256]) * 2000 for i in range(400)]}),
                   path, row_group_size=100)
    return str(path)


def _probe(path, how="default", **env):
    env = {k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "HPCIO_TUNE")} | env
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", _PROBE, path, how], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _jemalloc_available() -> bool:
    import pyarrow as pa

    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def test_reading_changes_no_process_wide_state_by_default(parquet_file):
    got = _probe(parquet_file)
    assert got["tune"] == {"keep_freed_heap": False, "pause_gc": False, "arrow_jemalloc": False}
    assert got["gc_enabled"] == [True] and got["gc_after"] is True
    assert got["pools"] == [got["pool_before"]] and got["pool_after"] == got["pool_before"]


@pytest.mark.parametrize("how, env", [("tune", {}), ("default", {"HPCIO_TUNE": "all"}),
                                      ("default", {"HPCIO_TUNE": "keep_freed_heap,pause_gc,arrow_jemalloc"})])
def test_opting_in_applies_every_switch(parquet_file, how, env):
    got = _probe(parquet_file, how, **env)
    assert got["tune"] == {"keep_freed_heap": True, "pause_gc": True, "arrow_jemalloc": True}
    assert got["gc_enabled"] == [False] and got["gc_after"] is True
    if _jemalloc_available():
        assert got["pools"] == ["jemalloc"]
    assert got["pool_after"] == got["pool_before"]


def test_one_switch_alone(parquet_file):
    got = _probe(parquet_file, HPCIO_TUNE="pause_gc")
    assert got["tune"] == {"keep_freed_heap": False, "pause_gc": True, "arrow_jemalloc": False}
    assert got["gc_enabled"] == [False] and got["pools"] == [got["pool_before"]]


def test_an_unknown_switch_in_the_environment_is_an_error(monkeypatch):
    from hpcio import tuning

    monkeypatch.setenv("HPCIO_TUNE", "pause_gc,fast")
    with pytest.raises(TuningError, match="HPCIO_TUNE='pause_gc,fast': unknown switch fast; expected all, none "
                                          "or a comma list of keep_freed_heap, pause_gc, arrow_jemalloc"):
        tuning._from_environment()


@pytest.mark.parametrize("env, want", [({}, False), ({"HPCIO_TUNE": "all"}, True)])
def test_the_bench_readers_run_as_their_environment_says(env, want):
    """``hpcio bench`` times hpcio as a user's process runs it: its reader workers tune
    nothing unless HPCIO_TUNE says so (``hpcio bench --tuned`` sets it for them)."""
    code = "import json, hpcio, hpcio.bench.worker as w; w.load_hpcio(); print(json.dumps(hpcio.tune()))"
    clean = {k: v for k, v in os.environ.items() if k != "HPCIO_TUNE"}
    out = subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == dict.fromkeys(("keep_freed_heap", "pause_gc", "arrow_jemalloc"), want)
