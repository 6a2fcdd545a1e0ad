"""Plain JSONL (also .zst and .gz): conformance, newline index, cache dir, no temp files."""

from __future__ import annotations

import gzip
import os
import tempfile
import tracemalloc

import numpy as np
import pytest
import zstandard

import hpcio
from hpcio.errors import CorruptShardError, DecodeError, TruncatedShardError, UnsupportedValueError
from hpcio.formats import jsonl
from hpcio.testing import FormatTests


@pytest.fixture(autouse=True)
def no_temp_files(tmp_path_factory, monkeypatch):
    """Nothing may be created in the system temp dir (pointed at a private one here)."""
    private = tmp_path_factory.mktemp("system-temp")
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    yield
    assert os.listdir(private) == [], f"temp files created: {os.listdir(private)}"


class _JsonlTests(FormatTests):
    format_name = "jsonl"
    suffix = ".jsonl"

    def make_sample(self, i):
        return {"id": i, "text": f"sample {i} " + "é✓" * (i % 5), "score": i / 4,
                "tags": ["a"] * (i % 3), "meta": {"ok": i % 2 == 0, "none": None}}

    def dataset_path(self, tmp_path):
        return os.path.join(tmp_path, "ds" + self.suffix)

    def test_huge_sample(self, tmp_path):
        big = {**self.make_sample(1), "text": "x" * (24 << 20)}
        path = self.write(tmp_path, [self.make_sample(0), big, self.make_sample(2)])
        assert list(self.open(path))[1]["text"] == big["text"]


class TestJsonl(_JsonlTests):
    report_path = "ds.jsonl"
    expected_inspect = {"shards": 1, "fields": {"id": "int", "text": "str", "meta": "json"},
                        "details": {"compression": None, "decoded_bytes": 180}}
    expected_hashes_checked = 1  # ds.jsonl.hashes.json
    corruption = (b'{"i":3}', b'{"i":3!')
    expected_hash_problem = {
        "path": "{path}", "offset": 0, "sample": None, "type": "ChecksumMismatchError",
        "error": "xxh3_64 mismatch: ds.jsonl.hashes.json says e1c24a273e9b0017, bytes [0, 180) of the file hash to "
                 "858dc76227bcc32d ({path}, byte offset 0)"}
    expected_problem = {
        "path": "{path}", "offset": 108, "sample": 3, "type": "CorruptShardError",
        "error": "garbled JSON on line 4, column 34: unexpected character, expected ',' or '}' "
                 "({path}, byte offset 108, sample 3)"}


class TestJsonlZstd(_JsonlTests):
    suffix = ".jsonl.zst"
    report_path = "ds.jsonl.zst"


class TestJsonlGzipCached(_JsonlTests):
    suffix = ".jsonl.gz"

    @pytest.fixture(autouse=True)
    def _cache(self, tmp_path):
        self.reader_options = {"cache_dir": str(tmp_path / "cache")}


LINES = b'{"id": 0, "t": "a"}\n\n{"id": 1, "t": "b"}\r\n   \n{"id": 2, "t": "c"}'


@pytest.mark.parametrize("suffix, pack", [
    (".jsonl", lambda b: b),
    (".jsonl.zst", lambda b: zstandard.ZstdCompressor(write_content_size=False).compress(b)),
    (".jsonl.gz", gzip.compress),
], ids=["plain", "zst-no-size", "gz"])
def test_reads_files_written_elsewhere(tmp_path, suffix, pack):
    path = tmp_path / f"x{suffix}"
    path.write_bytes(pack(LINES))
    ds = hpcio.open(path)
    assert [s["id"] for s in ds] == [0, 1, 2]
    assert ds[-1] == {"id": 2, "t": "c"} and ds[1]["t"] == "b"


def test_cache_dir_keeps_decompressed_bytes_and_index(tmp_path):
    path = tmp_path / "x.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(LINES))
    cache = tmp_path / "cache"
    assert [s["id"] for s in hpcio.open(path, cache_dir=cache)] == [0, 1, 2]
    names = sorted(os.listdir(cache))
    assert len(names) == 2 and names[0].endswith(".jsonl") and names[1].endswith(".lines.u64")
    data = next(n for n in names if n.endswith(".jsonl"))
    assert (cache / data).read_bytes() == LINES
    again = hpcio.open(path, cache_dir=cache)
    assert again[2]["t"] == "c" and sorted(os.listdir(cache)) == names


def _many_lines(count: int) -> bytes:
    return b"".join(b'{"id": %d, "t": "line %d of a file compressed in several parts"}\n' % (i, i)
                    for i in range(count))


