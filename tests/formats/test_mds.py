"""MDS: conformance, byte-identity with streaming's writer, golden fixtures, bad input, CLI."""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import shutil
import struct
import warnings
from decimal import Decimal
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from mds_helpers import (
    FIXTURES,
    STREAMING_FIXTURES,
    assert_sample,
    expected,
    load_generators,
    tree_bytes,
)

import hpcio
from hpcio.distributed import GlobalOrder
from hpcio.errors import (
    CorruptShardError,
    DecodeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    SchemaError,
    ShardNotFoundError,
    TruncatedShardError,
    UnsupportedValueError,
)
from hpcio.formats import mds
from hpcio.formats.mds import columns as mds_columns, shards as mds_shards, writer as mds_writer
from hpcio.formats.mds.batches import locate
from hpcio.formats.mds.cache import ReadMode
from hpcio.formats.mds.compression import DEFAULT_HASHES
from hpcio.testing import FormatTests

gen = load_generators()


# --- conformance ------------------------------------------------------------------------
class TestMDSNone(FormatTests):
    format_name = "mds"
    writer_options = {"size_limit": 4096}


class TestMDSZstd(FormatTests):
    format_name = "mds"
    writer_options = {"compression": "zstd", "size_limit": 4096, "hashes": ["xxh64"]}


@pytest.mark.filterwarnings("ignore:compression='sample::")
class TestMDSSampleZstd(FormatTests):
    format_name = "mds"
    writer_options = {"compression": "sample::zstd", "size_limit": 4096}


@pytest.mark.filterwarnings("ignore:compression='sample::")
class TestMDSSampleBlosc2(FormatTests):
    format_name = "mds"
    writer_options = {"compression": "sample::blosc2"}


pytestmark = pytest.mark.filterwarnings("ignore:compression='sample::")


def write(path, samples, **options):
    with hpcio.open_writer(path, format="mds", **options) as w:
        for s in samples:
            w.write(s)
    return str(path)


