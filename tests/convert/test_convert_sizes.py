"""The sizes file every rank maps: values by global id, and a bounded resident part."""

from __future__ import annotations

import numpy as np
import pytest

from hpcio.convert import sizes as sizes_module
from hpcio.convert.sizes import SampleSizes


def _mapped_kib(path: str) -> int:
    """Resident KiB of this process's maps of ``path``."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and ":" not in head[0]:
                inside = len(head) > 5 and head[5] == path
            elif inside and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.fixture
def sizes_file(tmp_path):
    n = 2_000_000  # 16 MB of sizes
    path = str(tmp_path / "sizes.i64")
    values = np.random.default_rng(0).integers(0, 10**9, n)
    SampleSizes.create(path, n)
    for start in range(0, n, 300_000):  # windows, as the measuring ranks write them
        SampleSizes.write(path, start, values[start:start + 300_000])
    return path, values


def test_sizes_read_back_by_id_in_any_order(sizes_file):
    path, values = sizes_file
    sizes = SampleSizes(path, len(values))
    ids = np.random.default_rng(1).integers(0, len(values), 10_000)
    assert sizes[ids].tolist() == values[ids].tolist()
    assert sizes[5:9].tolist() == values[5:9].tolist()
    assert sizes[np.zeros(0, np.int64)].tolist() == []
    sizes.close()


@pytest.mark.parametrize("pattern", ["random", "sorted", "sequential"])
def test_a_rank_keeps_a_bounded_part_of_the_sizes_resident(sizes_file, monkeypatch, pattern):
    monkeypatch.setattr(sizes_module, "RESIDENT_BYTES", 2 << 20)
    monkeypatch.setattr(sizes_module, "_SPAN_IDS", (2 << 20) // 2 // 8)
    path, values = sizes_file
    sizes = SampleSizes(path, len(values))
    rng = np.random.default_rng(2)
    peak = 0
    for start in range(0, len(values), 200_000):
        if pattern == "sequential":
            ids = np.arange(start, start + 200_000)
        else:
            ids = rng.integers(0, len(values), 200_000)
            ids = np.sort(ids) if pattern == "sorted" else ids
        assert np.array_equal(sizes[ids], values[ids])
        peak = max(peak, _mapped_kib(path))
    # the whole file is 16 MB: at most the bound, a span's fault-around past it
    assert 0 < peak <= 2 * 1024 + 64, peak
    sizes.close()
