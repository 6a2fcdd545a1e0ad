"""MDS interop with mosaicml-streaming (installed in the main environment).

hpcio-written datasets are read by a real ``StreamingDataset`` (on a copy in tmp: it
writes decompressed shards and lock files), and streaming-written datasets (every
encoding, every shard compression) are read by hpcio.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "formats"))
from mds_helpers import load_generators  # noqa: E402

import hpcio  # noqa: E402

gen = load_generators()
pytestmark = pytest.mark.filterwarnings("ignore:compression='sample::", "ignore::DeprecationWarning")


def streaming_read(path, *, copy_to):
    """All samples of ``path`` through a real StreamingDataset, in index order."""
    from streaming import StreamingDataset

    local = shutil.copytree(path, copy_to)
    ds = StreamingDataset(local=local, remote=None, shuffle=False, batch_size=1,
                          allow_unsafe_types=True)
    return [ds[i] for i in range(ds.num_samples)]


def _pil_bytes(img):
    return np.asarray(img).tobytes()


@pytest.mark.parametrize("compression", [None, "zstd", "zstd:7", "gz", "bz2", "br", "snappy"])
def test_hpcio_written_read_by_streaming(tmp_path, compression):
    samples = [gen.all_encodings_sample(i) for i in range(8)]
    path = str(tmp_path / "ds")
    with hpcio.open_writer(path, format="mds", columns=gen.ALL_COLUMNS, compression=compression,
                           hashes=["sha1", "xxh64"], size_limit=10_000) as w:
        for s in samples:
            w.write(s)
    got = streaming_read(path, copy_to=tmp_path / "copy")
    assert len(got) == len(samples)
    for i, (g, s) in enumerate(zip(got, samples)):
        for name in ("bytes", "str", "int", "str_int", "str_float", "str_decimal", "json", "jpeg_array"):
            if name == "jpeg_array":
                assert len(g[name]) == len(s[name]), i
            else:
                assert g[name] == s[name], (i, name)
        for name in (c for c in gen.ALL_COLUMNS if c.startswith("n_")):
            assert g[name].tobytes() == s[name].tobytes(), (i, name)
        for name in ("nd", "nd_dtype", "nd_fixed"):
            np.testing.assert_array_equal(g[name], s[name])
        assert _pil_bytes(g["png"]) == _pil_bytes(s["png"])
        assert _pil_bytes(g["pil"]) == _pil_bytes(s["pil"])
        assert [_pil_bytes(x) for x in g["list_png"]] == [_pil_bytes(x) for x in s["list_png"]]


def test_sample_zstd_needs_the_drop_in_reader(tmp_path):
    """Stock streaming deletes a sample-compressed shard; the registered reader reads it."""
    from streaming import StreamingDataset
    from streaming.base.format import _readers

    samples = [{"id": i, "text": f"text {i} " * 30, "blob": bytes([i]) * i} for i in range(40)]
    path = str(tmp_path / "ds")
    with hpcio.open_writer(path, format="mds", compression="sample::zstd", size_limit=2000) as w:
        for s in samples:
            w.write(s)
    stock = _readers["mds"]
    try:
        victim = shutil.copytree(path, tmp_path / "stock")
        with pytest.raises(Exception):  # noqa: B017 - whatever stock streaming raises
            StreamingDataset(local=str(victim), remote=None, batch_size=1)[0]
        assert sorted(os.listdir(victim)) == ["index.hpcio", "index.json"], \
            "stock streaming was expected to evict the shards"

        from hpcio.formats.mds import register_streaming_reader

        register_streaming_reader()
        got = streaming_read(path, copy_to=tmp_path / "dropin")
        assert got == samples
        assert sorted(os.listdir(tmp_path / "dropin")) == sorted(os.listdir(path))
    finally:
        _readers["mds"] = stock


@pytest.mark.parametrize("compression", [None, "zstd", "gz", "bz2", "br", "snappy", "zstd:9"])
def test_streaming_written_read_by_hpcio(tmp_path, compression):
    from streaming import MDSWriter

    samples = [gen.all_encodings_sample(i) for i in range(6)]
    path = str(tmp_path / "ds")
    with MDSWriter(out=path, columns=gen.ALL_COLUMNS, compression=compression, size_limit=9_000,
                   hashes=["xxh64"]) as w:
        for s in samples:
            w.write(s)
    oracle = streaming_read(path, copy_to=tmp_path / "oracle")
    ds = hpcio.open(path, validate_hashes=True)
    assert len(ds.reader.shards) > 1
    for source in (list(ds), ds.get_batch(np.arange(len(samples))[::-1])[::-1]):
        for i, (g, o) in enumerate(zip(source, oracle)):
            for name, encoding in gen.ALL_COLUMNS.items():
                if encoding in ("jpeg", "png", "pil"):
                    assert _pil_bytes(hpcio.formats.mds.encodings.column_codec(encoding)
                                      .decode_one(memoryview(g[name]), True)) == _pil_bytes(o[name])
                elif encoding.startswith("list[") or encoding.startswith("jpeg"):
                    assert len(g[name]) == len(o[name])
                elif encoding.startswith("ndarray"):
                    np.testing.assert_array_equal(g[name], o[name])
                    assert g[name].dtype == o[name].dtype
                elif encoding in gen.ALL_COLUMNS.values() and name.startswith("n_"):
                    assert type(g[name]) is type(o[name]) and g[name].tobytes() == o[name].tobytes()
                else:
                    assert g[name] == o[name] and type(g[name]) is type(o[name]), (i, name)


def test_json_integers_past_64_bits_both_ways(tmp_path):
    # orjson would read these as floats; streaming (json.loads) keeps the ints
    from streaming import MDSWriter

    wide = [2**64, -(2**63) - 1, 10**40]
    samples = [{"id": i, "meta": {"big": v, "list": [v, 1.5]}} for i, v in enumerate(wide)]
    columns = {"id": "int", "meta": "json"}
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    with hpcio.open_writer(ours, format="mds", columns=columns) as w:
        for s in samples:
            w.write(s)
    with MDSWriter(out=theirs, columns=columns) as w:
        for s in samples:
            w.write(s)
    for got in streaming_read(ours, copy_to=tmp_path / "copy"):
        want = samples[got["id"]]["meta"]
        assert got["meta"] == want and type(got["meta"]["big"]) is int
    ds = hpcio.open(theirs)
    order = np.arange(len(samples))[::-1]
    for got in (list(ds), ds.get_batch(order)[::-1], ds.get_columns(order)["meta"].to_pylist()[::-1]):
        metas = [g.get("meta", g) for g in got]  # samples, or the column's values
        assert metas == [s["meta"] for s in samples]
        assert all(type(m["big"]) is int and type(m["list"][0]) is int for m in metas)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_merged_index_read_as_streaming_reads_it(tmp_path, compression):
    """streaming's own merge_index names shards ``0/shard.00000.mds``; hpcio follows them."""
    from streaming import MDSWriter
    from streaming.base.util import merge_index

    root = tmp_path / "merged"
    for part in range(3):
        with MDSWriter(out=str(root / str(part)), columns={"id": "int", "text": "str"},
                       compression=compression, size_limit=300) as w:
            for i in range(12):
                w.write({"id": part * 12 + i, "text": f"sample {part * 12 + i} " * 4})
    merge_index(str(root), keep_local=True)
    theirs = streaming_read(str(root), copy_to=tmp_path / "copy")
    ds = hpcio.open(str(root), cache_dir=str(tmp_path / "cache"))
    ours = [dict(s) for s in ds]
    assert [s["id"] for s in ours] == list(range(36))
    assert ours == [{"id": s["id"], "text": s["text"]} for s in theirs]
    assert [dict(s) for s in ds.get_batch(np.arange(36)[::-1])] == ours[::-1]