def read_file(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def comparable(files: dict) -> dict:
    """``files`` (name: bytes) with the header bytes of ``index.hpcio`` that depend on
    when index.json was written (its mtime at 64 and the digest over it at 56) zeroed."""
    out = dict(files)
    for name, data in files.items():
        if os.path.basename(name) == "index.hpcio" and len(data) >= 72:
            out[name] = data[:56] + bytes(16) + data[72:]
    return out


# --- byte identity with streaming's MDSWriter ------------------------------------------
def write_streaming(path, samples, columns, **options):
    """streaming's writer, recording the hashes hpcio's writer records by default."""
    from streaming import MDSWriter

    options.setdefault("hashes", list(DEFAULT_HASHES))
    with MDSWriter(out=str(path), columns=columns, **options) as w:
        for s in samples:
            w.write(s)
    return str(path)


def zstd_versions_match() -> bool:
    import zstd

    from hpcio._core import _codecs

    return _codecs.build_info()["zstd"] == zstd.ZSTD_version()


@pytest.mark.parametrize("compression", [None, "zstd", "zstd:7", "bz2", "br", "snappy", "gz"])
def test_writer_bytes_equal_streaming(tmp_path, compression):
    samples = [gen.all_encodings_sample(i) for i in range(10)]
    options = dict(compression=compression, hashes=["sha1", "xxh64"], size_limit=12_000)
    ours = write(tmp_path / "ours", samples, columns=gen.ALL_COLUMNS, **options)
    theirs = write_streaming(tmp_path / "theirs", samples, gen.ALL_COLUMNS, **options)
    index_ours, index_theirs = read_file(f"{ours}/index.json"), read_file(f"{theirs}/index.json")
    shards = json.loads(index_theirs)["shards"]
    assert len(shards) >= 3, "the size limit must force several shards"
    # the same files, and the compact index beside index.json
    assert sorted(os.listdir(ours)) == sorted([*os.listdir(theirs), "index.hpcio"])
    compressed_equal = compression in (None, "bz2", "br", "snappy") or (
        compression.startswith("zstd") and zstd_versions_match()
    )
    if compressed_equal:
        assert index_ours == index_theirs
        for name in os.listdir(theirs):
            assert read_file(f"{ours}/{name}") == read_file(f"{theirs}/{name}"), name
    else:
        # gzip headers carry streaming's write time; compare everything but the zip files.
        mine = json.loads(index_ours)["shards"]
        for a, b in zip(mine, shards):
            assert {**a, "zip_data": None} == {**b, "zip_data": None}
            raw_a = hpcio.formats.mds.parse_compression(compression).decompress(
                read_file(f"{ours}/{a['zip_data']['basename']}"), 1 << 30)
            raw_b = hpcio.formats.mds.parse_compression(compression).decompress(
                read_file(f"{theirs}/{b['zip_data']['basename']}"), 1 << 30)
            assert raw_a == raw_b


def test_shard_written_from_pieces_survives_short_writes(tmp_path, monkeypatch):
    # 3,000 records: more pieces than one writev takes (IOV_MAX); hashes over the pieces
    samples = [{"id": i, "text": "x" * (i % 50)} for i in range(3000)]
    columns = {"id": "int", "text": "str"}
    plain = write(tmp_path / "plain", samples, columns=columns, hashes=["sha1", "xxh64"])
    streamed = write_streaming(tmp_path / "streaming", samples, columns, hashes=["sha1", "xxh64"])
    assert read_file(f"{plain}/shard.00000.mds") == read_file(f"{streamed}/shard.00000.mds")
    assert read_file(f"{plain}/index.json") == read_file(f"{streamed}/index.json")
    real_writev, calls = os.writev, []

    def short_writev(fd, buffers):  # the kernel may write less than asked
        calls.append(len(buffers))
        return real_writev(fd, [bytes(buffers[0])[:3]])

    monkeypatch.setattr(os, "writev", short_writev)
    short = write(tmp_path / "short", samples, columns=columns, hashes=["sha1", "xxh64"])
    assert calls and max(calls) <= 1024 and len(calls) >= 3
    assert read_file(f"{short}/shard.00000.mds") == read_file(f"{plain}/shard.00000.mds")
    assert read_file(f"{short}/index.json") == read_file(f"{plain}/index.json")


def test_sample_zstd_records_equal_streaming_compress(tmp_path):
    """Without frame checksums, records are compressed exactly as mldataforge does it:
    streaming's ``compress``."""
    from streaming.base.compression import compress, decompress

    samples = [gen.mldataforge_sample(i) for i in range(12)]
    plain = write(tmp_path / "plain", samples)
    packed = write(tmp_path / "packed", samples, compression="sample::zstd", frame_checksums=False)
    raw = read_file(f"{plain}/shard.00000.mds")
    zipped = read_file(f"{packed}/shard.00000.mds")
    n = struct.unpack_from("<I", raw)[0]
    off_raw = struct.unpack_from(f"<{n + 1}I", raw, 4)
    off_zip = struct.unpack_from(f"<{n + 1}I", zipped, 4)
    for i in range(n):
        record = raw[off_raw[i] : off_raw[i + 1]]
        stored = zipped[off_zip[i] : off_zip[i + 1]]
        assert decompress("zstd", stored) == record
        if zstd_versions_match():
            assert stored == compress("zstd", record)
    config = json.loads(zipped[8 + 4 * n : off_zip[0]])
    assert config["compression"] == "sample::zstd"
    assert json.load(open(f"{packed}/index.json"))["shards"][0]["zip_data"] is None


def test_sample_blosc2_round_trip_and_index(tmp_path):
    samples = [gen.mldataforge_sample(i) for i in range(30)]
    path = write(tmp_path / "b", samples, compression="sample::blosc2:7", size_limit=2000)
    index = json.load(open(f"{path}/index.json"))
    assert {s["compression"] for s in index["shards"]} == {"sample::blosc2:7"}
    ds = hpcio.open(path)
    for i, got in enumerate(ds):
        assert got["text"] == samples[i]["text"]
        assert got["vec"].tobytes() == samples[i]["vec"].tobytes()


def test_sample_compression_warns_once(tmp_path):
    mds_writer._warned_sample_compression = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write(tmp_path / "a", [{"x": 1}], compression="sample::zstd")
        write(tmp_path / "b", [{"x": 1}], compression="sample::zstd")
    texts = [str(w.message) for w in caught]
    assert len(texts) == 1
    assert "stock mosaicml-streaming DELETES them" in texts[0]
    assert "register_streaming_reader()" in texts[0]


# --- every encoding round trips ---------------------------------------------------------
def test_every_encoding_round_trips_byte_exact(tmp_path):
    samples = [gen.all_encodings_sample(i) for i in range(6)]
    first = write(tmp_path / "first", samples, columns=gen.ALL_COLUMNS)
    again = write(tmp_path / "again", list(hpcio.open(first)), columns=gen.ALL_COLUMNS)
    for name in os.listdir(first):
        assert comparable({name: read_file(f"{first}/{name}")}) == comparable({name: read_file(f"{again}/{name}")})


def test_values_and_types(tmp_path):
    samples = [gen.all_encodings_sample(i) for i in range(3)]
    ds = hpcio.open(write(tmp_path / "d", samples, columns=gen.ALL_COLUMNS))
    got = ds[2]
    src = samples[2]
    assert type(got["int"]) is int and got["int"] == src["int"]
    assert type(got["n_float32"]) is np.float32 and got["n_float32"] == src["n_float32"]
    assert type(got["str_decimal"]) is Decimal and got["str_decimal"] == src["str_decimal"]
    assert got["str_int"] == 10**20 + 2 and got["str_float"] == 2 / 7
    assert got["json"] == src["json"]
    assert got["nd_fixed"].shape == (2, 3) and got["nd_fixed"].flags.writeable
    np.testing.assert_array_equal(got["nd"], src["nd"])
    assert isinstance(got["jpeg"], bytes) and got["jpeg"][:2] == b"\xff\xd8"
    assert isinstance(got["list_png"][0], bytes) and got["list_png"][0][:4] == b"\x89PNG"
    assert got["jpeg_array"] == src["jpeg_array"]


def test_decode_images_gives_pil(tmp_path):
    from PIL import Image

    samples = [gen.all_encodings_sample(i) for i in range(2)]
    ds = hpcio.open(write(tmp_path / "d", samples, columns=gen.ALL_COLUMNS), decode_images=True)
    got = ds[1]
    for name in ("jpeg", "png", "pil"):
        assert isinstance(got[name], Image.Image), name
    assert np.array_equal(np.asarray(got["png"]), np.asarray(samples[1]["png"]))
    assert got["pil"].tobytes() == samples[1]["pil"].tobytes()
    assert [im.size for im in got["list_pil"]] == [im.size for im in samples[1]["list_pil"]]
    assert all(isinstance(im, Image.Image) for im in got["jpeg_array"])


# --- column inference and schema errors --------------------------------------------------
def test_columns_inferred_like_mldataforge(tmp_path):
    from io import BytesIO

    from PIL import Image

    png = Image.open(BytesIO(_png_bytes()))
    sample = {
        "s": "x", "i": 3, "b": True, "f": 0.5, "raw": b"\x00", "arr": np.zeros(2, np.int16),
        "u": np.uint16(4), "d": {"k": 1}, "l": [1, 2], "none": None, "empty": [], "img": png,
        "imgs": [png, png], "ja": [bytearray(b"\xff\xd8")],
    }
    with hpcio.open_writer(tmp_path / "d", format="mds") as w:
        w.write(sample)
        assert w.columns == {
            "s": "str", "i": "int", "b": "int", "f": "float64", "raw": "bytes", "arr": "ndarray",
            "u": "uint16", "d": "json", "l": "json", "none": "json", "empty": "json",
            "img": "png", "imgs": "list[png]", "ja": "jpeg_array",
        }


def _png_bytes() -> bytes:
    from io import BytesIO

    from PIL import Image

    out = BytesIO()
    Image.new("RGB", (2, 2)).save(out, format="PNG")
    return out.getvalue()


def test_later_sample_that_does_not_fit(tmp_path):
    with pytest.raises(SchemaError, match=r"^column 'n' \(int\) cannot store this value: expected int, got str \(sample 2\)$"):
        with hpcio.open_writer(tmp_path / "d", format="mds") as w:
            w.write({"n": 1, "t": "a"})
            w.write({"n": 2, "t": "b"})
            w.write({"n": "three", "t": "c"})
    assert not os.path.exists(tmp_path / "d")


def test_missing_and_extra_fields(tmp_path):
    path = tmp_path / "d"
    with pytest.raises(SchemaError, match=r"sample lacks column\(s\) \['t'\]; the columns are \['n', 't'\] \(.*/d, sample 1\)$"):
        with hpcio.open_writer(path, format="mds") as w:
            w.write({"n": 1, "t": "a"})
            w.write({"n": 2})
    with pytest.raises(SchemaError, match=r"sample has field\(s\) \['z'\] that are not columns"):
        with hpcio.open_writer(path, format="mds", columns={"n": "int"}) as w:
            w.write({"n": 2, "z": 0})


def test_fixed_size_mismatch_is_schema_error(tmp_path):
    with pytest.raises(SchemaError, match=r"column 'n' \(int\) cannot store this value: 3 bytes where the encoding takes exactly 8"):
        with hpcio.open_writer(tmp_path / "d", format="mds", columns={"n": "int"}) as w:
            w.write({"n": b"abc"})


# --- pickle only on request --------------------------------------------------------------
def test_pkl_needs_opt_in_on_both_sides(tmp_path):
    with pytest.raises(UnsupportedValueError, match="column 'o' uses the pkl encoding"):
        hpcio.open_writer(tmp_path / "a", format="mds", columns={"o": "pkl"})
    with pytest.raises(UnsupportedValueError, match=r"cannot infer an MDS encoding for column 'o' from a set value"):
        with hpcio.open_writer(tmp_path / "b", format="mds") as w:
            w.write({"o": {1, 2}})
    path = write(tmp_path / "c", [{"o": {1, 2}}], allow_pickle=True)
    assert hpcio.open(path, allow_pickle=True).reader.columns == {"o": "pkl"}
    with pytest.raises(UnsupportedValueError, match=r"^column 'o' uses the pkl encoding; reading it unpickles"):
        hpcio.open(path)
    assert hpcio.open(path, allow_pickle=True)[0] == {"o": {1, 2}}


class CollectorWitness:
    """Unpickled inside a read: records whether the cyclic collector was running."""

    seen: ClassVar[list] = []

    def __init__(self, fail=False):
        self.fail = fail

    def __setstate__(self, state):
        import gc

        CollectorWitness.seen.append(gc.isenabled())
        if state["fail"]:
            raise ValueError("witness failed")
        self.__dict__.update(state)


@pytest.mark.parametrize("enabled", [True, False])
def test_batch_reads_pause_the_collector_and_leave_it_as_it_was(tmp_path, enabled, tuned):
    import gc

    path = write(tmp_path / "d", [{"o": CollectorWitness(fail=i == 3)} for i in range(4)],
                 allow_pickle=True)
    ds = hpcio.open(path, allow_pickle=True)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    CollectorWitness.seen = []
    try:
        assert len(ds.get_batch([0, 2, 1])) == 3
        assert len(ds.get_columns([1, 0])["o"]) == 2
        assert gc.isenabled() is enabled
        with pytest.raises(Exception, match="witness failed"):
            ds.get_batch([0, 3])
        assert gc.isenabled() is enabled
        assert ds[0]["o"].fail is False
    finally:
        (gc.enable if was else gc.disable)()
    # Batch reads unpickle with the collector paused; a single sample read does not pause it.
    *in_batches, single = CollectorWitness.seen
    assert len(in_batches) >= 7 and not any(in_batches) and single is enabled


def test_streaming_pkl_fixture():
    ds = hpcio.open(os.path.join(FIXTURES, "streaming-pkl"), allow_pickle=True)
    assert [s["obj"] for s in ds] == [{"pair": (i, str(i)), "set": {i}} for i in range(3)]


def test_pkl_image_lists_are_unpickled_by_the_compiled_kernel(tmp_path):
    """streaming's only list-of-binaries encoding, ``pkl``, is built by the sample kernel
    from the record's bytes (mapped or read with pread), equal to what was written; a value
    that does not unpickle is named by the general decoder, file, offset and sample."""
    import pickle

    import orjson

    from hpcio._core import _records

    samples = [{"images": [bytes([i]) * (300 + i)] * (1 + i % 3), "n": i} for i in range(6)]
    path = write_streaming(tmp_path / "s", samples, {"images": "pkl", "n": "int"})
    ds = hpcio.open(path, allow_pickle=True)
    layout = ds.reader._layout
    kinds = layout._direct_kinds([0, 1], False, False)
    assert kinds[layout.names.index("images")] == _records.KIND_PICKLE
    order = [4, 0, 5, 2, 3, 1]
    assert ds.get_batch(order) == [samples[i] for i in order]
    assert ds.get_columns(order)["images"] == [samples[i]["images"] for i in order]
    assert list(ds.shuffle(seed=3)) == [samples[i] for i in ds.shuffle(seed=3).indices]
    shard = os.path.join(path, "shard.00000.mds")
    sh, _lidx, starts, ends = ds.reader.cache.extents(0, np.arange(6))
    args = (starts.astype(np.int64), ends.astype(np.int64), layout._names_t, layout._sizes_t, kinds, (0, 1),
            orjson.loads)
    assert _records.mds_samples(read_file(shard), *args) == (samples, -1)
    fd = os.open(shard, os.O_RDONLY)
    try:
        assert _records.mds_samples_pread(fd, bytes(sh.size), *args) == (samples, -1)
    finally:
        os.close(fd)
    ds.close()

    data = bytearray(read_file(shard))
    value = pickle.dumps(samples[3]["images"])
    at = data.find(value)
    data[at + len(value) - 1] = 0  # the STOP opcode
    with open(shard, "wb") as f:
        f.write(data)
    assert _records.mds_samples(bytes(data), *args) == (None, 3)
    with hpcio.open(path, allow_pickle=True, validate_hashes=False) as ds:
        assert ds.get_batch([2])[0] == samples[2]
        for read in (ds.get_batch, ds.get_columns):
            with pytest.raises(DecodeError) as e:
                read([2, 3])
            assert str(e.value) == (f"column 'images' (pkl): cannot decode the value: invalid load key, '\\x00'. "
                                    f"({shard}, byte offset {at}, sample 3)")


def test_large_pkl_records_are_built_from_the_mappings_not_read_twice(tmp_path, monkeypatch):
    """A shuffled batch of large records holding ``pkl`` values, over several shards, is
    built record by record from the shards' mappings (mds_samples_files), not through pread
    and a read buffer; the kernel takes record j from ``wholes[file_of[j]]`` whatever the
    order, and reports a file number out of range as that record."""
    import orjson

    from hpcio._core import _records
    from hpcio.formats.mds import batches

    samples = [{"images": [bytes([i]) * (20_000 + i)] * (1 + i % 2), "n": i} for i in range(24)]
    path = write_streaming(tmp_path / "s", samples, {"images": "pkl", "n": "int"}, size_limit=120_000)
    order = np.random.default_rng(7).permutation(len(samples))

    def refuse(*_args):
        raise AssertionError("pkl records read with pread")

    monkeypatch.setattr(batches._records, "mds_samples_pread_files", refuse)
    with hpcio.open(path, allow_pickle=True) as ds:
        assert len(ds.reader.shards) >= 4 and all(sh.pread_values for sh in map(ds.reader.cache.get, range(4)))
        assert ds.get_batch(order) == [samples[i] for i in order]
        reader, layout = ds.reader, ds.reader._layout
        cum = np.asarray(reader._cum_list)
        shard_of = (np.searchsorted(cum, order, side="right") - 1).astype(np.int32)
        starts, ends = [], []
        for i, k in zip(order.tolist(), shard_of.tolist()):
            _sh, _lidx, lo, hi = reader.cache.extents(k, np.array([i - cum[k]]))
            starts.append(int(lo[0]))
            ends.append(int(hi[0]))
        wholes = [read_file(reader.cache.get(k).path) for k in range(len(reader.shards))]
        kinds = layout._direct_kinds([0, 1], False, False)
        args = [wholes, shard_of, np.array(starts, np.int64), np.array(ends, np.int64), layout._names_t,
                layout._sizes_t, kinds, (0, 1), orjson.loads]
        assert _records.mds_samples_files(*args) == ([samples[i] for i in order], -1)
        args[1] = np.concatenate([shard_of[:5], [len(wholes)], shard_of[6:]]).astype(np.int32)
        assert _records.mds_samples_files(*args) == (None, 5)
        args[1] = shard_of[:-1]
        with pytest.raises(hpcio.HpcioError, match="^mds_samples_files: 24 records, 23 file numbers$"):
            _records.mds_samples_files(*args)


# --- golden fixtures written by the reference libraries -------------------------------
@pytest.mark.parametrize("name", STREAMING_FIXTURES)
def test_streaming_fixture(name):
    want = expected("streaming")["samples"]
    path = os.path.join(FIXTURES, name)
    before = tree_bytes(path)
    with hpcio.open(path) as ds:
        assert len(ds) == len(want) and len(ds.reader.shards) == 4
        for i, got in enumerate(ds):
            assert_sample(got, want[i], f"{name} iter {i}")
        for i in (5, 0, 7, 3):
            assert_sample(ds[i], want[i], f"{name} ds[{i}]")
        perm = np.random.default_rng(1).permutation(len(want))
        for i, got in zip(perm, ds.get_batch(perm)):
            assert_sample(got, want[i], f"{name} batch {i}")
        assert ds.reader.read_field(np.array([6, 1]), "str") == ["sample 6 ", "sample 1 é✓"]
    assert mds.verify(path)["ok"]
    assert tree_bytes(path) == before, "reading wrote into the dataset"


def test_mldataforge_fixture():
    want = expected("mldataforge")
    path = os.path.join(FIXTURES, "mldataforge-sample-zstd")
    ds = hpcio.open(path)
    assert ds.reader.columns == want["columns"]
    rows = want["samples"]
    assert [s for s in ds] and len(ds) == len(rows)
    for i, got in enumerate(ds):
        assert_sample(got, rows[i], f"iter {i}")
    for i, got in zip(range(19, -1, -3), ds.get_batch(np.arange(19, -1, -3))):
        assert_sample(got, rows[i], f"batch {i}")
    assert mds.verify(path)["ok"]


def test_inspect_fixture():
    info = mds.inspect(os.path.join(FIXTURES, "streaming-zstd7"))
    assert info["samples"] == 8 and info["shards"] == 4
    assert info["details"]["compression"] == ["zstd:7"] and info["details"]["hashes"] == ["sha1", "xxh64"]
    assert info["fields"]["nd_fixed"] == "ndarray:float32:2,3"
    assert info["stored_bytes"] < info["details"]["raw_bytes"]


# --- readers ---------------------------------------------------------------------------
def many_shards(tmp_path, compression=None, n=300):
    samples = [{"id": i, "text": f"t{i:04d}" * (1 + i % 3)} for i in range(n)]
    return write(tmp_path / "m", samples, compression=compression, size_limit=400), samples


@pytest.mark.parametrize("compression", [None, "sample::zstd", "gz"])
def test_lru_bounds_open_shards(tmp_path, compression):
    path, samples = many_shards(tmp_path, compression)
    reader = mds.Reader(path, max_open=3, max_decompressed=2)
    assert len(reader.shards) > 20
    idx = np.random.default_rng(0).permutation(len(samples))
    for lo in range(0, len(idx), 50):
        got = reader.read_many(idx[lo : lo + 50])
        assert [g["id"] for g in got] == idx[lo : lo + 50].tolist()
        assert len(reader.cache.maps) <= 3 and len(reader.cache.mem) <= 2
    assert [reader.read(int(i))["text"] for i in idx[:20]] == [samples[i]["text"] for i in idx[:20]]
    reader.close()


def test_iter_range_and_select(tmp_path):
    path, samples = many_shards(tmp_path, "sample::zstd")
    ds = hpcio.open(path)
    assert [s["id"] for s in ds.reader.iter_range(37, 211)] == list(range(37, 211))
    assert list(ds.select(["text"]))[5] == {"text": samples[5]["text"]}
    by_text = ds.sort("text")
    assert [s["id"] for s in by_text][:3] == sorted(range(300), key=lambda i: samples[i]["text"])[:3]


def test_whole_shard_compressed_cache_dir(tmp_path):
    path, samples = many_shards(tmp_path, "zstd")
    before = tree_bytes(path)
    cache = tmp_path / "cache"
    ds = hpcio.open(path, cache_dir=cache)
    assert [s["id"] for s in ds.shuffle(seed=5)] == GlobalOrder(300, seed=5).tolist()
    assert tree_bytes(path) == before
    cached = os.listdir(cache)
    assert cached and all(name.endswith(".mds") for name in cached)
    ds.close()
    ds = hpcio.open(path, cache_dir=cache)  # reuses the decompressed files
    assert ds[299]["id"] == 299
    assert sorted(os.listdir(cache)) == sorted(cached)


def test_validate_hashes_on_open(tmp_path):
    path = write(tmp_path / "d", [{"x": i} for i in range(5)], hashes=["sha1", "xxh64"])
    shard = f"{path}/shard.00000.mds"
    data = bytearray(read_file(shard))
    data[-1] ^= 1
    open(shard, "wb").write(bytes(data))
    assert hpcio.open(path)[0] == {"x": 0}  # no validation by default
    with pytest.raises(CorruptShardError, match=r"^xxh64 mismatch: index.hpcio says [0-9a-f]{16}, the file hashes to [0-9a-f]{16} \(.*shard.00000.mds\)$"):
        hpcio.open(path, validate_hashes=True)[0]
    with pytest.raises(CorruptShardError, match="sha1 mismatch"):
        hpcio.open(path, validate_hashes="sha1")[0]


def test_unknown_hash_names(tmp_path):
    """An unknown algorithm is the caller's error when asked for, corruption when
    index.json names it; neither reaches a bare KeyError."""
    path = write(tmp_path / "d", [{"x": i} for i in range(3)])
    with pytest.raises(InvalidArgumentError, match=r"^validate_hashes='xxh4_64' is not a known hash \(known: .*xxh3_64"):
        hpcio.open(path, validate_hashes="xxh4_64")
    index = read_file(f"{path}/index.json").replace(b'"xxh3_64": "', b'"xxh4_64": "')
    open(f"{path}/index.json", "wb").write(index)
    with pytest.raises(CorruptShardError, match=r"^index.json names an unknown hash 'xxh4_64' \(.*shard.00000.mds\)$"):
        hpcio.open(path, validate_hashes=True)[0]
    report = hpcio.get_format("mds").verify(path)
    assert not report["ok"] and "unknown hash 'xxh4_64'" in report["errors"][0]["error"]


def test_empty_shard_from_streaming_rule(tmp_path):
    """A first record larger than size_limit flushes an empty shard, as streaming does."""
    samples = [{"b": b"x" * 500}, {"b": b"y"}]
    ours = write(tmp_path / "ours", samples, columns={"b": "bytes"}, size_limit=100)
    theirs = write_streaming(tmp_path / "theirs", samples, {"b": "bytes"}, size_limit=100)
    assert read_file(f"{ours}/index.json") == read_file(f"{theirs}/index.json")
    ds = hpcio.open(ours)
    assert [s["b"] for s in ds] == [b"x" * 500, b"y"]
    assert [s["b"] for s in ds.get_batch([1, 0])] == [b"y", b"x" * 500]


def test_negative_and_out_of_range_batch(tmp_path):
    path, _ = many_shards(tmp_path)
    ds = hpcio.open(path)
    assert ds.get_batch([-1])[0]["id"] == 299
    with pytest.raises(IndexOutOfRangeError, match=r"^sample id 300 out of range: the dataset has 300 samples \(.*/m, sample 300\)$"):
        ds.reader.read_many(np.array([3, 300]))


# --- bad input ----------------------------------------------------------------------------
@pytest.fixture
def small(tmp_path):
    return write(tmp_path / "small", [{"id": i, "t": f"v{i}"} for i in range(4)])


def edit_index(path, change):
    with open(f"{path}/index.json") as f:
        obj = json.load(f)
    change(obj)
    with open(f"{path}/index.json", "w") as f:
        json.dump(obj, f, sort_keys=True)


def test_missing_index(tmp_path):
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ShardNotFoundError, match=r"^no index.json: not an MDS dataset \(.*/empty/index.json\)$"):
        mds.Reader(tmp_path / "empty")


