"""Shard file access (pread, mmap, gather) against plain slicing of the file's bytes."""

import os
import re
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hpcio._core import _io
from hpcio.errors import CorruptShardError, ShardNotFoundError, TruncatedShardError

SEEDS = range(4)


def random_ranges(rng, size, m, touching=False):
    """m ranges inside [0, size]: arbitrary ones, or runs that touch (merged reads)."""
    if touching:
        cuts = np.sort(rng.integers(0, size + 1, size=m + 1))
        return cuts[:-1].astype(np.uint64), cuts[1:].astype(np.uint64)
    a = rng.integers(0, size + 1, size=m)
    b = rng.integers(0, size + 1, size=m)
    return np.minimum(a, b).astype(np.uint64), np.maximum(a, b).astype(np.uint64)


@pytest.fixture
def shard(tmp_path):
    data = np.random.default_rng(1234).bytes(200_000)
    path = tmp_path / "shard.bin"
    path.write_bytes(data)
    return str(path), data


# ---- gather -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_gather_matches_slicing(seed):
    rng = np.random.default_rng(seed)
    src = rng.bytes(int(rng.integers(0, 5000)))
    starts, ends = random_ranges(rng, len(src), int(rng.integers(0, 200)))
    data, pos = _io.gather(src, starts, ends)
    assert isinstance(data, bytearray) and pos.dtype == np.uint64
    want = [src[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    assert bytes(data) == b"".join(want)
    assert [bytes(data[pos[j]:pos[j + 1]]) for j in range(len(want))] == want


def test_gather_empty_and_single():
    data, pos = _io.gather(b"abc", [], [])
    assert data == bytearray() and pos.tolist() == [0]
    data, pos = _io.gather(b"", [0], [0])
    assert data == bytearray() and pos.tolist() == [0, 0]
    data, pos = _io.gather(b"abc", [1], [3])
    assert data == bytearray(b"bc") and pos.tolist() == [0, 2]


# ---- pack_pieces ------------------------------------------------------------------------

@given(pieces=st.lists(st.binary(max_size=40), max_size=30), chunk=st.integers(1, 64),
       kinds=st.lists(st.sampled_from([bytes, bytearray, memoryview]), min_size=30, max_size=30))
@settings(max_examples=300, deadline=None)
def test_pack_pieces_cuts_the_joined_pieces_into_chunks(pieces, chunk, kinds):
    pieces = [kind(p) for kind, p in zip(kinds, pieces)]
    joined = b"".join(pieces)
    out, chunks, index, offset = bytearray(chunk), [], 0, 0
    while index < len(pieces):
        index, offset, n = _io.pack_pieces(pieces, index, offset, out)
        chunks.append(bytes(out[:n]))
    # every chunk but the last is full, and together they are the pieces back to back
    assert b"".join(chunks) == joined
    assert all(len(c) == chunk for c in chunks[:-1])
    assert offset == 0


@pytest.mark.parametrize("chunk", [1, 7, 500, 10_000])
def test_pack_pieces_packs_more_pieces_than_one_pass_takes(chunk):
    # hundreds of pieces of every kind: more per chunk than one GIL-free pass copies
    rng = np.random.default_rng(chunk)
    kinds = (bytes, bytearray, memoryview)
    pieces = [kinds[k % 3](rng.bytes(int(rng.integers(0, 40)))) for k in range(700)]
    out, chunks, index, offset = bytearray(chunk), [], 0, 0
    while index < len(pieces):
        index, offset, n = _io.pack_pieces(pieces, index, offset, out)
        chunks.append(bytes(out[:n]))
    assert b"".join(chunks) == b"".join(pieces)
    assert all(len(c) == chunk for c in chunks[:-1])


def test_pack_pieces_goes_on_inside_a_piece_and_says_where_it_stopped():
    out = bytearray(4)
    assert _io.pack_pieces([b"abcdef", b"gh"], 0, 0, out) == (0, 4, 4) and out == b"abcd"
    assert _io.pack_pieces([b"abcdef", b"gh"], 0, 4, out) == (2, 0, 4) and out == b"efgh"
    assert _io.pack_pieces([b"abcdef", b"gh"], 2, 0, out) == (2, 0, 0)
    assert _io.pack_pieces([b"", b"", b"x"], 0, 0, bytearray(0)) == (0, 0, 0)


def test_pack_pieces_refuses_bad_positions_and_buffers():
    with pytest.raises(ValueError, match=r"^piece 0 has 3 bytes, fewer than the offset 9$"):
        _io.pack_pieces([b"abc"], 0, 9, bytearray(4))
    with pytest.raises(ValueError, match=r"^no piece 3 at byte 0 among 1 pieces$"):
        _io.pack_pieces([b"abc"], 3, 0, bytearray(4))
    with pytest.raises(TypeError, match="bytes-like object is required"):
        _io.pack_pieces([b"a", 1], 0, 0, bytearray(4))
    with pytest.raises(BufferError):
        _io.pack_pieces([b"abc"], 0, 0, b"read-only")


def test_gather_bounds():
    with pytest.raises(TruncatedShardError) as info:
        _io.gather(b"0123456789", [0, 5], [2, 11], path="a.bin")
    assert str(info.value) == ("record ends at byte 11, past the end of the data (10 bytes) "
                               "(a.bin, byte offset 5)")
    with pytest.raises(CorruptShardError,
                       match=re.escape("record range ends at byte 3 before it starts "
                                       "(a.bin, byte offset 6)")):
        _io.gather(b"0123456789", [6], [3], path="a.bin")
    with pytest.raises(CorruptShardError, match=re.escape("(byte offset 6, sample 11)")):
        _io.gather(b"0123456789", [0, 6], [1, 3], sample_base=10)
    with pytest.raises(TruncatedShardError, match="past the end"):
        _io.gather(b"0123456789", [2**64 - 5], [2**64 - 1])
    with pytest.raises(ValueError, match=r"^2 starts but 1 ends$"):
        _io.gather(b"abc", [0, 1], [1])


# ---- ShardFile ---------------------------------------------------------------------------

@pytest.mark.parametrize("touching", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_read_records_matches_slicing(shard, seed, touching):
    path, data = shard
    rng = np.random.default_rng(seed)
    starts, ends = random_ranges(rng, len(data), 300, touching)
    got = []
    with _io.ShardFile(path, buffer_size=16_384) as f:
        assert f.size == len(data) and f.path == path
        j = 0
        while j < len(starts):
            view, pos, k = f.read_records(starts[j:], ends[j:])
            assert k >= 1 and view.readonly and len(pos) == k + 1
            got += [bytes(view[pos[i]:pos[i + 1]]) for i in range(k)]
            j += k
    assert got == [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def test_read_records_grows_for_a_large_record(shard):
    path, data = shard
    with _io.ShardFile(path, buffer_size=100) as f:
        view, pos, k = f.read_records([10, 50_000], [40_010, 50_001])
        assert k == 1 and bytes(view) == data[10:40_010]
        view, pos, k = f.read_records([0, 5], [5, 9])
        assert k == 2 and bytes(view) == data[0:9] and pos.tolist() == [0, 5, 9]


def test_read_records_edges(shard):
    path, data = shard
    with _io.ShardFile(path) as f:
        view, pos, k = f.read_records([], [])
        assert (bytes(view), pos.tolist(), k) == (b"", [0], 0)
        view, pos, k = f.read_records([7, 7, 7], [7, 9, 9])  # empty and duplicate ranges
        assert k == 3 and pos.tolist() == [0, 0, 2, 4] and bytes(view) == data[7:9] * 2
        with pytest.raises(TruncatedShardError) as info:
            f.read_records([0, 199_990], [4, 200_001])
        assert str(info.value) == ("record ends at byte 200001, past the end of the file "
                                   f"(200000 bytes) ({path}, byte offset 199990)")
        with pytest.raises(CorruptShardError,
                           match=re.escape(f"record range ends at byte 3 before it starts "
                                           f"({path}, byte offset 8, sample 41)")):
            f.read_records([0, 8], [4, 3], sample_base=40)
        with pytest.raises(CorruptShardError,
                           match=re.escape(f"before it starts ({path}, byte offset 8)")):
            f.read_records([0, 8], [4, 3])


def test_pread_and_truncation_after_open(shard, tmp_path):
    path, data = shard
    f = _io.ShardFile(path)
    assert f.pread(100, 50) == data[100:150] and f.pread(0, 0) == b""
    with pytest.raises(TruncatedShardError) as info:
        f.pread(199_999, 2)
    assert str(info.value) == ("read of 2 bytes passes the end of the file (200000 bytes) "
                               f"({path}, byte offset 199999)")
    # A hostile length fails before any allocation.
    with pytest.raises(TruncatedShardError, match="read of 1099511627776 bytes"):
        f.pread(0, 2**40)
    os.truncate(path, 1000)  # the file shrinks under an open reader
    with pytest.raises(TruncatedShardError) as info:
        f.read_records([500, 900], [900, 1500])
    assert str(info.value) == ("file ends after 500 of the 1000 bytes expected at byte 500 "
                               f"({path}, byte offset 1000)")
    f.close()
    f.close()
    with pytest.raises(ValueError, match="closed shard file"):
        f.pread(0, 1)


def test_missing_file(tmp_path):
    missing = str(tmp_path / "nope.mds")
    with pytest.raises(ShardNotFoundError, match=re.escape(f"shard file does not exist ({missing})")):
        _io.ShardFile(missing)
    with pytest.raises(FileNotFoundError):
        _io.MappedShard(missing)


def test_concurrent_reads_from_threads(shard):
    path, data = shard
    errors, f = [], _io.ShardFile(path)

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(20):
            a = int(rng.integers(0, len(data)))
            b = int(rng.integers(a, len(data) + 1))
            if f.pread(a, b - a) != data[a:b]:
                errors.append((a, b))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    f.close()
    assert errors == []


# ---- MappedShard -------------------------------------------------------------------------

def test_mapped_views_are_zero_copy(shard):
    path, data = shard
    m = _io.MappedShard(path)
    whole = m.buffer()
    assert whole.readonly and len(whole) == len(data) == m.size
    v = m.view(1000, 1010)
    assert bytes(v) == data[1000:1010] and v.readonly
    arr = np.frombuffer(v, dtype=np.uint8)
    base = np.frombuffer(whole, dtype=np.uint8)
    assert np.shares_memory(arr, base)
    blob, pos = m.gather([0, 5, 100], [5, 10, 100])
    assert bytes(blob) == data[0:10] and pos.tolist() == [0, 5, 10, 10]
    m.close()  # views still alive keep the mapping
    assert bytes(v) == data[1000:1010]
    with pytest.raises(ValueError, match="closed mapped shard"):
        m.view(0, 1)


def test_mapped_bounds(shard):
    path, _ = shard
    with _io.MappedShard(path) as m:
        with pytest.raises(TruncatedShardError) as info:
            m.view(199_000, 200_001)
        assert str(info.value) == ("record ends at byte 200001, past the end of the file "
                                   f"(200000 bytes) ({path}, byte offset 199000)")
        with pytest.raises(CorruptShardError,
                           match=re.escape(f"record range [10, 5) is not a valid byte range "
                                           f"({path}, byte offset 10)")):
            m.view(10, 5)
        with pytest.raises(TruncatedShardError,
                           match=re.escape(f"({path}, byte offset 0, sample 7)")):
            m.gather([0], [200_001], sample_base=7)


def _smaps(address: int) -> dict[str, list[str]]:
    """The kernel's account of the mapping holding ``address`` (/proc/self/smaps):
    ``{"VmFlags": [...], "FilePmdMapped": ["2048", "kB"], ...}``."""
    fields = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head, *rest = line.split()
            if "-" in head and not head.endswith(":"):
                if fields is not None:
                    break
                lo, hi = (int(x, 16) for x in head.split("-"))
                if lo <= address < hi:
                    fields = {}
            elif fields is not None:
                fields[head.rstrip(":")] = rest
    if fields is None:
        raise AssertionError(f"no mapping holds {address:#x}")
    return fields


def _vm_flags(address: int) -> list[str]:
    return _smaps(address)["VmFlags"]


needs_thp = pytest.mark.skipif(not os.path.isdir("/sys/kernel/mm/transparent_hugepage"),
                               reason="the kernel has no transparent huge pages")


@needs_thp
@pytest.mark.parametrize("size, advised", [(2 << 20, True), ((2 << 20) - 1, False)])
def test_map_file_advises_huge_pages_from_2_mib(tmp_path, size, advised):
    path = tmp_path / "shard.bin"
    data = np.random.default_rng(size).bytes(size)
    path.write_bytes(data)
    with open(path, "rb") as f:
        m = _io.map_file(f.fileno())
    address = np.frombuffer(m, np.uint8).ctypes.data
    assert m[:] == data and ("hg" in _vm_flags(address)) == advised
    m.close()


@needs_thp
def test_mapped_shard_uses_map_file(tmp_path):
    path = tmp_path / "shard.bin"
    path.write_bytes(bytes(3 << 20))
    with _io.MappedShard(str(path)) as m:
        assert "hg" in _vm_flags(np.frombuffer(m.buffer(), np.uint8).ctypes.data)


def _cached_file(tmp_path, size: int):
    """A file of ``size`` random bytes written to disk and dropped from the page cache
    (skips where the filesystem keeps it)."""
    path = tmp_path / "shard.bin"
    data = np.random.default_rng(size).bytes(size)
    with open(path, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return str(path), data


def _probe(path: str) -> tuple[tuple[int, int], int, int]:
    """probe_pages() of a fresh mapping, then the huge pages the mapping maps and the
    major faults (reads from disk) the probe took."""
    import resource

    with _io.MappedShard(path) as m:
        majflt = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        got = m.probe_pages()
        majflt = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - majflt
        address = np.frombuffer(m.buffer(), np.uint8).ctypes.data
        pmd_kib = int(_smaps(address)["FilePmdMapped"][0])
    return got, pmd_kib, majflt


def test_probe_pages_reads_no_uncached_region(tmp_path):
    path, _ = _cached_file(tmp_path, 9 << 20)
    got, pmd_kib, majflt = _probe(path)
    if got[1]:
        pytest.skip("this filesystem keeps the file cached after POSIX_FADV_DONTNEED")
    assert got == (0, 0) and majflt == 0 and pmd_kib == 0


def test_probe_pages_finds_small_pages(tmp_path):
    """Read 4 KiB at a time without readahead, the file is cached in single pages: every
    probed region takes a fault 1 MiB in."""
    path, data = _cached_file(tmp_path, 9 << 20)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        assert b"".join(os.pread(fd, 4096, off) for off in range(0, len(data), 4096)) == data
    finally:
        os.close(fd)
    got, pmd_kib, _ = _probe(path)
    assert got == (0, 4) and pmd_kib == 0


@needs_thp
def test_probe_pages_finds_huge_pages(tmp_path):
    """Read back through a huge-page mapping, the file is cached in 2 MiB pages: every
    probed region is mapped whole by its first fault (checked against smaps)."""
    from hpcio.bench.limits import settle_page_cache

    path, _ = _cached_file(tmp_path, 9 << 20)
    settle_page_cache(path)
    got, pmd_kib, _ = _probe(path)
    if pmd_kib == 0:
        pytest.skip("the kernel caches this filesystem's files in small pages only")
    assert got == (4, 4) and pmd_kib >= 4 * 2048


def test_probe_pages_of_small_and_empty_files(tmp_path):
    for size in (0, (2 << 20) - 1):
        path = tmp_path / f"f{size}"
        path.write_bytes(bytes(size))
        with _io.MappedShard(str(path)) as m:
            assert m.probe_pages() == (0, 0)
    with _io.MappedShard(str(path)) as m:
        m.close()
        with pytest.raises(ValueError, match="closed mapped shard"):
            m.probe_pages()


def test_mapped_empty_file(tmp_path):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    with _io.MappedShard(str(path)) as m:
        assert m.size == 0 and bytes(m.buffer()) == b"" and bytes(m.view(0, 0)) == b""
        with pytest.raises(TruncatedShardError):
            m.view(0, 1)


def test_system_call_failure_is_an_os_error_with_errno(tmp_path):
    import errno

    from hpcio.errors import ShardReadError

    directory = str(tmp_path)
    f = _io.ShardFile(directory)  # opening works; reading a directory fails with EISDIR
    if f.size == 0:
        pytest.skip("this filesystem reports size 0 for directories")
    with pytest.raises(ShardReadError) as info:
        f.pread(0, 1)
    assert str(info.value) == f"read of 1 bytes failed: Is a directory ({directory}, byte offset 0)"
    assert isinstance(info.value, OSError) and info.value.errno == errno.EISDIR
    f.close()


# --- MDS records into columns (_records.mds_columns, utf8_lengths) ----------------------
def _record(values, sizes):
    """An MDS record: u32 sizes of the variable columns, then every column's bytes."""
    head = b"".join(len(v).to_bytes(4, "little") for v, s in zip(values, sizes) if s < 0)
    return head + b"".join(values)


@pytest.mark.parametrize("seed", range(5))
def test_mds_columns_match_slicing(seed):
    from hpcio._core import _records

    rng = np.random.default_rng(seed)
    sizes = (-1, 8, -1, 2)
    records = [[rng.bytes(int(rng.integers(0, 40))), rng.bytes(8), rng.bytes(int(rng.integers(0, 5))),
                rng.bytes(2)] for _ in range(60)]
    bufs = [b"pad" + b"".join(_record(r, sizes) for r in records[:30]),
            b"".join(_record(r, sizes) for r in records[30:])]
    starts, ends, buf_of = [], [], []
    for b, part in ((0, records[:30]), (1, records[30:])):
        pos = 3 if b == 0 else 0
        for r in part:
            n = len(_record(r, sizes))
            starts.append(pos)
            ends.append(pos + n)
            buf_of.append(b)
            pos += n
    order = rng.permutation(60)
    cols = (3, 0, 1)
    got, bad = _records.mds_columns(bufs, np.array(buf_of, np.int32)[order], np.array(starts)[order],
                                    np.array(ends)[order], sizes, cols)
    assert bad == -1
    for (data, offsets), c in zip(got, cols):
        assert offsets[0] == 0 and len(offsets) == 61
        assert [data[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])] == [records[j][c] for j in order]


def test_mds_columns_report_the_bad_record():
    from hpcio._core import _records

    good = _record([b"abc", b"12345678"], (-1, 8))
    bad = good[:-1]  # one byte short: its sizes add up to more than its length
    buf = good + bad
    args = (np.zeros(2, np.int32), np.array([0, len(good)]), np.array([len(good), len(buf)]), (-1, 8), (0,))
    assert _records.mds_columns([buf], *args) == (None, 1)
    # a range outside its buffer, and a record too short for its size header
    one = np.zeros(1, np.int32), np.array([0])
    assert _records.mds_columns([good], *one, np.array([99]), (-1, 8), (0,)) == (None, 0)
    assert _records.mds_columns([b"ab"], *one, np.array([2]), (-1, 8), (1,)) == (None, 0)
    with pytest.raises(ValueError, match="column 5 of 2"):
        _records.mds_columns([good], np.zeros(1, np.int32), np.array([0]), np.array([len(good)]), (-1, 8), (5,))
    # more columns selected than a record can have is refused before anything is copied
    with pytest.raises(ValueError, match="65 selected"):
        _records.mds_columns([good], *one, np.array([len(good)]), (-1, 8), (0,) * 65)


def test_fixed_sizes_whose_sum_wraps_are_a_malformed_record():
    from hpcio._core import _records

    # four columns of 2**62 bytes add up to 2**64, which wrapped to the record's 0 bytes
    one = np.zeros(1, np.int32), np.array([0]), np.array([0])
    sizes = (1 << 62,) * 4
    assert _records.mds_columns([b""], *one, sizes, (3,)) == (None, 0)
    assert _records.mds_lengths([b""], *one, sizes, 3, True) == (None, 0)


UTF8_CASES = [
    b"", b"plain ascii, longer than one word", "aé✓😀".encode(), "é".encode() * 9,
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf",  # overlong
    b"\xed\xa0\x80", b"\xed\xbf\xbf",  # surrogates
    b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff",  # past U+10FFFF, never valid
    b"\x80", b"abcdefgh\xbf", b"\xe2\x82", b"ab\xf0\x9f\x98", b"\xe2\x28\xa1",  # stray, cut, broken
    "\U0010ffff".encode(), "\ud7ff\ue000".encode(),
]


@pytest.mark.parametrize("value", UTF8_CASES + [np.random.default_rng(s).bytes(30) for s in range(20)]
                         + [("x" * s).encode() + np.random.default_rng(s).bytes(3) for s in range(0, 72, 3)]
                         # a character or a fault on each side of the 32-byte ASCII step
                         + [("x" * s + "é✓").encode() for s in range(28, 37)]
                         + [b"x" * 40 + b"\x80" + b"x" * 40, b"x" * 31 + b"\xe2\x82" + b"x" * 40])
def test_utf8_lengths_agree_with_python(value):
    from hpcio._core import _records
    from hpcio.errors import DecodeError

    data = b"ok" + value
    offsets = np.array([0, 2, len(data)], np.uint64)
    try:
        want = len(value.decode("utf-8"))
    except UnicodeDecodeError as exc:
        with pytest.raises(DecodeError, match=rf"^value is not valid UTF-8 \(byte offset {2 + exc.start}, sample 1\)$"):
            _records.utf8_lengths(data, offsets)
        record = _record([b"ok", value], (-1, -1))
        got = _records.mds_lengths([record], np.zeros(1, np.int32), np.array([0]), np.array([len(record)]),
                                   (-1, -1), 1, True)
        assert got == (None, 0)
    else:
        assert _records.utf8_lengths(data, offsets).tolist() == [2, want]


def test_mds_lengths_count_one_column_in_place():
    from hpcio._core import _records

    sizes = (-1, 8, -1)
    records = [[("é" * i).encode(), bytes(8), b"x" * (3 * i)] for i in range(7)]
    buf = b"".join(_record(r, sizes) for r in records)
    bounds = np.cumsum([0] + [len(_record(r, sizes)) for r in records])
    order = np.array([6, 0, 3, 3, 1])
    args = ([buf], np.zeros(5, np.int32), bounds[:-1][order], bounds[1:][order], sizes)
    chars, bad = _records.mds_lengths(*args, 0, True)
    assert bad == -1 and chars.tolist() == order.tolist()
    assert _records.mds_lengths(*args, 0, False)[0].tolist() == (2 * order).tolist()
    assert _records.mds_lengths(*args, 2, False)[0].tolist() == (3 * order).tolist()
    assert _records.mds_lengths(*args, 1, False)[0].tolist() == [8] * 5
    # a malformed record, and one outside its buffer, are reported by position
    short = buf[: bounds[2] - 1]
    assert _records.mds_lengths([short], np.zeros(2, np.int32), bounds[:2], bounds[1:3] - [0, 1], sizes, 0,
                                True) == (None, 1)
    assert _records.mds_lengths([buf], np.zeros(1, np.int32), np.array([0]), np.array([len(buf) + 1]), sizes, 0,
                                True) == (None, 0)
    with pytest.raises(ValueError, match="column 3 of 3"):
        _records.mds_lengths(*args, 3, True)
    # with first, where each value starts in its record: the views of a ViewColumn
    first = np.full(5, -1, np.int64)
    lengths, _ = _records.mds_lengths(*args, 2, False, first)
    starts = args[2]
    assert [buf[a + f : a + f + n] for a, f, n in zip(starts, first, lengths)] == [records[i][2] for i in order]
    with pytest.raises(ValueError, match=r"5 buffer numbers and 4 first positions$"):
        _records.mds_lengths(*args, 2, False, first[:4])


def test_utf8_lengths_bounds():
    from hpcio._core import _records

    data = "aé✓😀".encode()
    assert _records.utf8_lengths(data, np.array([0, 1, 3, 6, 10], np.uint64)).tolist() == [1, 1, 1, 1]
    assert _records.utf8_lengths(data, np.array([0], np.uint64)).tolist() == []
    with pytest.raises(ValueError, match=r"^value 0 spans bytes 0..11 of 10"):
        _records.utf8_lengths(data, np.array([0, 11], np.uint64))


# ---- start_writeback --------------------------------------------------------------------

def test_start_writeback_leaves_the_bytes(shard):
    path, data = shard
    with open(path, "r+b") as f:  # dirty pages for it to start on
        f.write(data[::-1])
    _io.start_writeback(path)
    with open(path, "rb") as f:
        assert f.read() == data[::-1]


def test_start_writeback_on_a_file_with_nothing_to_write(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    _io.start_writeback(str(empty))
    _io.start_writeback(os.devnull)  # a device: nothing to write back, no error


def test_start_writeback_of_a_range_through_a_descriptor(shard):
    path, data = shard
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, b"\0" * 4096, 8192)
        _io.start_writeback(fd, 8192, 4096)
        _io.start_writeback(fd, 100_000)  # to the end of the file
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        assert f.read() == data[:8192] + b"\0" * 4096 + data[8192 + 4096:]


def test_start_writeback_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        _io.start_writeback(str(tmp_path / "missing"))


def test_start_writeback_names_a_closed_descriptor(shard):
    fd = os.open(shard[0], os.O_RDONLY)
    os.close(fd)
    with pytest.raises(OSError, match=f"starting writeback failed: Bad file descriptor.*file descriptor {fd}"):
        _io.start_writeback(fd)


# ---- keep_freed_heap --------------------------------------------------------------------

_HEAP_PROBE = """
import ctypes, sys
libc = ctypes.CDLL(None)
class MallInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
from hpcio._core import _io
if sys.argv[1] == "keep":
    _io.keep_freed_heap()
    _io.keep_freed_heap()  # once per process: a second call changes nothing
elif sys.argv[1] in ("open", "tune"):
    import hpcio
    if sys.argv[1] == "tune":
        hpcio.tune(keep_freed_heap=True)
    ds = hpcio.open(sys.argv[2])
    for _ in range(3):
        ds.get_batch([0, 0, 0])
mapped = libc.mallinfo2().hblks
block = libc.malloc(12 << 20)
mapped = libc.mallinfo2().hblks - mapped
libc.free(block)
print(mapped, libc.mallinfo2().keepcost >= 12 << 20)
"""


@pytest.mark.skipif(not hasattr(os, "confstr") or "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""),
                    reason="glibc's malloc thresholds")
def test_keep_freed_heap_keeps_a_freed_block_for_the_next_allocation(tmp_path):
    """Measured in fresh processes: one reading mallinfo2 in a process that has freed a
    mapped block since it started would see thresholds that block raised."""
    import subprocess
    import sys

    import hpcio

    def probe(*args):
        out = subprocess.run([sys.executable, "-c", _HEAP_PROBE, *args], capture_output=True, text=True, check=True)
        return out.stdout.split()

    with hpcio.open_writer(tmp_path / "ds", format="mds", columns={"id": "int"}) as w:
        w.write({"id": 1})

    # by default glibc maps a 12 MiB block on its own and unmaps it when it is freed...
    assert probe("default") == ["1", "False"]
    # ...kept, it comes from the heap and stays there, free, for the next allocations
    assert probe("keep") == ["0", "True"]
    # opening and reading a dataset leave glibc as it is, unless the user opted in
    assert probe("open", str(tmp_path / "ds")) == ["1", "False"]
    assert probe("tune", str(tmp_path / "ds")) == ["0", "True"]
