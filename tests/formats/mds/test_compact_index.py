"""The compact MDS index (``index.hpcio``): at the design's scale, round trip, staleness,
damage, and datasets written by other libraries."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import mds_synthetic as synthetic
import pytest
import xxhash

import hpcio
from hpcio.errors import CorruptShardError, HpcioError, TruncatedShardError
from hpcio.formats import mds
from hpcio.formats.mds.compact_index import _load_compact

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir, "fixtures", "mds"))
OTHER_LIBRARIES = ["streaming-none", "streaming-zstd", "streaming-gz", "streaming-pkl", "mldataforge-sample-zstd"]
LAST = synthetic.SHARDS * synthetic.PER_SHARD - 1
HEADER = 72  # bytes of the compact index header (version 2)


# --- the design's scale: 10^5 shards, 10^10 samples ------------------------------------------
@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A dataset of 10^5 shards of 10^5 samples whose only shard file is the last one."""
    root = tmp_path_factory.mktemp("big")
    template = synthetic.write_template(root / "template")
    path = root / "ds"
    synthetic.write_index(path, template)
    mds.write_compact_index(path, check_files=False)
    synthetic.link_shards(path, root / "template", [synthetic.SHARDS - 1])
    return path


def open_shards(reader) -> list[int]:
    return sorted([*reader.cache.maps, *reader.cache.mem])


def test_a_huge_index_opens_without_looking_at_a_shard(big):
    with mds.Reader(big) as reader:
        assert reader.compact
        assert len(reader) == 10**10 and len(reader.shards) == 10**5
        assert open_shards(reader) == [] and reader.shards._infos == {}
        assert reader.shard_sizes()[:2] == [synthetic.PER_SHARD] * 2