def test_malformed_index(small):
    open(f"{small}/index.json", "w").write('{"version": 2, "shards": [')
    with pytest.raises(CorruptShardError, match=r"^index.json is not valid JSON: Expecting value \(.*/index.json, byte offset 26\)$"):
        hpcio.open(small, format="mds")


def test_wrong_version(small):
    edit_index(small, lambda o: o.update(version=3))
    with pytest.raises(CorruptShardError, match=r"^index.json has version 3; MDS readers need version 2 \(.*index.json\)$"):
        hpcio.open(small, format="mds")
    edit_index(small, lambda o: (o.update(version=2), o["shards"][0].update(version=1)))
    with pytest.raises(CorruptShardError, match=r"^shard entry 0 of index.json: version 1; MDS readers need version 2"):
        hpcio.open(small, format="mds")


def test_unknown_encoding(small):
    edit_index(small, lambda o: o["shards"][0].update(column_encodings=["int", "utf16"]))
    with pytest.raises(CorruptShardError, match=r"^unknown MDS column encoding 'utf16' for column 't' \(.*index.json\)$"):
        hpcio.open(small)


def test_shard_shorter_than_offsets(small):
    shard = f"{small}/shard.00000.mds"
    data = read_file(shard)
    open(shard, "wb").write(data[:-3])
    size = len(data) - 3
    with pytest.raises(TruncatedShardError, match=rf"^shard is {size} bytes, index.hpcio says {size + 3} \(.*shard.00000.mds, byte offset {size}\)$"):
        hpcio.open(small)[0]
    # the same truncation with index.json agreeing: caught by the offset table check
    edit_index(small, lambda o: o["shards"][0]["raw_data"].update(bytes=size))
    with pytest.raises(TruncatedShardError, match=r"shard.00000.mds, byte offset 20, sample 3\)$"):
        hpcio.open(small)[0]


