"""MDS interop with mldataforge (Python 3.12 environment, run in a subprocess).

mldataforge writes ``sample::zstd`` -> hpcio reads it (and writes the same records); hpcio
writes ``sample::zstd`` -> mldataforge's RAM and bulk readers read it.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "formats"))
from mds_helpers import FIXTURES, load_generators  # noqa: E402

import hpcio  # noqa: E402

pytestmark = [
    pytest.mark.interop,
    pytest.mark.filterwarnings("ignore:compression='sample::"),
]
gen = load_generators()
N = 40

WRITE = """
import sys
sys.path.insert(0, sys.argv[2])
from make_fixtures import mldataforge_sample
from mldataforge.mds import MDSSampleWriter
from mldataforge.utils import _infer_mds_encoding
samples = [mldataforge_sample(i) for i in range(int(sys.argv[3]))]
columns = {k: _infer_mds_encoding(v) for k, v in samples[0].items()}
with MDSSampleWriter(out=sys.argv[1], columns=columns, compression="sample::zstd",
                     hashes=["sha1", "xxh64"], size_limit=2000) as w:
    for s in samples:
        w.write(s)
"""

READ = """
import base64, json, sys
import numpy as np
from mldataforge.mds import MDSBulkDatasetReader, MDSRAMDatasetReader
def plain(v):
    if isinstance(v, bytes):
        return {"b64": base64.b64encode(v).decode()}
    if isinstance(v, np.ndarray):
        return {"dtype": v.dtype.name, "b64": base64.b64encode(v.tobytes()).decode()}
    if isinstance(v, np.generic):
        return {"dtype": v.dtype.name, "b64": base64.b64encode(v.tobytes()).decode()}
    return v
ram = MDSRAMDatasetReader([sys.argv[1]], split=None)
bulk = MDSBulkDatasetReader([sys.argv[1]], split=None)
out = {
    "ram": [{k: plain(v) for k, v in ram[i].items()} for i in range(len(ram))],
    "bulk": [{k: plain(v) for k, v in s.items()} for s in bulk],
}
print(json.dumps(out))
"""


def run(interop_python, code, *args):
    proc = subprocess.run([interop_python, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def records(path):
    """Every (decompressed) record of every shard, in order."""
    from hpcio._core import _codecs

    out = []
    for shard in json.load(open(f"{path}/index.json"))["shards"]:
        data = open(f"{path}/{shard['raw_data']['basename']}", "rb").read()
        n = struct.unpack_from("<I", data)[0]
        offsets = struct.unpack_from(f"<{n + 1}I", data, 4)
        out += [_codecs.zstd_decompress(data[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
    return out


def test_mldataforge_written_read_by_hpcio(tmp_path, interop_python):
    theirs = tmp_path / "theirs"
    run(interop_python, WRITE, theirs, FIXTURES, N)
    samples = [gen.mldataforge_sample(i) for i in range(N)]
    ds = hpcio.open(theirs)
    assert len(ds.reader.shards) >= 3
    for source in (list(ds), ds.get_batch(np.arange(N)), [ds[i] for i in range(N)]):
        for got, want in zip(source, samples):
            assert got["text"] == want["text"] and got["id"] == want["id"] and got["blob"] == want["blob"]
            assert got["flag"] == int(want["flag"]) and got["meta"] == want["meta"]
            assert got["score"] == want["score"] and type(got["small"]) is np.uint16
            np.testing.assert_array_equal(got["vec"], want["vec"])
    # hpcio writes the same records for the same input (compare them decompressed)
    ours = tmp_path / "ours"
    with hpcio.open_writer(ours, format="mds", columns=ds.reader.columns, compression="sample::zstd",
                           hashes=["sha1", "xxh64"], size_limit=2000, frame_checksums=False) as w:
        for s in samples:
            w.write(s)
    assert records(ours) == records(theirs)
    a, b = json.load(open(ours / "index.json")), json.load(open(theirs / "index.json"))
    assert [s["samples"] for s in a["shards"]] == [s["samples"] for s in b["shards"]]
    assert [s["raw_data"]["bytes"] for s in a["shards"]] == [s["raw_data"]["bytes"] for s in b["shards"]]


def test_hpcio_written_read_by_mldataforge(tmp_path, interop_python):
    samples = [gen.mldataforge_sample(i) for i in range(N)]
    path = tmp_path / "ours"
    with hpcio.open_writer(path, format="mds", compression="sample::zstd", size_limit=2000) as w:
        for s in samples:
            w.write(s)
    assert len(hpcio.open(path).reader.shards) >= 3
    out = json.loads(run(interop_python, READ, path))
    for reader in ("ram", "bulk"):
        got = out[reader]
        assert len(got) == N, reader
        for g, s in zip(got, samples):
            assert g["text"] == s["text"] and g["id"] == s["id"] and g["meta"] == s["meta"]
            assert g["flag"] == int(s["flag"])
            assert g["blob"]["b64"] == __import__("base64").b64encode(s["blob"]).decode()
            assert g["vec"]["dtype"] == "float32"
            assert np.frombuffer(__import__("base64").b64decode(g["vec"]["b64"]), np.float32).tolist() == s["vec"].tolist()


# mldataforge decodes through streaming's encoding table: loading hpcio's encodings from
# their file (this interpreter lacks hpcio's compiled core) lets it read list[bytes].
REGISTER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("hpcio_streaming_encodings", sys.argv[-1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.register()
"""
ENCODINGS_PY = os.path.join(os.path.dirname(hpcio.__file__), "formats", "mds", "streaming_encodings.py")
IMAGES = [[bytes([i, j]) * (100 * j + i) for j in range(i % 5)] or [b""] for i in range(N)]

