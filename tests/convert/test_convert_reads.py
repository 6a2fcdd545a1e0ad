"""What a conversion in several rounds makes storage read from its sources, counted by the
kernel: the sources are evicted from the page cache before every round, as happens when
they are larger than memory, and the block input of this process (``ru_inblock``) is the
count.  A seeded conversion must read a JSON Lines source at most twice (the line index,
then the samples) and an indexed one once, however many rounds it takes."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from convert_helpers import tree_bytes

import hpcio
from hpcio.bench.pagecache import evict, resident
from hpcio.convert.writer import ShardWriter
from hpcio.lineage.record import DIGEST_BYTES_ENV

ROUND_BYTES = 1 << 20


def _jsonl(path, megabytes: float, words: int = 10) -> str:
    with open(path, "w") as f:
        i = 0
        while f.tell() < megabytes * 1e6:
            f.write(json.dumps({"id": i, "text": f"document {i} " + "lorem ipsum " * (words + i % 50)}) + "\n")
            i += 1
    return str(path)


def _block_input_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_inblock * 512


def _files(path) -> list[str]:
    path = str(path)
    if os.path.isfile(path):
        return [path]
    # the files of the dataset, not the lineage directory beside them
    return [os.path.join(path, name) for name in sorted(os.listdir(path)) if os.path.isfile(os.path.join(path, name))]


@pytest.fixture
def cold_rounds(monkeypatch):
    """Evict the source when the writing starts (before the first sample is read to
    weigh the rounds, which the reading ahead of the rounds then starts with) and before
    each round; returns the list of files to evict, to be filled by the test."""
    files: list[str] = []
    # The reads counted are the conversion's own: the lineage record's source digests,
    # one more read of the sources up to $HPCIO_LINEAGE_DIGEST_BYTES, are left out.
    monkeypatch.setenv(DIGEST_BYTES_ENV, "0")
    for name in ("write_round", "fields_per_sample"):
        original = getattr(ShardWriter, name)

        def cold(self, *args, _original=original, **kwargs):
            evict(files)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(ShardWriter, name, cold)
    return files


def _counted_conversion(src, dst, files: list[str], **options) -> tuple[float, dict]:
    """Convert ``src`` cold; the bytes read from storage as a multiple of the source's."""
    evict(files)
    if resident(files).fraction > 0.01:
        pytest.skip("this file system keeps the source cached (tmpfs?): no storage reads to count")
    before = _block_input_bytes()
    summary = hpcio.convert(src, dst, progress=False, round_bytes=ROUND_BYTES, **options)
    read = _block_input_bytes() - before
    if read == 0:
        pytest.skip("this file system does not count block input")
    return read / sum(os.path.getsize(f) for f in files), summary


def test_a_seeded_jsonl_conversion_reads_its_source_twice_whatever_the_rounds(tmp_path, cold_rounds):
    src = _jsonl(tmp_path / "raw.jsonl", 6)
    cold_rounds.append(src)
    ratio, summary = _counted_conversion(src, tmp_path / "rounds", cold_rounds, to="mds", shard_size=ROUND_BYTES // 2)
    assert summary["num_shards"] >= 12  # a round holds two shards: six rounds or more
    assert 0.9 <= ratio <= 2.2, ratio
    one = hpcio.convert(src, tmp_path / "one", to="mds", shard_size=ROUND_BYTES // 2, progress=False)
    assert one["samples_written"] == summary["samples_written"]
    assert tree_bytes(tmp_path / "rounds") == tree_bytes(tmp_path / "one")


def test_a_seeded_conversion_of_an_indexed_source_reads_it_once(tmp_path, cold_rounds):
    mds = tmp_path / "mds"
    hpcio.convert(_jsonl(tmp_path / "raw.jsonl", 6), mds, to="mds", num_shards=3, order="source", progress=False)
    cold_rounds.extend(_files(mds))
    ratio, summary = _counted_conversion(str(mds), tmp_path / "rounds", cold_rounds, to="mds",
                                         shard_size=ROUND_BYTES // 2)
    assert summary["num_shards"] >= 12
    assert 0.9 <= ratio <= 1.1, ratio


def _peak_rss(src, dst) -> int:
    """The largest rank's peak resident memory converting ``src`` in a fresh process."""
    proc = subprocess.run([sys.executable, "-m", "hpcio.cli.main", "convert", src, str(dst), "--to", "mds",
                           "--no-progress", "--json", "--round-size", str(ROUND_BYTES),
                           "--shard-size", str(ROUND_BYTES // 2)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return max(json.loads(proc.stdout.strip().splitlines()[-1])["peak_rss_bytes"])


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_rounds(tmp_path):
    # Samples of about 2 KB, so that what the plan keeps per sample weighs little; both
    # sources larger than the part of a JSON Lines file indexed at a time.
    small = _peak_rss(_jsonl(tmp_path / "small.jsonl", 20, words=150), tmp_path / "small")
    large = _peak_rss(_jsonl(tmp_path / "large.jsonl", 60, words=150), tmp_path / "large")
    # three times the rounds: the source's pages are not kept mapped, nor its samples held
    assert large - small < 8e6, (small, large)


def _traced_peak(source: str, dst, shard_size: int = 64_000, round_bytes: int = 1 << 22) -> int:
    """Peak bytes of Python and numpy allocations while converting ``source`` into
    shards of 64 KB in rounds of 4 MiB (two such shards of tiny samples), in this
    process."""
    import tracemalloc

    tracemalloc.start()
    try:
        hpcio.convert(source, str(dst), to="mds", shard_size=shard_size, round_bytes=round_bytes, progress=False)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _tiny_lines(path, lines: int) -> str:
    with open(path, "w") as f:
        f.writelines(f'{{"i":{i}}}\n' for i in range(lines))
    return str(path)


def test_conversion_memory_does_not_grow_with_the_number_of_samples(tmp_path, monkeypatch):
    # Samples of about 10 bytes, so that anything kept per sample of the source (its size,
    # its line's offsets, its place in the plan: 40 bytes) outweighs the rounds' samples.
    # Both files are indexed in several parts (a part's offsets are held while indexed).
    monkeypatch.setattr("hpcio.formats.jsonl.INDEX_CHUNK_BYTES", 1 << 18)
    small = _traced_peak(_tiny_lines(tmp_path / "small.jsonl", 150_000), tmp_path / "small")
    large = _traced_peak(_tiny_lines(tmp_path / "large.jsonl", 600_000), tmp_path / "large")
    # 450,000 more samples: 18 MB more at 40 bytes each
    assert large - small < 3e6, (small, large)


def test_a_round_holds_about_its_size_as_python_objects(tmp_path, monkeypatch):
    # Lines of 12 bytes, held as Python objects 25 times larger: rounds counted by stored
    # bytes held 4.7 times --round-size more for rounds 6 MiB larger.
    monkeypatch.setattr("hpcio.formats.jsonl.INDEX_CHUNK_BYTES", 1 << 18)
    src = _tiny_lines(tmp_path / "lines.jsonl", 200_000)
    small = _traced_peak(src, tmp_path / "small", shard_size=16_000, round_bytes=2 << 20)
    large = _traced_peak(src, tmp_path / "large", shard_size=16_000, round_bytes=8 << 20)
    assert large - small < 1.25 * (6 << 20), (small, large)