def test_offsets_not_increasing(small):
    shard = f"{small}/shard.00000.mds"
    data = bytearray(read_file(shard))
    offsets = struct.unpack_from("<5I", data, 4)
    struct.pack_into("<I", data, 4 + 4 * 2, offsets[1] - 1)  # offsets[2] < offsets[1]
    open(shard, "wb").write(bytes(data))
    with pytest.raises(CorruptShardError, match=r"shard.00000.mds, byte offset 12, sample 1\)$"):
        hpcio.open(small)[0]


def test_config_index_mismatch(small):
    edit_index(small, lambda o: o["shards"][0].update(column_names=["id", "u"]))
    with pytest.raises(CorruptShardError, match=r"^the shard's embedded config has column_names = \['id', 't'\]; index.json has \['id', 'u'\] \(.*shard.00000.mds, byte offset 24\)$"):
        hpcio.open(small)[0]


def test_samples_count_mismatch(small):
    edit_index(small, lambda o: o["shards"][0].update(samples=5))
    with pytest.raises(CorruptShardError, match=r"^shard header says 4 samples, index.json says 5 \(.*shard.00000.mds, byte offset 0\)$"):
        hpcio.open(small)[1]


def test_missing_shard_file(small):
    os.remove(f"{small}/shard.00000.mds")
    with pytest.raises(ShardNotFoundError, match=r"^shard file shard.00000.mds named by index.hpcio is missing"):
        hpcio.open(small)[0]


@pytest.mark.parametrize("name", ["../x.mds", "/etc/passwd", "a/../../x.mds", "./x.mds", "a//x.mds", ""])
def test_basename_outside_directory(small, name):
    edit_index(small, lambda o: o["shards"][0]["raw_data"].update(basename=name))
    with pytest.raises(CorruptShardError, match=rf"shard entry 0 of index.json: 'raw_data' basename {re.escape(repr(name))} leaves the dataset directory"):
        hpcio.open(small)


def test_basename_the_file_system_cannot_encode(small):
    edit_index(small, lambda o: o["shards"][0]["raw_data"].update(basename="shard\ud800.mds"))
    with pytest.raises(CorruptShardError, match=r"^shard entry 0 of index.json: 'raw_data' basename "
                       r"'shard\\ud800.mds' is not a file name \("):
        hpcio.open(small)


@pytest.mark.parametrize("compression", [True, 0, ["zstd"]])
def test_a_compression_that_is_not_a_string(small, compression):
    edit_index(small, lambda o: o["shards"][0].update(compression=compression))
    with pytest.raises(CorruptShardError) as exc:
        hpcio.open(small)
    assert str(exc.value) == (f"shard entry 0 of index.json: MDS compression {compression!r} is not a string "
                              f"({small}/index.json)")


@pytest.mark.parametrize(("name", "encoding"), [("a", 7), (7, "int")])
def test_column_names_and_encodings_that_are_not_strings(small, name, encoding):
    edit_index(small, lambda o: o["shards"][0].update(column_names=[name], column_encodings=[encoding],
                                                        column_sizes=[None]))
    with pytest.raises(CorruptShardError) as exc:
        hpcio.open(small)
    assert str(exc.value) == (f"shard entry 0 of index.json: column {name!r} has encoding {encoding!r}: names "
                              f"and encodings are strings ({small}/index.json)")


@pytest.mark.parametrize("hashes", [7, [{"x": 1}], [3]])
def test_an_entrys_hashes_that_are_not_algorithm_names(small, hashes):
    edit_index(small, lambda o: o["shards"][0].update(hashes=hashes))
    with pytest.raises(CorruptShardError) as exc:
        hpcio.get_format("mds").inspect(small)
    assert str(exc.value) == (f"shard entry 0 of index.json: 'hashes' is {hashes!r}, expected a list of "
                              f"algorithm names ({small}/index.json)")


@pytest.mark.parametrize("hashes", [7, ["xxh64"], {"xxh64": 7}])
def test_hashes_that_are_not_digests_by_algorithm(small, hashes):
    edit_index(small, lambda o: o["shards"][0]["raw_data"].update(hashes=hashes))
    with pytest.raises(CorruptShardError) as exc:
        hpcio.open(small)
    assert str(exc.value) == (f"shard entry 0 of index.json: 'raw_data' hashes is {hashes!r}, expected an object "
                              f"of hex digests by algorithm ({small}/index.json)")


def test_basename_in_a_subdirectory(small):
    """streaming's merge_index names shards ``0/shard.00000.mds``: read through them."""
    expected = [dict(hpcio.open(small)[i]) for i in range(len(hpcio.open(small)))]
    os.mkdir(f"{small}/0")
    for name in os.listdir(small):
        if name.startswith("shard."):
            os.rename(f"{small}/{name}", f"{small}/0/{name}")

    def move(index):
        for shard in index["shards"]:
            shard["raw_data"]["basename"] = "0/" + shard["raw_data"]["basename"]
    edit_index(small, move)
    ds = hpcio.open(small)
    assert [dict(ds[i]) for i in range(len(ds))] == expected


def corrupt_record(path, sample, shard="shard.00000.mds"):
    """Flip the bytes in the middle of one record; returns the record's file offset."""
    full = f"{path}/{shard}"
    data = bytearray(read_file(full))
    begin, end = struct.unpack_from("<2I", data, 4 + 4 * sample)
    for k in range(begin + 4, min(end, begin + 12)):
        data[k] ^= 0xFF
    open(full, "wb").write(bytes(data))
    return begin


def test_corrupt_compressed_record(tmp_path):
    path = write(tmp_path / "z", [{"t": "hello world " * 20, "i": i} for i in range(6)], compression="sample::zstd")
    begin = corrupt_record(path, 4)
    ds = hpcio.open(path)
    assert ds[3]["i"] == 3
    with pytest.raises(DecodeError, match=rf"shard.00000.mds, byte offset {begin}, sample 4\)$"):
        ds[4]
    with pytest.raises(DecodeError, match=rf"shard.00000.mds, byte offset {begin}, sample 4\)$"):
        ds.get_batch([2, 4])
    with pytest.raises(DecodeError, match=rf"shard.00000.mds, byte offset {begin}, sample 4\)$"):
        list(ds)


@pytest.mark.parametrize("zero_copy", [False, True])
def test_corrupt_record_layout(small, zero_copy):
    shard = f"{small}/shard.00000.mds"
    data = bytearray(read_file(shard))
    begin, _ = struct.unpack_from("<2I", data, 4 + 4 * 2)
    struct.pack_into("<I", data, begin, 200)  # the str column claims 200 bytes
    open(shard, "wb").write(bytes(data))
    message = rf"^malformed record: the record is 14 bytes but its columns add up to 212 \(.*shard.00000.mds, byte offset {begin}, sample 2\)$"
    # zero-copy passes build samples one at a time from the mapping; the others batch reads
    ds = hpcio.open(small, zero_copy=zero_copy)
    for access in (lambda: ds[2], lambda: ds.get_batch([0, 2]), lambda: ds.get_columns([0, 2]), lambda: list(ds),
                   lambda: list(ds.reader.iter_range(1, 4)), lambda: ds.sort(len, field="t")):
        with pytest.raises(CorruptShardError, match=message):
            access()


