"""HDF5 shards: conformance, plain h5py reads, gzip without hdf5plugin, rollover,
the mpio guard, and files of the wrong layout."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import hpcio
from hpcio.errors import CapabilityError, SchemaError
from hpcio.testing import FormatTests, assert_sample_equal


class TestHDF5Format(FormatTests):
    format_name = "hdf5"
    writer_options = {"max_count": 20, "chunk_samples": 8, "chunk_bytes": 64 << 10}
    report_options = {"compression": None, "max_count": 2, "checksum": False}  # values decoded, not checksummed
    expected_inspect = {"shards": 3, "fields": {"id": "int", "text": "str", "meta": "json"},
                        "details": {"filters": []}}
    corruption = (b'{"i":3}', b'{"i":3!')
    expected_problem = {"path": "{file}", "offset": None, "sample": 3, "type": "DecodeError",
                        "error": "field 'meta' is not valid JSON: Expecting ',' delimiter: line 1 column 7 (char 6) ({file}, sample 3)"}


def sample(i):
    return {"emb": np.full((2, 3), i, dtype=np.float64), "label": i, "text": f"t{i}",
            "blob": bytes([i]) * i, "meta": {"k": [i, 0.5]}}


def write(path, samples, **options):
    with hpcio.open_writer(path, format="hdf5", **options) as w:
        for s in samples:
            w.write(s)
    return str(path)


def test_h5py_reads_the_datasets(tmp_path):
    import h5py

    samples = [sample(i) for i in range(25)]
    path = write(tmp_path / "h", samples, max_count=10)
    assert sorted(os.listdir(path)) == ["hashes.json", "shard-000000.h5", "shard-000001.h5", "shard-000002.h5"]
    files = sorted(n for n in os.listdir(path) if n.endswith(".h5"))
    with h5py.File(os.path.join(path, files[1]), "r") as f:
        assert json.loads(f.attrs["hpcio"])["num_samples"] == 10
        np.testing.assert_array_equal(f["label"][:], np.arange(10, 20))
        assert f["emb"].shape == (10, 2, 3) and f["emb"].chunks[0] == 10
        assert f["emb"].compression is not None or 32001 in f["emb"]._filters
        off, data = f["blob/offsets"][:], f["blob/data"][:]
        assert data[off[3]:off[4]].tobytes() == bytes([13]) * 13
    ds = hpcio.open(path)
    for i in (0, 9, 10, 24):
        assert_sample_equal(ds[i], samples[i], f"sample {i}")


def test_gzip_readable_without_hdf5plugin(tmp_path):
    path = write(tmp_path / "h", [sample(i) for i in range(5)], compression="gzip")
    script = (
        "import sys, h5py; sys.modules['hdf5plugin'] = None\n"
        f"f = h5py.File({os.path.join(path, 'shard-000000.h5')!r}, 'r')\n"
        "print(f['emb'].compression, f['text/data'][:].tobytes().decode())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["gzip", "t0t1t2t3t4"]


def test_mpio_only_with_mpi_build(tmp_path):
    import h5py

    if h5py.get_config().mpi:
        pytest.skip("this h5py has MPI; the guard applies to builds without it")
    with pytest.raises(CapabilityError, match=r"^driver='mpio' needs h5py built with MPI"):
        hpcio.open_writer(tmp_path / "m", format="hdf5", driver="mpio")


def test_wrong_layout(tmp_path):
    import h5py

    os.makedirs(tmp_path / "w")
    foreign = tmp_path / "w" / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(SchemaError, match=rf"^HDF5 file has no 'hpcio' layout attribute .*\({foreign}\)$"):
        hpcio.open(tmp_path / "w", format="hdf5")
    path = write(tmp_path / "h", [sample(i) for i in range(4)])
    shard = os.path.join(path, "shard-000000.h5")
    with h5py.File(shard, "a") as f:
        del f["emb"]
        f["emb"] = np.zeros((4, 3))
    with pytest.raises(SchemaError, match=(
            r"^field 'emb': expected a dataset of shape \(4, 2, 3\) and dtype <f8, found \(4, 3\) <f8 "
            rf"\({shard}\)$")):
        hpcio.open(path)
