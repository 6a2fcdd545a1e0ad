"""A shard truncated while a reader has it mapped raises ShardChangedError, not SIGBUS.

On a cluster a dataset re-staged or replaced in place under a running job does exactly
this.  Each case runs in a child process: a SIGBUS there fails the test instead of
killing the test run.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

import hpcio
from tests.conftest import child_env

N = 64


def _samples():
    # incompressible records over many pages: the last ones lie past the new end
    return ({"id": i, "text": random.Random(i).randbytes(1000).hex()} for i in range(N))


def _write(tmp_path, kind: str) -> tuple[str, str]:
    """The dataset of ``kind`` and the one shard file to truncate."""
    if kind.startswith("mds"):
        path = tmp_path / "ds"
        options = {"compression": "sample::zstd"} if kind == "mds-zstd" else {}
        with hpcio.open_writer(path, format="mds", columns={"id": "int", "text": "str"}, **options) as w:
            for s in _samples():
                w.write(s)
        return str(path), str(path / "shard.00000.mds")
    if kind == "jinx":
        path = tmp_path / "ds.jinx"
        with hpcio.open_writer(path, format="jinx") as w:
            for s in _samples():
                w.write(s)
        return str(path), str(path)
    path = tmp_path / "wds"
    with hpcio.open_writer(path, format="webdataset") as w:
        for s in _samples():
            w.write(s)
    (shard,) = [p for p in os.listdir(path) if p.endswith(".tar")]
    return str(path), str(path / shard)


_CHILD = r"""
import os, sys
import hpcio

path, shard = sys.argv[1:]
ds = hpcio.open(path)
n = len(ds)
assert ds[n - 1]["id"] == n - 1 and ds[0]["id"] == 0  # the shard is now open and mapped
os.truncate(shard, 4096)
for name, read in [("item", lambda: ds[n - 1]), ("batch", lambda: ds.get_batch(range(n - 8, n))),
                   ("iterate", lambda: [s["text"] for s in ds])]:
    try:
        read()
    except hpcio.ShardChangedError as exc:
        assert exc.path == shard and "shrank" in str(exc), exc
        print(name, "ShardChangedError")
    else:
        print(name, "no error")
"""


@pytest.mark.filterwarnings("ignore::UserWarning")  # sample::zstd's note on streaming
@pytest.mark.parametrize("kind", ["mds", "mds-zstd", "jinx", "webdataset"])
def test_truncated_mapped_shard_raises_typed_error(tmp_path, kind):
    path, shard = _write(tmp_path, kind)
    assert os.path.getsize(shard) > 8 * 4096
    done = subprocess.run([sys.executable, "-c", _CHILD, path, shard], capture_output=True, text=True,
                          env=child_env(), timeout=120)
    assert done.returncode == 0, f"child died (signal {-done.returncode})" if done.returncode < 0 else done.stderr
    assert done.stdout.split("\n")[:3] == ["item ShardChangedError", "batch ShardChangedError",
                                           "iterate ShardChangedError"]