@pytest.mark.parametrize("zero_copy", [False, True])
def test_bad_utf8_value(small, zero_copy):
    shard = f"{small}/shard.00000.mds"
    data = bytearray(read_file(shard))
    begin, end = struct.unpack_from("<2I", data, 4 + 4 * 1)
    data[end - 1] = 0xFF  # last byte of the str value
    open(shard, "wb").write(bytes(data))
    message = rf"^column 't' \(str\): cannot decode the value: .*invalid start byte \(.*shard.00000.mds, byte offset {begin + 12}, sample 1\)$"
    ds = hpcio.open(small, zero_copy=zero_copy)
    with pytest.raises(DecodeError, match=message):
        ds[1]
    with pytest.raises(DecodeError, match=message):
        list(ds)
    with pytest.raises(DecodeError, match=message):
        ds.sort(len, field="t")


@pytest.mark.parametrize("compression", [None, "sample::zstd"])
def test_sort_by_length_counts_in_place(tmp_path, compression):
    rng = np.random.default_rng(3)
    alphabet = ["a", "é", "✓", "😀", "\x00"]
    samples = [{"id": i, "text": "".join(rng.choice(alphabet, int(rng.integers(0, 12)))),
                "blob": rng.bytes(int(rng.integers(0, 9))), "meta": list(range(i % 4))} for i in range(200)]
    path = write(tmp_path / "lens", samples, columns={"id": "int", "text": "str", "blob": "bytes", "meta": "json"},
                 compression=compression, size_limit=1500)
    ds = hpcio.open(path)
    assert len(ds.reader.shards) > 3
    view = ds.shuffle(seed=4)
    for field in ("text", "blob", "meta"):
        lengths = [len(s[field]) for s in samples]
        for part in (ds, view):
            ids = np.arange(len(ds)) if part.indices is None else part.indices
            want = sorted(range(len(ids)), key=lambda j: lengths[ids[j]])
            assert list(part.sort(len, field=field).indices) == [int(ids[j]) for j in want]
            down = sorted(range(len(ids)), key=lambda j: -lengths[ids[j]])
            assert list(part.sort(len, field=field, reverse=True).indices) == [int(ids[j]) for j in down]
        counted = ds.reader.field_lengths(view.indices, field)
        # str and bytes are counted in the records; other kinds are left to len() of the values
        if field == "meta":
            assert counted is None
        else:
            assert counted.dtype == np.int64 and counted.tolist() == [lengths[i] for i in view.indices]
    assert ds.reader.field_lengths(np.array([], np.int64), "text").tolist() == []


# --- large records: values read with pread where the mapping maps small pages ------------
@pytest.fixture(params=["pread", "mapping"])
def value_reads(request, monkeypatch):
    """Large records' values read with pread (the file cached in small pages) or through
    the mapping (huge pages), whatever the page cache holds."""
    monkeypatch.setattr(mds_shards, "_maps_cheaply", lambda mapped: request.param == "mapping")
    return request.param


@pytest.fixture
def large_records(tmp_path):
    """Records of ~40 KB (past mds_shards._LARGE_RECORD) with small values on both sides of a blob
    (MDS stores columns in name order: "a_id", "blob", "meta")."""
    rng = np.random.default_rng(5)
    samples = [{"a_id": f"s{i}", "blob": rng.bytes(40_000 + i), "meta": {"n": i, "text": "é" * (i % 700)}}
               for i in range(30)]
    path = write(tmp_path / "large", samples, columns={"a_id": "str", "blob": "bytes", "meta": "json"},
                 size_limit=600_000)
    assert len(mds.Reader(path).shards) > 1
    return path, samples


@pytest.mark.parametrize("zero_copy", [False, True])
def test_large_records_read_the_same_on_every_path(large_records, value_reads, zero_copy):
    path, samples = large_records
    ds = hpcio.open(path, zero_copy=zero_copy)
    assert ds.reader.shards[0].raw_bytes > mds_shards._LARGE_RECORD * ds.reader.shards[0].samples
    order = np.random.default_rng(1).permutation(len(samples))

    def plain(s):
        return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()}

    assert [plain(s) for s in ds] == samples
    assert [plain(s) for s in ds.get_batch(order)] == [samples[i] for i in order]
    assert [plain(ds[int(i)]) for i in order] == [samples[i] for i in order]
    assert list(ds.select(["a_id", "meta"])) == [{"a_id": s["a_id"], "meta": s["meta"]} for s in samples]
    assert ds.reader.read_field(order, "meta") == [samples[i]["meta"] for i in order]
    by_text = sorted(range(len(samples)), key=lambda i: (len(samples[i]["meta"]["text"]), i))
    assert list(ds.sort(lambda m: len(m["text"]), field="meta").indices) == by_text
    blobs = [s["blob"] for s in ds]
    assert all(isinstance(b, memoryview) == zero_copy for b in blobs)


@pytest.mark.parametrize("zero_copy", [False, True])
def test_large_record_columns_are_read_from_the_file(large_records, zero_copy, monkeypatch):
    """Column batches of large records in small pages read the column sizes and the copied
    values with pread and view the rest, rather than touching every record through the
    mapping (the record table over the maps); copying blobs still goes through the mapping."""
    from hpcio.columns import VarColumn, ViewColumn

    path, samples = large_records
    ds = hpcio.open(path, zero_copy=zero_copy)
    assert ds.reader.cache.get(0).pread_values  # shards under 2 MiB: never in huge pages
    order = np.random.default_rng(2).permutation(len(samples))[:25]
    assert len(locate(ds.reader.cache, order).groups()[0]) > 1
    small = ds.select(["meta", "a_id"]).get_columns(order)
    assert list(small) == ["meta", "a_id"]
    everything = ds.get_columns(order)
    blobs = everything["blob"]
    assert isinstance(blobs, ViewColumn if zero_copy else VarColumn)
    assert [bytes(v) for v in blobs.to_pylist()] == [samples[i]["blob"] for i in order]
    for cols in (small, everything):
        assert cols["a_id"].to_pylist() == [samples[i]["a_id"] for i in order]
        assert cols["meta"].to_pylist() == [samples[i]["meta"] for i in order]

    def no_map_reads(*args):
        raise AssertionError("read through the mapping")

    monkeypatch.setattr(mds_columns, "record_table", no_map_reads)
    assert ds.select(["meta"]).get_columns(order)["meta"].to_pylist() == [samples[i]["meta"] for i in order]
    if zero_copy:
        assert ds.get_columns(order) == everything
    else:
        with pytest.raises(AssertionError, match="read through the mapping"):
            ds.get_columns(order)


@pytest.mark.parametrize("zero_copy", [False, True])
def test_large_records_in_huge_pages_are_read_through_the_mapping(large_records, zero_copy, monkeypatch):
    """Where one page fault maps 2 MiB, records are sliced out of the mapping as small
    ones are, with no pread, except in a batch read across shards (get_batch), which
    reads each value once into its object (mds_samples_pread_files) rather than copying
    the batch's records into fresh memory and out again."""
    from hpcio._core import _records

    monkeypatch.setattr(mds_shards, "_maps_cheaply", lambda mapped: True)
    path, samples = large_records
    ds = hpcio.open(path, zero_copy=zero_copy)
    order = np.random.default_rng(3).permutation(len(samples))

    def no_pread(*args, **kwargs):
        raise AssertionError("read with pread")

    for name in ("mds_samples_pread", "mds_columns_pread"):
        monkeypatch.setattr(_records, name, no_pread)
    assert [{k: bytes(v) if k == "blob" else v for k, v in s.items()} for s in ds.get_batch(order)] == \
        [samples[i] for i in order]
    cols = ds.get_columns(order)
    assert cols["meta"].to_pylist() == [samples[i]["meta"] for i in order]
    assert [bytes(v) for v in cols["blob"].to_pylist()] == [samples[i]["blob"] for i in order]
    assert [s["a_id"] for s in ds.select(["a_id"])] == [s["a_id"] for s in samples]
    assert all(not sh.pread_values for sh in ds.reader.cache.maps.values())
    assert all(sh._fd >= 0 for sh in ds.reader.cache.maps.values()) == (not zero_copy)


def _drop_from_page_cache(path) -> None:
    from hpcio.bench.pagecache import evict

    evict(os.path.join(path, name) for name in os.listdir(path))