# Several zstd frames (one without its size, as streaming compressors write them) and
# several gzip members (cat a.gz b.gz, bgzip): each decompresses after the one before.
IN_PARTS = {
    ".jsonl.zst": lambda b: (zstandard.ZstdCompressor(write_content_size=False).compress(b[: len(b) // 3])
                             + zstandard.ZstdCompressor().compress(b[len(b) // 3 :])),
    ".jsonl.gz": lambda b: gzip.compress(b[: len(b) // 3], mtime=0) + gzip.compress(b[len(b) // 3 :], mtime=0),
}


@pytest.mark.parametrize("suffix", sorted(IN_PARTS))
@pytest.mark.parametrize("cached", [False, True], ids=["memory", "cache-dir"])
def test_a_file_compressed_in_parts_reads_whole(tmp_path, suffix, cached):
    lines = _many_lines(200_000)  # 14 MB: several pieces of the cached decompression
    path = tmp_path / f"x{suffix}"
    path.write_bytes(IN_PARTS[suffix](lines))
    ds = hpcio.open(path, cache_dir=tmp_path / "cache" if cached else None)
    assert len(ds) == 200_000 and ds[0]["id"] == 0 and ds[199_999]["id"] == 199_999
    if cached:
        [data] = [n for n in os.listdir(tmp_path / "cache") if n.endswith(".jsonl")]
        assert (tmp_path / "cache" / data).read_bytes() == lines


@pytest.mark.parametrize("suffix", sorted(IN_PARTS))
def test_a_cached_decompression_holds_a_few_mib_not_the_file(tmp_path, suffix):
    path = tmp_path / f"x{suffix}"
    path.write_bytes(IN_PARTS[suffix](_many_lines(600_000)))  # 44 MB decompressed
    tracemalloc.start()
    try:
        with jsonl.Reader(path, cache_dir=tmp_path / "cache") as reader:
            assert len(reader) == 600_000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Decompressed whole in memory, the file's bytes alone were 44 MB.
    assert peak < 24e6, peak


@pytest.mark.parametrize(("suffix", "error", "message"), [
    (".jsonl.zst", TruncatedShardError,
     "zstd frame truncated: input ends after {size} bytes ({path}, byte offset {size})"),
    (".jsonl.gz", DecodeError, "gzip stream is truncated ({path})"),
])
def test_a_truncated_compressed_file_leaves_nothing_in_the_cache(tmp_path, suffix, error, message):
    path = tmp_path / f"x{suffix}"
    path.write_bytes(IN_PARTS[suffix](_many_lines(1_000))[:-20])
    with pytest.raises(error) as exc:
        jsonl.Reader(path, cache_dir=tmp_path / "cache")
    assert str(exc.value) == message.format(size=os.path.getsize(path), path=path)
    assert os.listdir(tmp_path / "cache") == []


def offsets(reader):
    return np.column_stack([reader.starts, reader.ends]).tolist()


def no_indexing(*args):
    raise AssertionError("the file was indexed again")


@pytest.mark.parametrize("data", [LINES, LINES + b"\n", b"", b"\n \n"], ids=["no-final-newline", "final-newline",
                                                                             "empty", "blank"])
def test_cached_index_matches_the_uncached_one(tmp_path, monkeypatch, data):
    monkeypatch.setattr(jsonl, "INDEX_CHUNK_BYTES", 8)  # a part per line or two
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    cache = tmp_path / "cache"
    expected = jsonl.Reader(path)
    built = jsonl.Reader(path, cache_dir=cache)
    [name] = os.listdir(cache)
    assert name.endswith(jsonl.INDEX_SUFFIX) and os.path.getsize(cache / name) == 16 * len(expected)
    monkeypatch.setattr(jsonl, "_index_part", no_indexing)
    again = jsonl.Reader(path, cache_dir=cache)
    picks = [2, 0] if len(expected) else []
    for reader in (built, again):
        assert len(reader) == len(expected) and offsets(reader) == offsets(expected)
        assert list(reader.iter_range()) == list(expected.iter_range())
        assert reader.read_many(picks) == expected.read_many(picks)
        assert reader.sample_nbytes().tolist() == expected.sample_nbytes().tolist()
        reader.close()
    assert os.listdir(cache) == [name]


def many_lines(path, n):
    path.write_bytes(b"".join(b'{"i":%d}\n' % i for i in range(n)))
    return path


def mapped_files():
    """Path -> resident kB of each file this process maps (from /proc/self/smaps)."""
    resident, path = {}, None
    with open("/proc/self/smaps") as f:
        for line in f:
            head, _, rest = line.partition(" ")
            if "-" in head and not head.endswith(":"):
                fields = line.split()
                path = fields[5] if len(fields) > 5 else None
            elif head == "Rss:" and path:
                resident[path] = resident.get(path, 0) + int(rest.split()[0])
    return resident


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
def test_cached_index_is_mapped_not_held_in_memory(tmp_path, monkeypatch):
    n = 300_000  # 16 bytes a line would be 4.8 MB of arrays
    path = many_lines(tmp_path / "x.jsonl", n)
    monkeypatch.setattr(jsonl, "INDEX_CHUNK_BYTES", 64 << 10)
    cache = tmp_path / "cache"
    for _ in ("building", "reusing"):
        tracemalloc.start()
        try:
            reader = jsonl.Reader(path, cache_dir=cache)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20, peak
        assert len(reader) == n and reader.read(n - 1) == {"i": n - 1} and reader.read(n // 2) == {"i": n // 2}
        [index] = [os.path.realpath(cache / name) for name in os.listdir(cache)]
        assert os.path.getsize(index) == 16 * n and index in mapped_files()
        reader.close()
        assert index not in mapped_files()


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
def test_drop_pages_releases_the_data_and_the_index(tmp_path):
    path = many_lines(tmp_path / "x.jsonl", 20_000)
    cache = tmp_path / "cache"
    with jsonl.Reader(path, cache_dir=cache) as reader:
        [index] = [os.path.realpath(cache / name) for name in os.listdir(cache)]
        first = list(reader.iter_range())
        data = os.path.realpath(path)
        assert mapped_files()[index] > 0 and mapped_files()[data] > 0
        reader.drop_pages()
        assert mapped_files()[index] == 0 and mapped_files()[data] == 0
        assert list(reader.iter_range()) == first == [{"i": i} for i in range(20_000)]


@pytest.mark.parametrize("cached", [False, True])
def test_sample_nbytes_windows(tmp_path, cached):
    path = tmp_path / "x.jsonl"
    path.write_bytes(LINES)
    reader = jsonl.Reader(path, cache_dir=tmp_path / "cache" if cached else None)
    whole = reader.sample_nbytes()
    assert whole.dtype == np.int64 and whole.tolist() == [20, 21, 19]  # with the newline
    windows = [reader.sample_nbytes(a, b) for a, b in [(0, 1), (1, 1), (1, 3)]]
    assert all(w.dtype == np.int64 for w in windows)
    assert np.concatenate(windows).tolist() == whole.tolist()
    assert reader.sample_nbytes(1).tolist() == [21, 19] and reader.sample_nbytes(stop=2).tolist() == [20, 21]


def test_garbled_line_names_file_offset_sample(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"id": 0}\n{"id": \n')
    with pytest.raises(CorruptShardError, match=r"garbled JSON on line 2, .*x\.jsonl, byte offset 10, sample 1\)"):
        hpcio.open(path)[1]
    path.write_bytes(b'{"id": 0}\n[1, 2]\n')
    with pytest.raises(CorruptShardError, match=r"JSON line holds a list, expected an object \(.*byte offset 10, sample 1\)"):
        hpcio.open(path)[1]


def test_writer_numpy_and_bytes(tmp_path):
    path = tmp_path / "x.jsonl"
    with hpcio.open_writer(path, format="jsonl") as w:
        w.write({"a": np.arange(3), "b": np.float32(0.5)})
    assert hpcio.open(path)[0] == {"a": [0, 1, 2], "b": 0.5}
    with pytest.raises(UnsupportedValueError, match=r"sample cannot be written as JSON: Type is not "
                       r"JSON serializable: bytes \(.*y\.jsonl, sample 0\)"):
        with hpcio.open_writer(tmp_path / "y.jsonl", format="jsonl") as w:
            w.write({"b": b"x"})
    assert not (tmp_path / "y.jsonl").exists()


def test_sniff_and_names(tmp_path):
    assert jsonl.sniff(__file__) is False
    p = tmp_path / "a.ndjson"
    p.write_bytes(b'{"a": 1}\n')
    assert hpcio.sniff_format(p).NAME == "jsonl"
    with pytest.raises(ValueError, match="cannot tell the JSONL flavour"):
        hpcio.open_writer(tmp_path / "a.txt", format="jsonl")



def test_verify_a_truncated_compressed_file(tmp_path):
    path = TestJsonlZstd().write_report_dataset(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    report = jsonl.verify(path)
    assert (report["ok"], report["samples"], report["checked"]) == (False, 0, 0)
    [mismatch, error] = report["errors"]
    assert mismatch["type"] == "ChecksumMismatchError" and mismatch["error"].startswith("file is ")
    assert error["path"] == path and error["type"] == "DecodeError", error


def test_a_garbled_line_is_named_by_its_line_in_the_file(tmp_path):
    """The parser sees one line at a time (its "line 1"); the error names the file's line,
    blank lines counted, beside the sample index."""
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n{"a": 3, "b": }\n')
    reader = hpcio.open(str(path)).reader
    with pytest.raises(CorruptShardError) as err:
        reader.read(2)
    assert str(err.value) == (f"garbled JSON on line 4, column 15: unexpected character, expected a JSON value "
                              f"({path}, byte offset 19, sample 2)")