@pytest.mark.parametrize("compression", ["zstd", "zstd:1", "zstd:7"])
def test_zstd_shards_match_streaming_as_documented(tmp_path, compression):
    """Byte-identical below zstd's multi-thread job size; the same raw bytes above it."""
    import zstandard
    from streaming import MDSWriter

    rng = np.random.default_rng(0)
    samples = [{"id": i, "arr": rng.integers(0, 50, size=(64, 1024)).astype(np.int64)} for i in range(24)]
    columns = {"id": "int", "arr": "ndarray:int64:64,1024"}
    for size_limit in (1 << 20, 1 << 24):
        ours, theirs = tmp_path / f"ours{size_limit}", tmp_path / f"theirs{size_limit}"
        with MDSWriter(out=str(theirs), columns=columns, compression=compression, size_limit=size_limit) as w:
            for s in samples:
                w.write(s)
        with hpcio.open_writer(ours, format="mds", columns=columns, compression=compression,
                               size_limit=size_limit, hashes=[]) as w:  # streaming's default
            for s in samples:
                w.write(s)
        names = sorted(os.listdir(theirs))
        assert sorted(os.listdir(ours)) == sorted([*names, "index.hpcio"])  # and the compact index
        for name in (n for n in names if n.endswith(".zstd")):
            a, b = (ours / name).read_bytes(), (theirs / name).read_bytes()
            assert zstandard.ZstdDecompressor().decompress(a) == zstandard.ZstdDecompressor().decompress(b)
            if size_limit <= 1 << 20:
                assert a == b, name
        ds = hpcio.open(theirs)
        assert all(np.array_equal(ds[i]["arr"], s["arr"]) for i, s in enumerate(samples))