def test_large_record_reads_follow_the_page_cache(tmp_path):
    """The real probe: a shard of large records cached in single pages reads its values
    with pread, the same shard cached in huge pages reads them through the mapping."""
    from hpcio.bench.limits import settle_page_cache

    rng = np.random.default_rng(8)
    samples = [{"a_id": f"s{i}", "blob": rng.bytes(60_000), "meta": {"n": i}} for i in range(120)]
    path = write(tmp_path / "large", samples, columns={"a_id": "str", "blob": "bytes", "meta": "json"})
    shard = os.path.join(path, "shard.00000.mds")
    assert os.path.getsize(shard) > 4 << 20
    _drop_from_page_cache(path)
    fd = os.open(shard, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for off in range(0, os.path.getsize(shard), 4096):
            os.pread(fd, 4096, off)
    finally:
        os.close(fd)
    ds = hpcio.open(path)
    assert ds.reader.cache.get(0).pread_values
    assert ds.select(["meta"]).get_batch([5, 1])[1] == {"meta": {"n": 1}}
    ds.close()
    settle_page_cache(path)
    ds = hpcio.open(path)
    if ds.reader.cache.get(0).pread_values:
        sum(np.frombuffer(ds.reader.cache.get(0).buf, np.uint8)[:: 2 << 20])  # touch it all
        with open("/proc/self/smaps") as f:
            pmd_kib = sum(int(line.split()[1]) for line in f if line.startswith("FilePmdMapped:"))
        assert pmd_kib == 0, "the shard is in huge pages but its values are read with pread"
        pytest.skip("the kernel caches this filesystem's files in small pages only")
    assert ds.select(["meta"]).get_batch([5, 1])[1] == {"meta": {"n": 1}}


def test_large_record_column_sizes_are_checked(large_records, value_reads):
    path, samples = large_records
    shard = f"{path}/shard.00000.mds"
    data = bytearray(read_file(shard))
    begin, end = struct.unpack_from("<2I", data, 4 + 4 * 3)
    struct.pack_into("<I", data, begin + 4, 7)  # the blob claims 7 bytes
    with open(shard, "wb") as f:
        f.write(bytes(data))
    added = 7 - len(samples[3]["blob"])
    message = (rf"^malformed record: the record is {end - begin} bytes but its columns add up to "
               rf"{end - begin + added} \(.*shard.00000.mds, byte offset {begin}, sample 3\)$")
    for zero_copy in (False, True):
        ds = hpcio.open(path, zero_copy=zero_copy)
        for access in (lambda ds=ds: ds.get_columns([0, 3]),
                       lambda ds=ds: ds.select(["meta"]).get_columns([3, 1])):
            with pytest.raises(CorruptShardError, match=message):
                access()


def test_large_record_errors_name_file_offset_and_sample(large_records, value_reads):
    path, samples = large_records
    shard = f"{path}/shard.00000.mds"
    data = bytearray(read_file(shard))
    end = struct.unpack_from("<I", data, 4 + 4 * 4)[0]
    data[end - 2] = 0xFF  # inside the JSON value stored last
    with open(shard, "wb") as f:
        f.write(bytes(data))
    meta_at = end - len(json.dumps(samples[3]["meta"]).encode())
    message = rf"^column 'meta' \(json\): cannot decode the value: .* \(.*shard.00000.mds, byte offset {meta_at}, sample 3\)$"
    ds = hpcio.open(path)
    for access in (lambda: ds[3], lambda: ds.get_batch([0, 3]), lambda: list(ds),
                   lambda: ds.reader.read_field([1, 3], "meta")):
        with pytest.raises(DecodeError, match=message):
            access()


def test_large_records_read_through_the_map_when_out_of_descriptors(large_records, monkeypatch):
    path, samples = large_records
    ds = hpcio.open(path)
    for k in range(len(ds.reader.shards)):
        ds.reader.cache.get(k)  # mapped while descriptors were left

    def exhausted(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "open", exhausted)
    assert list(ds.select(["a_id", "meta"])) == [{"a_id": s["a_id"], "meta": s["meta"]} for s in samples]
    order = np.arange(len(samples))[::-1]
    assert ds.select(["meta"]).get_columns(order)["meta"].to_pylist() == [samples[i]["meta"] for i in order]
    assert all(sh._fd < 0 for sh in ds.reader.cache.maps.values()) and ds.reader.cache.maps


def test_pread_sample_builder_reads_the_file_not_the_map(large_records):
    """mds_samples_pread takes every non-view value from the file descriptor: handed a
    stand-in buffer of zeros for the mapping, it still returns the file's values, and its
    views slice the buffer it was given."""
    import orjson

    from hpcio._core import _records

    path, samples = large_records
    reader = mds.Reader(path)
    layout = reader._layout
    sh, _lidx, starts, ends = reader.cache.extents(0, np.arange(reader.shards[0].samples))
    fd = os.open(sh.path, os.O_RDONLY)
    try:
        stand_in = bytes(sh.size)
        cols = tuple(range(len(layout.names)))
        kinds = layout._direct_kinds(list(cols), False, False)
        args = (starts.astype(np.int64), ends.astype(np.int64), layout._names_t, layout._sizes_t)
        got, bad = _records.mds_samples_pread(fd, stand_in, *args, kinds, cols, orjson.loads)
        assert bad == -1 and got == samples[: len(got)]
        view_kinds = layout._direct_kinds(list(cols), False, True)
        got, bad = _records.mds_samples_pread(fd, stand_in, *args, view_kinds, cols, orjson.loads)
        assert bad == -1 and all(bytes(g["blob"]) == bytes(len(s["blob"])) for g, s in zip(got, samples))
        assert [(g["a_id"], g["meta"]) for g in got] == [(s["a_id"], s["meta"]) for s in samples[: len(got)]]
        # a read past the end of the file is reported as that record, for the general path
        past = ends.astype(np.int64) + sh.size
        assert _records.mds_samples_pread(fd, bytes(3 * sh.size), starts.astype(np.int64) + sh.size, past,
                                          *args[2:], kinds, cols, orjson.loads) == (None, 0)
    finally:
        os.close(fd)
        reader.close()


def test_pread_sample_builder_reads_records_of_several_files(large_records):
    """mds_samples_pread_files takes record j from file ``file_of[j]``, whatever the order
    of files and records; a file number out of range is reported as that record."""
    import orjson

    from hpcio._core import _records

    path, samples = large_records
    reader = mds.Reader(path)
    layout = reader._layout
    cols = tuple(range(len(layout.names)))
    kinds = layout._direct_kinds(list(cols), False, False)
    order = np.random.default_rng(4).permutation(len(samples))
    shard_of = np.searchsorted(reader._cum_list, order, side="right") - 1
    fds, wholes, file_of, starts, ends = [], [], [], [], []
    try:
        for k in range(len(reader.shards)):
            sh = reader.cache.get(k)
            fds.append(os.open(sh.path, os.O_RDONLY))
            wholes.append(bytes(sh.size))  # stand-ins: values come from the descriptors
        for i, k in zip(order.tolist(), shard_of.tolist()):
            sh, _lidx, lo, hi = reader.cache.extents(k, np.array([i - reader._cum_list[k]]))
            file_of.append(k)
            starts.append(int(lo[0]))
            ends.append(int(hi[0]))
        args = [np.array(fds, np.int32), wholes, np.array(file_of, np.int32), np.array(starts, np.int64),
                np.array(ends, np.int64), layout._names_t, layout._sizes_t, kinds, cols, orjson.loads]
        got, bad = _records.mds_samples_pread_files(*args)
        assert bad == -1 and got == [samples[i] for i in order]
        args[2] = np.array(file_of[:3] + [len(fds)] + file_of[4:], np.int32)
        assert _records.mds_samples_pread_files(*args) == (None, 3)
        with pytest.raises(hpcio.HpcioError, match="^mds_samples_pread: 30 records, 29 file numbers"):
            _records.mds_samples_pread_files(args[0], wholes, args[2][1:], *args[3:])
    finally:
        for fd in fds:
            os.close(fd)
        reader.close()


@pytest.mark.parametrize("read_path", ["auto", "planned"])
def test_cached_large_records_batch_value_by_value(large_records, monkeypatch, read_path):
    """A batch of cached large records in small pages reads each value once, straight into
    its object, across shards (not gathered into one buffer first); planned reads keep the
    gathered read.  Both give the file's values, as samples and as general columns."""
    from hpcio._core import _records
    from hpcio.formats.mds import batches

    monkeypatch.setattr(mds_shards, "_maps_cheaply", lambda mapped: False)
    calls = []
    kernel = _records.mds_samples_pread_files
    monkeypatch.setattr(batches._records, "mds_samples_pread_files", lambda *a: calls.append(1) or kernel(*a))
    path, samples = large_records
    order = np.random.default_rng(6).permutation(len(samples))
    with hpcio.open(path, read_path=read_path) as ds:
        assert ds.get_batch(order) == [samples[i] for i in order]
        assert ds.reader._read(order, [2]) == [[samples[i]["meta"] for i in order]]
        modes = ds.reader.cache.modes
        assert (modes[modes != 0] == ReadMode.VALUES).all() == (read_path == "auto")
        assert len(calls) == (2 if read_path == "auto" else 0)


def _first_shard_records(path, order):
    """A reader of ``path`` and where its first shard's records lie, taken in ``order``
    ("storage", "every other" or "reversed"): ``(reader, layout, lidx, shard, starts, ends)``."""
    reader = mds.Reader(path)
    n = reader.shards[0].samples
    lidx = {"storage": np.arange(n), "every other": np.arange(0, n, 2), "reversed": np.arange(n)[::-1]}[order]
    sh, _lidx, starts, ends = reader.cache.extents(0, lidx)
    return reader, reader._layout, lidx, sh, starts, ends


@pytest.mark.parametrize("order", ["storage", "every other", "reversed"])
@pytest.mark.parametrize("cols", [("a_id", "meta"), ("meta", "a_id"), ("a_id", "blob", "meta"), ("meta",)])
def test_pread_sample_builder_reads_the_next_head_with_the_last_value(large_records, order, cols):
    """In storage order the last value of a record and the next record's first bytes come
    in one read; every selection and order gives the file's values."""
    import orjson

    from hpcio._core import _records

    path, samples = large_records
    reader, layout, lidx, sh, starts, ends = _first_shard_records(path, order)
    picked = tuple(layout.names.index(c) for c in cols)
    fd = os.open(sh.path, os.O_RDONLY)
    try:
        got, bad = _records.mds_samples_pread(fd, bytes(sh.size), starts.astype(np.int64), ends.astype(np.int64),
                                              layout._names_t, layout._sizes_t,
                                              layout._direct_kinds(list(picked), False, False), picked, orjson.loads)
        assert bad == -1
        assert got == [{c: samples[i][c] for c in cols} for i in lidx]
    finally:
        os.close(fd)
        reader.close()


@pytest.mark.parametrize("order", ["storage", "every other", "reversed"])
@pytest.mark.parametrize("copied,viewed", [(("a_id", "meta"), ()), (("meta",), ("blob",)),
                                           (("blob", "a_id"), ("meta",)), ((), ("a_id", "blob"))])
def test_pread_column_reader_reads_the_file(large_records, order, copied, viewed):
    """mds_columns_pread copies values from the file, those in each record's first read
    ("a_id") and those past it ("meta", "blob"), and gives where the viewed ones lie."""
    from hpcio._core import _records

    path, samples = large_records
    reader, layout, lidx, sh, starts, ends = _first_shard_records(path, order)
    file_bytes = read_file(sh.path)
    stored = {"a_id": lambda s: s["a_id"].encode(), "blob": lambda s: s["blob"],
              "meta": lambda s: json.dumps(s["meta"]).encode()}
    fd = os.open(sh.path, os.O_RDONLY)
    try:
        copies, spans, bad = _records.mds_columns_pread(
            fd, starts.astype(np.int64), ends.astype(np.int64), layout._sizes_t,
            tuple(layout.names.index(c) for c in copied), tuple(layout.names.index(c) for c in viewed),
            path=sh.path)
    finally:
        os.close(fd)
        reader.close()
    assert bad == -1 and len(copies) == len(copied) and len(spans) == len(viewed)
    for c, (data, offsets) in zip(copied, copies):
        assert offsets.dtype == np.int64 and offsets[0] == 0 and offsets[-1] == len(data)
        got = [data[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])]
        assert got == [stored[c](samples[i]) for i in lidx]
    for c, (begin, end) in zip(viewed, spans):
        assert [file_bytes[a:b] for a, b in zip(begin, end)] == [stored[c](samples[i]) for i in lidx]


