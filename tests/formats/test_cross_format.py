"""Round trips between every pair of formats: byte-exact for bytes, str, int, float,
JSON and ndarray fields; the libraries a format imports on first use."""

import itertools
import subprocess
import sys

import numpy as np
import pytest

import hpcio
from hpcio.testing import assert_sample_equal

FORMATS = ["webdataset", "zarr", "hdf5", "parquet", "msgpack", "imagefolder"]


def sample(i):
    rng = np.random.default_rng(i)
    return {
        "blob": rng.integers(0, 256, size=int(rng.integers(0, 50)), dtype=np.uint8).tobytes(),
        "text": f"sample {i} ✓" * (i % 3),
        "count": (i - 5) * 1_000_003,
        "score": [0.1 * i, 1e300, -2.5e-310, 1 / 3][i % 4],
        "meta": {"i": i, "tags": ["a", None, True, 1.5], "nested": {"k": [i, {"x": False}]}},
        "emb": rng.standard_normal((2, 3)).astype(np.float32),
        "label": "all",
    }


SAMPLES = [sample(i) for i in range(12)]


def write(path, fmt, samples):
    with hpcio.open_writer(path, format=fmt) as w:
        for s in samples:
            w.write(s)
    return path


@pytest.mark.parametrize("src,dst", list(itertools.product(FORMATS, FORMATS)))
def test_round_trip(tmp_path, src, dst):
    first = hpcio.open(write(tmp_path / "a", src, SAMPLES), format=src)
    second = hpcio.open(write(tmp_path / "b", dst, list(first)), format=dst)
    assert len(second) == len(SAMPLES)
    for i, got in enumerate(second):
        assert_sample_equal(got, SAMPLES[i], f"{src} -> {dst}, sample {i}")
        assert type(got["count"]) is int and type(got["score"]) is float
        assert got["emb"].dtype == np.float32


@pytest.mark.parametrize("fmt, module", [("parquet", "pyarrow.parquet"), ("zarr", "zarr"), ("hdf5", "h5py")])
def test_load_libraries_imports_what_the_format_would_import_on_first_use(fmt, module):
    script = (
        "import sys; from hpcio import registry; registry.get_format(sys.argv[1]); "
        "before = sys.argv[2] in sys.modules; registry.load_libraries([sys.argv[1], 'mds']); "
        "print(before, sys.argv[2] in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script, fmt, module], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