WRITE_LISTS = REGISTER + """
from mldataforge.mds import MDSSampleWriter
with MDSSampleWriter(out=sys.argv[1], columns={"id": "int", "images": "list[bytes]"},
                     compression="sample::zstd", size_limit=2000) as w:
    for i in range(int(sys.argv[2])):
        w.write({"id": i, "images": [bytes([i, j]) * (100 * j + i) for j in range(i % 5)] or [b""]})
"""


def test_list_of_bytes_read_by_mldataforge(tmp_path, interop_python):
    path = tmp_path / "ours"
    with hpcio.open_writer(path, format="mds", compression="sample::zstd", size_limit=2000) as w:
        for i, images in enumerate(IMAGES):
            w.write({"id": i, "images": images})
    assert hpcio.open(path).reader.columns["images"] == "list[bytes]"
    read = READ.replace("import base64, json, sys", "import base64, json, sys\n" + REGISTER).replace(
        "if isinstance(v, bytes):", "if isinstance(v, list):\n        return [plain(x) for x in v]\n    if isinstance(v, bytes):")
    out = json.loads(run(interop_python, read, path, ENCODINGS_PY))
    b64 = __import__("base64").b64encode
    for reader in ("ram", "bulk"):
        assert [g["images"] for g in out[reader]] == [[{"b64": b64(x).decode()} for x in s] for s in IMAGES], reader


# streaming in the interop environment, hpcio's encodings registered from their file
STREAMING_READ = REGISTER + """
import base64, json
from streaming import StreamingDataset
def plain(v):
    if isinstance(v, bytes):
        return {"b64": base64.b64encode(v).decode()}
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v
ds = StreamingDataset(local=sys.argv[1], remote=None, shuffle=False, batch_size=1)
print(json.dumps([plain(ds[i]) for i in range(ds.num_samples)]))
"""


def _b64_leaves(value):
    if isinstance(value, bytes):
        return {"b64": __import__("base64").b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: _b64_leaves(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_b64_leaves(v) for v in value]
    return value


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_dict_of_bytes_read_by_streaming_in_its_environment(tmp_path, interop_python, compression):
    samples = [{"id": i, "meta": {"thumb": bytes([i, 255]) * (30 * i + 1), "caption": f"c{i}",
                                  "crops": [images[0] if images else b"", {"mask": bytes([i])}]},
                "images": images} for i, images in enumerate(IMAGES)]
    path = tmp_path / "ours"
    with hpcio.open_writer(path, format="mds", compression=compression, size_limit=4000) as w:
        for s in samples:
            w.write(s)
    assert hpcio.open(path).reader.columns == {"id": "int", "images": "list[bytes]", "meta": "dict[bytes]"}
    out = json.loads(run(interop_python, STREAMING_READ, path, ENCODINGS_PY))
    assert out == [_b64_leaves(s) for s in samples]


def test_list_of_bytes_written_by_mldataforge(tmp_path, interop_python):
    theirs = tmp_path / "theirs"
    run(interop_python, WRITE_LISTS, theirs, N, ENCODINGS_PY)
    ds = hpcio.open(theirs)
    assert [s["images"] for s in ds] == IMAGES
    assert all(type(x) is bytes for s in ds for x in s["images"])