def test_pread_column_reader_reports_bad_records_and_short_files(large_records):
    from hpcio._core import _records

    path, _samples = large_records
    reader = mds.Reader(path)
    layout = reader._layout
    sh, _lidx, starts, ends = reader.cache.extents(0, np.arange(3))
    starts, ends = starts.astype(np.int64), ends.astype(np.int64)
    meta = (layout.names.index("meta"),)
    fd = os.open(sh.path, os.O_RDONLY)
    try:
        # a record one byte shorter than its column sizes add up to is returned as bad
        short = ends.copy()
        short[1] -= 1
        assert _records.mds_columns_pread(fd, starts, short, layout._sizes_t, meta, ()) == (None, None, 1)
        # a record past the end of the file raises, naming the file and byte offset
        past = starts + sh.size
        message = (rf"^file ends after 0 of the 512 bytes expected at byte {past[0]} "
                   rf"\({re.escape(sh.path)}, byte offset {past[0]}\)$")
        with pytest.raises(TruncatedShardError, match=message):
            _records.mds_columns_pread(fd, past, ends + sh.size, layout._sizes_t, meta, (), path=sh.path)
    finally:
        os.close(fd)
        reader.close()


# --- CLI -------------------------------------------------------------------------------
def run_cli(module, *argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args(list(argv)))