# --- list[bytes], hpcio's extension encoding, registered with streaming ------------------
@pytest.fixture
def registered():
    """hpcio's reader and encodings registered with streaming for the test, put back after."""
    from streaming.base.format import _readers
    from streaming.base.format.mds import encodings

    stock_reader, stock_encodings = _readers["mds"], dict(encodings._encodings)
    from hpcio.formats.mds import register_streaming_reader

    register_streaming_reader()
    yield
    _readers["mds"] = stock_reader
    encodings._encodings.clear()
    encodings._encodings.update(stock_encodings)


IMAGE_SAMPLES = [{"id": i, "images": [bytes([i, j]) * (50 * j + i) for j in range(i % 5)]} for i in range(1, 24)]


def written_by_hpcio(tmp_path, samples: list, compression) -> str:
    path = str(tmp_path / "ds")
    with hpcio.open_writer(path, format="mds", compression=compression, size_limit=3000) as w:
        for s in samples:
            w.write(s)
    return path


@pytest.mark.interop
@pytest.mark.parametrize("compression", [None, "zstd", "sample::zstd"])
def test_list_of_bytes_read_by_streaming(tmp_path, registered, compression):
    path = written_by_hpcio(tmp_path, IMAGE_SAMPLES, compression)
    assert hpcio.open(path).reader.columns["images"] == "list[bytes]"
    got = streaming_read(path, copy_to=tmp_path / "copy")
    assert got == IMAGE_SAMPLES
    assert all(type(x) is bytes for g in got for x in g["images"])


def check_written_by_streaming(tmp_path, columns: dict, samples: list) -> None:
    """streaming's MDSWriter writes ``samples`` in ``columns``; hpcio reads them back and
    writes byte-identical shards for the same samples."""
    from streaming import MDSWriter

    path = str(tmp_path / "ds")
    with MDSWriter(out=path, columns=columns, size_limit=3000) as w:
        for s in samples:
            w.write(s)
    ds = hpcio.open(path)
    assert len(ds.reader.shards) > 1
    assert list(ds) == samples
    assert ds.get_batch(np.arange(len(samples))[::-1])[::-1] == samples
    ours = str(tmp_path / "ours")
    with hpcio.open_writer(ours, format="mds", columns=columns, size_limit=3000,
                           hashes=[]) as w:  # streaming writes no hashes by default
        for s in samples:
            w.write(s)
    for name in sorted(os.listdir(path)):
        if name.endswith(".mds"):
            with open(os.path.join(path, name), "rb") as a, open(os.path.join(ours, name), "rb") as b:
                assert a.read() == b.read(), name


@pytest.mark.interop
def test_list_of_bytes_written_by_streaming(tmp_path, registered):
    check_written_by_streaming(tmp_path, {"id": "int", "images": "list[bytes]"}, IMAGE_SAMPLES)


# --- dict[bytes], hpcio's extension encoding for mappings holding bytes ------------------
META_SAMPLES = [{"id": i, "meta": {"thumb": bytes([i, 255]) * (40 * i + 1), "caption": f"c{i}", "size": [3, i],
                                   "crops": [bytes([j]) * j for j in range(i % 4)]}} for i in range(1, 24)]


@pytest.mark.interop
@pytest.mark.parametrize("compression", [None, "zstd", "sample::zstd"])
def test_dict_of_bytes_read_by_streaming(tmp_path, registered, compression):
    path = written_by_hpcio(tmp_path, META_SAMPLES, compression)
    ds = hpcio.open(path)
    assert ds.reader.columns["meta"] == "dict[bytes]" and len(ds.reader.shards) > 1
    got = streaming_read(path, copy_to=tmp_path / "copy")
    assert got == META_SAMPLES
    assert all(type(g["meta"]["thumb"]) is bytes and all(type(c) is bytes for c in g["meta"]["crops"]) for g in got)


@pytest.mark.interop
def test_dict_of_bytes_written_by_streaming(tmp_path, registered):
    check_written_by_streaming(tmp_path, {"id": "int", "meta": "dict[bytes]"}, META_SAMPLES)