def test_the_last_sample_of_a_huge_index_touches_one_shard(big):
    ds = hpcio.open(big)
    assert ds[LAST] == {"id": synthetic.PER_SHARD - 1}
    assert ds[-1] == ds[LAST]
    assert open_shards(ds.reader) == [synthetic.SHARDS - 1]
    assert list(ds.reader.shards._infos) == [synthetic.SHARDS - 1]  # one entry parsed


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_strace_sees_one_shard_opened(big, tmp_path):
    log = tmp_path / "trace"
    code = "import hpcio, sys; ds = hpcio.open(sys.argv[1]); ds[len(ds) - 1]"
    proc = subprocess.run(["strace", "-f", "-o", str(log), "-e", "trace=openat,open,stat,lstat,newfstatat,statx",
                           sys.executable, "-c", code, str(big)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    touched = set(re.findall(re.escape(str(big)) + r'(/[^"]*)?"', text))
    # the staging manifest and rank 0's journal are stated (is this a staged version?), never opened
    stated = {"/.hpcio-manifest.json", "/.hpcio-journal.0.jsonl"}
    assert touched <= {"", "/", "/index.json", "/index.hpcio", f"/shard.{synthetic.SHARDS - 1:05}.mds", *stated}
    assert f"/shard.{synthetic.SHARDS - 1:05}.mds" in touched
    assert not [line for line in text.splitlines() if "open" in line.split("(")[0]
                and any(f'{big}{name}"' in line for name in stated)]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_strace_sees_index_json_stated_but_never_opened(big, tmp_path):
    log = tmp_path / "trace"
    code = "import hpcio, sys; ds = hpcio.open(sys.argv[1]); assert ds.reader.compact; ds[len(ds) - 1]"
    proc = subprocess.run(["strace", "-f", "-o", str(log), "-e", "trace=openat,open,stat,lstat,newfstatat,statx",
                           sys.executable, "-c", code, str(big)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    calls = [line for line in log.read_text().splitlines() if f'{big}/index.json"' in line]
    assert calls and not [line for line in calls if "open" in line.split("(")[0]]


# --- small datasets ----------------------------------------------------------------------------
def write(path, n=40, **options):
    options.setdefault("size_limit", 400)
    with hpcio.open_writer(path, format="mds", columns={"id": "int", "text": "str"}, **options) as w:
        for i in range(n):
            w.write({"id": i, "text": "x" * (i % 7)})
    return path


def expected(n=40):
    return [{"id": i, "text": "x" * (i % 7)} for i in range(n)]


@pytest.fixture
def small(tmp_path):
    return write(tmp_path / "ds")


def test_the_writer_writes_it_and_it_round_trips(small):
    with open(small / "index.json") as f:
        entries = json.load(f)["shards"]
    compact = _load_compact(str(small))
    assert compact is not None and len(compact) == len(entries) > 3
    assert [info.entry for info in compact] == entries
    assert compact.cum.tolist() == [0, *itertools.accumulate(e["samples"] for e in entries)]
    with mds.Reader(small) as reader:
        assert reader.compact and list(reader.iter_range()) == expected()
    os.remove(small / "index.hpcio")
    with mds.Reader(small) as reader:
        assert not reader.compact and list(reader.iter_range()) == expected()


def test_building_it_for_a_dataset_gives_the_writers_bytes_and_the_mtime(small):
    written = (small / "index.hpcio").read_bytes()
    os.remove(small / "index.hpcio")
    assert mds.write_compact_index(small) == str(small / "index.hpcio")
    built = (small / "index.hpcio").read_bytes()
    # the writer records no mtime (the same bytes on every run); hpcio index records it,
    # which changes the mtime field and the file's own digest (bytes 56 to 72)
    assert struct.unpack_from("<q", written, 64) == (0,)
    assert struct.unpack_from("<q", built, 64) == (os.stat(small / "index.json").st_mtime_ns,)
    assert built[:56] == written[:56] and built[72:] == written[72:]


def test_a_written_dataset_is_the_same_bytes_on_every_run(tmp_path):
    for name in ("a", "b"):
        with hpcio.open_writer(tmp_path / name, format="mds") as w:
            for i in range(50):
                w.write({"id": i, "text": f"sample {i}"})
    for name in ("index.json", "index.hpcio", "shard.00000.mds"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


@pytest.mark.filterwarnings("ignore::UserWarning")  # sample::zstd's warning about stock streaming
def test_sample_compressed_and_whole_shard_datasets(tmp_path):
    for compression in ("sample::zstd", "zstd"):
        path = write(tmp_path / compression.replace(":", "_"), compression=compression)
        with mds.Reader(path) as reader:
            assert reader.compact and list(reader.iter_range()) == expected()
            assert [reader.read(i) for i in (39, 0, 17)] == [expected()[i] for i in (39, 0, 17)]


def test_an_empty_dataset(tmp_path):
    path = tmp_path / "empty"
    with hpcio.open_writer(path, format="mds", columns={"id": "int"}):
        pass
    with mds.Reader(path) as reader:
        assert reader.compact and len(reader) == 0 and list(reader.iter_range()) == []


def test_a_stale_compact_index_is_ignored(small):
    index = json.loads((small / "index.json").read_text())
    index["shards"] = index["shards"][:2]  # index.json rewritten: two shards
    (small / "index.json").write_text(json.dumps(index, sort_keys=True))
    with mds.Reader(small) as reader:
        assert not reader.compact
        assert len(reader.shards) == 2 and list(reader.iter_range()) == expected()[: len(reader)]


def test_an_unknown_version_is_ignored(small):
    data = bytearray((small / "index.hpcio").read_bytes())
    struct.pack_into("<I", data, 8, 3)
    (small / "index.hpcio").write_bytes(resign(data))
    with mds.Reader(small) as reader:
        assert not reader.compact and list(reader.iter_range()) == expected()


def test_a_version_1_file_is_read_after_the_digest_check(small):
    """Version 1 has no mtime: the digest of index.json is always computed."""
    data = bytearray((small / "index.hpcio").read_bytes())
    del data[64:72]
    struct.pack_into("<II", data, 8, 1, 64)
    (small / "index.hpcio").write_bytes(resign(data))
    with mds.Reader(small) as reader:
        assert reader.compact and reader.shards.version == 1 and reader.shards.matched == "digest"
        assert list(reader.iter_range()) == expected()
    mds.write_compact_index(small)  # rebuilt as the current version from its entries
    assert _load_compact(str(small)).version == 2 and _load_compact(str(small)).matched == "stat"


# --- recognising index.json: one stat, else its digest -----------------------------------------
def same_size_edit(path) -> tuple[int, int]:
    """index.json of ``path`` rewritten with shard 0's count one less, at the same size
    (its count ends in a non-zero digit); returns (old count, new count)."""
    index = path / "index.json"
    text = index.read_text()
    old = json.loads(text)["shards"][0]["samples"]
    assert old % 10
    new = text.replace(f'"samples": {old},', f'"samples": {old - 1},', 1)
    assert len(new) == len(text) and new != text
    index.write_text(new)
    return old, old - 1


def test_a_matching_stat_trusts_it_without_reading_index_json(small, monkeypatch):
    """The documented rule: index.json with the recorded size and mtime is not read,
    so even a same-size rewrite whose mtime was put back is not seen."""
    from hpcio.formats.mds import compact_index

    mds.write_compact_index(small)  # records index.json's mtime, as hpcio index does
    st = os.stat(small / "index.json")
    old, _new = same_size_edit(small)
    os.utime(small / "index.json", ns=(st.st_atime_ns, st.st_mtime_ns))

    def no_digest(path):
        raise AssertionError(f"{path} was read")

    monkeypatch.setattr(compact_index, "_index_digest", no_digest)
    ds = hpcio.open(small)
    assert ds.reader.compact and ds.reader.shards.matched == "stat"
    assert ds.reader.shard_sizes()[0] == old  # the compact index's count, not index.json's
    assert [ds[i] for i in range(len(ds))] == expected()


def test_a_written_dataset_is_checked_by_digest_until_its_mtime_is_recorded(small):
    with mds.Reader(small) as reader:
        assert reader.compact and reader.shards.matched == "digest"
    mds.write_compact_index(small)
    with mds.Reader(small) as reader:
        assert reader.compact and reader.shards.matched == "stat"


def test_a_new_mtime_with_the_same_bytes_is_used_after_the_digest(small):
    os.utime(small / "index.json", ns=(0, 10**18))
    with mds.Reader(small) as reader:
        assert reader.compact and reader.shards.matched == "digest"
        assert list(reader.iter_range()) == expected()
    before = (small / "index.hpcio").read_bytes()
    mds.write_compact_index(small)  # only the recorded mtime and the file's digest change
    after = (small / "index.hpcio").read_bytes()
    assert struct.unpack_from("<q", after, 64)[0] == 10**18
    assert [j for j in range(len(before)) if before[j] != after[j]] and before[72:] == after[72:]
    assert before[:56] == after[:56]
    with mds.Reader(small) as reader:
        assert reader.compact and reader.shards.matched == "stat"


def test_new_bytes_of_the_same_size_are_detected(small):
    _old, new = same_size_edit(small)
    os.utime(small / "index.json", ns=(0, 10**18))
    with mds.Reader(small) as reader:
        assert not reader.compact and reader.shard_sizes()[0] == new  # index.json's count


def copy_with_cp(src, dst):
    subprocess.run(["cp", "-pr", str(src), str(dst)], check=True)


def copy_with_rsync(src, dst):
    subprocess.run(["rsync", "-a", f"{src}/", f"{dst}/"], check=True)


def copy_with_copy2(src, dst):
    shutil.copytree(src, dst, copy_function=shutil.copy2)


@pytest.mark.parametrize("copy", [copy_with_cp, copy_with_rsync, copy_with_copy2], ids=["cp -p", "rsync -a", "copy2"])
def test_copies_that_keep_mtimes_keep_the_stat_path(small, tmp_path, copy):
    if copy is copy_with_rsync and shutil.which("rsync") is None:
        pytest.skip("needs rsync")
    mds.write_compact_index(small)  # records index.json's mtime, as hpcio index does
    copy(small, tmp_path / "copy")
    assert os.stat(tmp_path / "copy" / "index.json").st_ino != os.stat(small / "index.json").st_ino
    with mds.Reader(tmp_path / "copy") as reader:
        assert reader.compact and reader.shards.matched == "stat"
        assert list(reader.iter_range()) == expected()


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("why", ["stale", "unknown version"])
def test_an_ignored_compact_index_leaves_no_descriptor_open(small, why):
    if why == "stale":
        os.utime(small / "index.json", ns=(0, 10**18))
        index = small / "index.json"
        index.write_bytes(index.read_bytes().replace(b'"version": 2}', b'"version":  2}'))
    else:
        data = bytearray((small / "index.hpcio").read_bytes())
        struct.pack_into("<I", data, 8, 3)
        (small / "index.hpcio").write_bytes(resign(data))
    before = open_descriptors()
    for _ in range(20):
        assert _load_compact(str(small)) is None
        with mds.Reader(small) as reader:
            assert not reader.compact
    assert open_descriptors() == before


def test_only_the_shard_read_is_checked(small):
    """A damaged shard fails when it is read, naming it; the shards around it read."""
    victim = small / "shard.00002.mds"
    data = victim.read_bytes()
    victim.write_bytes(struct.pack("<I", 1) + data[4:])  # a wrong count
    ds = hpcio.open(small)
    first = ds.reader.shard_sizes()
    assert ds[0] == expected()[0] and ds[len(ds) - 1] == expected()[-1]
    with pytest.raises(CorruptShardError, match=re.escape(
            f"shard header says 1 samples, index.hpcio says {first[2]} ({victim}, byte offset 0)")):
        ds[sum(first[:2])]


def test_a_missing_shard_is_named_when_read(small):
    os.remove(small / "shard.00001.mds")
    ds = hpcio.open(small)
    assert ds[0] == expected()[0] and ds[len(ds) - 1] == expected()[-1]
    with pytest.raises(FileNotFoundError, match=re.escape("shard file shard.00001.mds named by index.hpcio is missing")):
        ds[ds.reader.shard_sizes()[0]]


@pytest.mark.parametrize("compact", [True, False], ids=["index.hpcio", "index.json"])
def test_a_shard_error_names_the_index_used(small, compact):
    if not compact:
        os.remove(small / "index.hpcio")
    used = "index.hpcio" if compact else "index.json"
    victim = small / "shard.00000.mds"
    size = victim.stat().st_size
    victim.write_bytes(victim.read_bytes() + b"x")
    with mds.Reader(small) as reader:
        assert reader.compact == compact
        with pytest.raises(CorruptShardError, match=re.escape(
                f"shard is {size + 1} bytes, {used} says {size} ({victim}, byte offset {size})")):
            reader.read(0)


# --- damage -------------------------------------------------------------------------------------
def resign(data: bytearray) -> bytes:
    """``data`` with its own digest recomputed (damage the digest would not catch)."""
    h = xxhash.xxh3_64(bytes(data[:56]))
    h.update(bytes(data[64:]))
    struct.pack_into("<Q", data, 56, h.intdigest())
    return bytes(data)


def damage(path, edit, sign=True):
    target = path / "index.hpcio"
    data = bytearray(target.read_bytes())
    edit(data)
    target.write_bytes(resign(data) if sign else bytes(data))
    return str(target), len(data)


def test_a_wrong_magic(small):
    target, _ = damage(small, lambda d: d.__setitem__(slice(0, 8), b"HPCIOXXX"))
    with pytest.raises(CorruptShardError, match=re.escape(
            f"index.hpcio starts with b'HPCIOXXX', expected b'HPCIOMDS' ({target}, byte offset 0)")):
        mds.Reader(small)


def test_a_truncated_file(small):
    target = small / "index.hpcio"
    size = target.stat().st_size
    target.write_bytes(target.read_bytes()[:-3])
    with pytest.raises(TruncatedShardError, match=re.escape(f"index.hpcio is {size - 3} bytes; its header (")
                       + r".*" + re.escape(f"says {size} ({target}, byte offset {size - 3})")):
        mds.Reader(small)


def test_a_flipped_byte_fails_the_digest(small):
    target, size = damage(small, lambda d: d.__setitem__(-5, d[-5] ^ 1), sign=False)
    with pytest.raises(CorruptShardError, match=re.escape("index.hpcio hashes to xxh3-64 ") + r"[0-9a-f]{16}"
                       + re.escape(", its header says ") + r"[0-9a-f]{16}" + re.escape(f" ({target}, byte offset 56)")):
        mds.Reader(small)


def test_a_decreasing_count_table(small):
    target, _ = damage(small, lambda d: struct.pack_into("<Q", d, HEADER + 8 * 2, 1))
    with pytest.raises(CorruptShardError, match=re.escape(
            f"the count table decreases at element 2 ({target}, byte offset {HEADER + 16})")):
        mds.Reader(small)


def test_a_count_that_disagrees_with_its_entry(small):
    def edit(d):
        for j in range(2, int(struct.unpack_from("<Q", d, 16)[0]) + 1):
            struct.pack_into("<Q", d, HEADER + 8 * j, struct.unpack_from("<Q", d, HEADER + 8 * j)[0] + 1)

    target, _ = damage(small, edit)
    compact = _load_compact(str(small))
    at = compact._entries_at + int(compact._entry_end[0])
    with mds.Reader(small) as reader:
        with pytest.raises(CorruptShardError, match=re.escape(
                f"shard entry 1 of index.hpcio: 'samples' is {reader.shard_sizes()[1] - 1}; the count table says "
                f"{reader.shard_sizes()[1]} ({target}, byte offset {at})")):
            reader.read(reader.shard_sizes()[0])


def test_an_entry_that_is_not_json(small):
    compact = _load_compact(str(small))
    at = compact._entries_at + int(compact._entry_end[0])
    target, _ = damage(small, lambda d: d.__setitem__(at, ord("#")))
    with mds.Reader(small) as reader:
        reader.read(0)
        with pytest.raises(CorruptShardError, match=re.escape("shard entry 1 of index.hpcio: not valid JSON: ")
                           + r".*" + re.escape(f"({target}, byte offset {at})")):
            reader.read(reader.shard_sizes()[0])


def test_a_configuration_number_out_of_range(small):
    k = struct.unpack_from("<Q", (small / "index.hpcio").read_bytes(), 16)[0]
    ids_at = HEADER + 8 * (k + 1) + 24 * k
    target, _ = damage(small, lambda d: struct.pack_into("<I", d, ids_at + 4, 7))
    with pytest.raises(CorruptShardError, match=re.escape(
            f"a configuration number is not below 1 at element 1 ({target}, byte offset {ids_at + 4})")):
        mds.Reader(small)


def test_every_damaged_byte_is_a_typed_error_or_a_valid_reader(tmp_path):
    """Each byte of a small compact index changed in turn (its digest made to match, so
    that the parser sees the damage), and each prefix of it: opening and reading all
    either works or raises an HpcioError."""
    path = write(tmp_path / "ds", n=6, size_limit=200)
    original = (path / "index.hpcio").read_bytes()
    cases = [bytes(resign(bytearray(original[:j] + bytes([original[j] ^ 0xA5]) + original[j + 1:])))
             for j in range(len(original))]
    cases += [original[:j] for j in range(0, len(original), 7)]
    for data in cases:
        (path / "index.hpcio").write_bytes(data)
        try:
            with mds.Reader(path) as reader:
                got = list(reader.iter_range())
        except HpcioError:
            continue
        assert got == expected(6)


# --- datasets written by other libraries -------------------------------------------------------
def plain(samples) -> list:
    """Samples with numpy values as (dtype, list): comparable with ``==``."""
    def value(v):
        return (str(v.dtype), v.tolist()) if hasattr(v, "dtype") else v

    return [{k: value(v) for k, v in s.items()} for s in samples]


@pytest.mark.parametrize("name", OTHER_LIBRARIES)
def test_other_libraries_datasets_open_from_index_json(name, tmp_path):
    path = os.path.join(FIXTURES, name)
    assert not os.path.exists(os.path.join(path, "index.hpcio"))
    with mds.Reader(path, allow_pickle=True) as reader:
        assert not reader.compact
        want = plain(reader.iter_range())
    copy = tmp_path / name
    shutil.copytree(path, copy)
    before = (copy / "index.json").read_bytes()
    mds.write_compact_index(copy)
    assert (copy / "index.json").read_bytes() == before
    with mds.Reader(copy, allow_pickle=True) as reader:
        assert reader.compact and plain(reader.iter_range()) == want


def test_building_it_for_entries_without_zip_data(small):
    """index.json may leave out zip_data (streaming writes null): the compact index says null."""
    index = json.loads((small / "index.json").read_text())
    for entry in index["shards"]:
        del entry["zip_data"]
    (small / "index.json").write_text(json.dumps(index, sort_keys=True))
    mds.write_compact_index(small)
    with mds.Reader(small) as reader:
        assert reader.compact and list(reader.iter_range()) == expected()
        assert [info.entry for info in reader.shards] == [{**e, "zip_data": None} for e in index["shards"]]


def test_building_it_replaces_a_damaged_one(small):
    mds.write_compact_index(small)
    written = (small / "index.hpcio").read_bytes()
    damage(small, lambda d: d.__setitem__(-5, d[-5] ^ 1), sign=False)
    mds.write_compact_index(small)
    assert (small / "index.hpcio").read_bytes() == written


def test_building_it_checks_the_shard_files(small):
    os.remove(small / "index.hpcio")
    victim = small / "shard.00003.mds"
    victim.write_bytes(victim.read_bytes()[:-1])
    with pytest.raises(TruncatedShardError, match=re.escape(f"({victim}, byte offset")):
        mds.write_compact_index(small)
    assert not (small / "index.hpcio").exists()


def test_the_index_command(tmp_path):
    from hpcio.cli import main as cli_main

    copy = tmp_path / "ds"
    shutil.copytree(os.path.join(FIXTURES, "streaming-none"), copy)
    assert cli_main.main(["index", str(copy)]) == 0
    with mds.Reader(copy) as reader:
        assert reader.compact
    assert cli_main.main(["index", str(tmp_path)]) == 1  # not a dataset: one line, status 1


@pytest.mark.filterwarnings("ignore::UserWarning")  # sample::zstd's warning about stock streaming
@pytest.mark.parametrize("compression", [None, "zstd", "sample::zstd"])
def test_inspect_reports_the_same_from_either_index(tmp_path, compression):
    path = write(tmp_path / "ds", compression=compression, hashes=["sha1", "xxh3_64"])
    from_compact = mds.inspect(path)
    os.remove(path / "index.hpcio")
    assert from_compact == mds.inspect(path)


def test_a_pass_over_every_shard_keeps_a_bounded_number_of_entries(small, monkeypatch):
    from hpcio.formats.mds import compact_index

    monkeypatch.setattr(compact_index, "_KEPT_ENTRIES", 2)
    with mds.Reader(small, max_open=1) as reader:
        assert len(reader.shards) > 3
        assert list(reader.iter_range()) == expected()
        assert [reader.read(i) for i in range(len(reader))] == expected()
        assert len(reader.shards._infos) <= 2