def test_cli_inspect(capsys):
    from hpcio.cli import inspect as inspect_cmd

    path = os.path.join(FIXTURES, "mldataforge-sample-zstd")
    assert run_cli(inspect_cmd, path, "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["samples"], info["shards"], info["details"]["compression"]) == (20, 2, ["sample::zstd"])
    assert run_cli(inspect_cmd, path) == 0
    assert "fields" in capsys.readouterr().out


def test_cli_verify_reports_each_bad_sample(tmp_path, capsys):
    from hpcio.cli import verify as verify_cmd

    path = write(tmp_path / "v", [{"t": "hello world " * 20, "i": i} for i in range(8)],
                 compression="sample::zstd", hashes=["xxh64"])
    assert run_cli(verify_cmd, path) == 0
    assert capsys.readouterr().out.startswith("OK: 8 samples in 1 shards, 8 records decoded, 1 hashes checked")
    shutil.copytree(path, tmp_path / "bad")
    bad = str(tmp_path / "bad")
    b2, b5 = corrupt_record(bad, 2), corrupt_record(bad, 5)
    edit_index(bad, lambda o: o["shards"][0]["raw_data"]["hashes"].clear())
    assert run_cli(verify_cmd, bad, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and report["checked"] == 6
    assert [(e["sample"], e["offset"], e["type"]) for e in report["errors"]] == [
        (2, b2, "DecodeError"), (5, b5, "DecodeError")]
    shutil.copytree(path, tmp_path / "badhash")
    corrupt_record(str(tmp_path / "badhash"), 1)
    assert run_cli(verify_cmd, str(tmp_path / "badhash")) == 1
    err = capsys.readouterr().err
    assert "BAD  xxh64 mismatch: index.hpcio says" in err


def test_verify_broken_index(tmp_path):
    os.makedirs(tmp_path / "x")
    open(tmp_path / "x" / "index.json", "w").write("{}")
    report = mds.verify(tmp_path / "x")
    assert not report["ok"]
    assert report["errors"][0]["error"].startswith("index.json has no 'shards' list")


# --- json column encoding ------------------------------------------------------------------
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(_JSON_VALUES)
def test_json_column_text_is_json_dumps(value):
    """A json column stores ``json.dumps(value)`` (streaming's bytes), from one reused
    encoder."""
    from hpcio.formats.mds.encodings import _json_dumps

    assert _json_dumps(value) == json.dumps(value)


def test_json_column_errors_are_json_dumps_errors():
    from hpcio.formats.mds.encodings import _json_dumps

    loop: list = []
    loop.append(loop)
    for bad, message in ((loop, "Circular reference detected"),
                         ({"x": {1, 2}}, "Object of type set is not JSON serializable"),
                         ({(1,): 2}, "keys must be str, int, float, bool or None, not tuple")):
        with pytest.raises((TypeError, ValueError), match=re.escape(message)):
            json.dumps(bad)
        with pytest.raises((TypeError, ValueError), match=re.escape(message)):
            _json_dumps(bad)
    # an error leaves the encoder's circular-reference markers set: they are emptied, or
    # the same dict, fixed, would now be "circular"
    sample = {"x": {1, 2}}
    with pytest.raises(TypeError):
        _json_dumps(sample)
    sample["x"] = [1, 2]
    assert _json_dumps(sample) == '{"x": [1, 2]}'


# --- compiled record packing ---------------------------------------------------------------
_PACK_COLUMNS = {"a": "int", "b": "json", "c": "str", "d": "bytes", "e": "uint16", "f": "jpeg"}
_ANY_VALUE = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
              | st.floats(allow_nan=True) | st.text() | st.binary(max_size=8)
              | st.binary(min_size=2, max_size=2) | st.sampled_from(["\ud800", "é€😀", "x\x00y"])
              | st.builds(np.int64, st.integers(-(2**63), 2**63 - 1)) | st.builds(bytearray, st.binary(max_size=4))
              | _JSON_VALUES)
_PLAIN_VALUE = {"a": st.integers(-(2**63), 2**63 - 1), "b": _JSON_VALUES, "c": st.text(),
                "d": st.binary(), "e": st.binary(min_size=2, max_size=2), "f": st.binary()}


def _outcome(encoder, sample):
    try:
        return ("record", encoder.encode(sample, 7))
    except Exception as exc:  # the exact error is part of the contract
        return ("error", type(exc), str(exc))


@settings(max_examples=800, deadline=None)
@given(st.one_of(
    st.fixed_dictionaries(_PLAIN_VALUE),
    st.fixed_dictionaries({k: _ANY_VALUE for k in _PACK_COLUMNS}),
    st.dictionaries(st.sampled_from(sorted(_PACK_COLUMNS) + ["z"]), _ANY_VALUE),
))
def test_packed_records_are_the_per_column_records(sample):
    """RecordEncoder packs plain samples in one compiled call; whatever the sample, the
    record (or the error) is the one the per-column path makes."""
    packed = mds.RecordEncoder(_PACK_COLUMNS)
    assert packed._packer is not None
    general = mds.RecordEncoder(_PACK_COLUMNS)
    general._packer = None
    assert _outcome(packed, sample) == _outcome(general, sample)


def test_packer_packs_plain_samples_and_declines_the_rest():
    from hpcio._core import _records

    packed = mds.RecordEncoder(_PACK_COLUMNS)._packer
    plain = {"a": -2, "b": {"k": [1, None]}, "c": "é", "d": b"xyz", "e": b"\x01\x02", "f": b"\xff\xd8"}
    # variable columns b c d f lead with their uint32 lengths, in name order; then values
    assert packed.pack(plain) == (struct.pack("<4I", 16, 2, 3, 2) + struct.pack("<q", -2)
                                  + b'{"k": [1, null]}' + "é".encode() + b"xyz" + b"\x01\x02" + b"\xff\xd8")
    for changed in ({"a": 2**63}, {"a": True}, {"a": np.int64(1)}, {"c": "\ud800"}, {"d": bytearray(b"x")},
                    {"e": b"\x01"}, {"b": {1, 2}}, {"f": "text"}):
        assert packed.pack({**plain, **changed}) is None, changed
    assert packed.pack({k: v for k, v in plain.items() if k != "a"}) is None
    assert packed.pack({**plain, "z": 1}) is None
    assert packed.pack(argparse.Namespace(**plain)) is None
    with pytest.raises(ValueError, match="kind 9 cannot be packed"):
        _records.RecordPacker(("a",), (9,), (None,), json.dumps)


# --- compression names -------------------------------------------------------------------
def test_parse_compression_names():
    assert mds.parse_compression("sample::gzip").spec == "sample::gz"
    assert mds.parse_compression("br:4").codec == "brotli"
    with pytest.raises(ValueError, match=r"compression level 30 is not valid for zstd \(levels: 1..22\)"):
        mds.parse_compression("zstd:30")
    with pytest.raises(ValueError, match="unknown MDS compression 'blosc2'"):
        mds.parse_compression("blosc2")
    with pytest.raises(ValueError, match="compression level 3 is not valid for snappy"):
        mds.parse_compression("snappy:3")


@pytest.mark.parametrize("compression", [None, "sample::zstd"])
def test_zero_copy_values_outlive_the_reader(tmp_path, compression):
    blobs = [{"id": i, "b": bytes([i]) * (i + 1)} for i in range(50)]
    path = write(tmp_path / "z", blobs, compression=compression, size_limit=300)
    reader = mds.Reader(path, zero_copy=True, max_open=2)
    got = (reader.read_many(np.arange(49, -1, -1)) + list(reader.iter_range(0, 50))
           + list(reader.iter_range(7, 43)))
    assert all(isinstance(g["b"], memoryview) and g["b"].readonly for g in got)
    reader.close()  # evicts every map while the views are alive
    assert [bytes(g["b"]) for g in got] == [b["b"] for b in blobs[::-1] + blobs + blobs[7:43]]
    assert [g["id"] for g in got[100:]] == list(range(7, 43))


def test_iteration_outlives_the_eviction_of_its_shard(tmp_path):
    """A pass keeps the shard it is iterating mapped when random access evicts it, down to
    a record only the general decoder builds (an integer orjson would read as a float)."""
    samples = [{"id": i, "meta": {"n": 2**64 + i if i == 8 else i}} for i in range(20)]
    path = write(tmp_path / "ev", samples, columns={"id": "int", "meta": "json"}, size_limit=200)
    reader = mds.Reader(path, zero_copy=True, max_open=1)
    assert len(reader.shards) > 2
    it = reader.iter_range(0, 20)
    got = [next(it)]
    assert reader.read_many(np.array([19]))[0] == samples[19]  # evicts shard 0
    assert not any(k == 0 for k in reader.cache.maps)
    got += list(it)
    assert got == samples and type(got[8]["meta"]["n"]) is int


def test_read_batches_are_bounded_in_bytes(tmp_path):
    from hpcio.formats.base import BATCH_BYTES, DEFAULT_BATCH, MIN_BATCH

    rng = np.random.default_rng(0)
    big = [{"id": i, "blob": rng.bytes(400_000)} for i in range(40)]
    with hpcio.open_writer(tmp_path / "big", format="mds") as w:
        for s in big:
            w.write(s)
    with hpcio.open_writer(tmp_path / "small", format="mds") as w:
        for i in range(40):
            w.write({"id": i, "blob": b"x"})
    ds = hpcio.open(tmp_path / "big")
    stored = sum(os.path.getsize(tmp_path / "big" / f) for f in os.listdir(tmp_path / "big") if f.endswith(".mds"))
    assert ds.reader.mean_sample_bytes() == stored / 40
    assert ds.reader.batch_size == max(MIN_BATCH, BATCH_BYTES // (stored / 40)) == 10
    assert hpcio.open(tmp_path / "small").reader.batch_size == DEFAULT_BATCH
    # zero-copy views of the mapped shard allocate nothing per value: full batches
    assert hpcio.open(tmp_path / "big", zero_copy=True).reader.batch_size == DEFAULT_BATCH
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "compression='sample::zstd'")
        with hpcio.open_writer(tmp_path / "bigz", format="mds", compression="sample::zstd") as w:
            for s in big:
                w.write(s)
    # ...but a decompressed batch is fresh memory, bounded in bytes
    assert hpcio.open(tmp_path / "bigz", zero_copy=True).reader.batch_size < DEFAULT_BATCH
    # a shuffled view read in byte-bounded batches gives the samples of ds[i], in order
    view = ds.shuffle(seed=3)
    order = GlobalOrder(40, seed=3).tolist()
    assert list(view) == [big[i] for i in order]


@pytest.mark.parametrize("compression", [None, "sample::zstd", "zstd"])
def test_records_made_elsewhere_are_written_as_the_samples_would_be(tmp_path, compression):
    """A writer given RecordEncoder records writes the bytes it writes for the samples,
    size roll-over included."""
    samples = [{"id": i, "text": "t" * (i * 37 % 300), "blob": bytes([i % 256]) * (i % 50)} for i in range(120)]
    options = {"compression": compression, "size_limit": 4000}
    if compression and compression.startswith("sample::"):
        warnings.simplefilter("ignore")
    with mds.Writer(tmp_path / "samples", **options) as w:
        w.write_many(samples)
    fixed = mds.record_options(samples[0], **options)
    assert fixed == {"columns": {"blob": "bytes", "id": "int", "text": "str"}}
    encoder = mds.record_encoder(tmp_path / "records", **options, **fixed)
    with mds.Writer(tmp_path / "records", **options, **fixed) as w:
        for number, sample in enumerate(samples):
            w.write_record(memoryview(encoder.record(sample, number)))
    assert len(tree_bytes(tmp_path / "samples")) > 2
    assert comparable(tree_bytes(tmp_path / "records")) == comparable(tree_bytes(tmp_path / "samples"))


@pytest.mark.parametrize("compression", [None, "sample::zstd"])
def test_record_layout_places_records_as_the_shard_writer_writes_them(tmp_path, compression):
    """A shard's head followed by its records is the file ``Writer(shard_id=...)`` writes,
    and the layout's index part, given the published file's digest, is the writer's."""
    from hpcio.convert.resume import file_digest

    samples = [{"id": i, "text": "t" * (i * 37 % 300), "blob": bytes([i % 256]) * (i % 50)} for i in range(120)]
    options = {"compression": compression, "size_limit": 4000}
    if compression:
        warnings.simplefilter("ignore")
    fixed = mds.record_options(samples[0], **options)
    with mds.Writer(tmp_path / "w", shard_id=7, num_shards=9, **options, **fixed) as w:
        w.write_many(samples)
    encoder = mds.record_encoder(tmp_path / "r", **options, **fixed)
    records = [encoder.record(sample, number) for number, sample in enumerate(samples)]
    name, head, part = mds.record_layout(7, np.array([len(r) for r in records]), **options, **fixed)
    assert name == "shard.00007.mds" and os.listdir(tmp_path / "w") == [name]
    assert head + b"".join(records) == (tmp_path / "w" / name).read_bytes()
    published = {name: {"bytes": len(head) + sum(map(len, records)), "xxh3": file_digest(tmp_path / "w" / name)}}
    assert mds.record_digests(part, published) == w.index_part()


@pytest.mark.parametrize("options", [{"compression": "zstd"}, {"hashes": ["xxh64"]}])
def test_record_layout_declines_shards_not_stored_as_their_records(options):
    """A compressed shard, or one whose file is hashed, is not its records in place."""
    assert mds.record_layout(0, np.array([8, 9]), columns={"id": "int"}, **options) is None


def test_record_layout_refuses_a_shard_past_u32_offsets():
    with pytest.raises(SchemaError) as info:
        mds.record_layout(3, np.array([2**31, 2**31]), columns={"blob": "bytes"}, hashes=[])
    assert str(info.value) == ("shard 3 would be 4294967479 bytes; MDS offsets are u32 (lower size_limit) "
                               "(shard.00003.mds)")


def test_record_hooks_raise_what_the_writer_raises(tmp_path):
    assert mds.record_options({"id": 1}, columns={"id": "int"}) == {}
    with pytest.raises(UnsupportedValueError, match="^cannot infer an MDS encoding for column 'tags' from a set value"):
        mds.record_options({"id": 1, "tags": {1}})
    encoder = mds.record_encoder(tmp_path / "out", columns={"id": "int"})
    with pytest.raises(SchemaError) as info:
        encoder.record({"id": 1, "x": 2}, 5)
    assert str(info.value) == (f"sample has field(s) ['x'] that are not columns; the columns are ['id'] "
                               f"({tmp_path / 'out'}, sample 5)")
    writer = mds.Writer(tmp_path / "w")
    with pytest.raises(ValueError, match="^an MDS writer takes records only once its columns are given$"):
        writer.write_record(b"\0" * 8)
    writer.abort()
