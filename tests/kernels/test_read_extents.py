"""hpcio_read_extents: a batch's extents read as planned, concurrent requests."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hpcio._core import _io
from hpcio.errors import TruncatedShardError


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(7)
    paths, data = [], []
    for k, size in enumerate((300_000, 1, 70_000)):
        blob = rng.bytes(size)
        path = tmp_path / f"f{k}.bin"
        path.write_bytes(blob)
        paths.append(str(path))
        data.append(blob)
    fds = [os.open(p, os.O_RDONLY) for p in paths]
    yield fds, paths, data
    for fd in fds:
        os.close(fd)


def _extents(data, n, seed):
    """``n`` random extents (duplicates, neighbours and empty ones included)."""
    rng = np.random.default_rng(seed)
    file = rng.integers(0, len(data), size=n).astype(np.uint32)
    off, length = np.empty(n, np.uint64), np.empty(n, np.uint64)
    for j, f in enumerate(file):
        size = len(data[f])
        a = int(rng.integers(0, size))
        off[j], length[j] = a, int(rng.integers(0, min(size - a, 5000) + 1))
    file[::7], off[::7], length[::7] = file[0], off[0], length[0]  # the same record again
    out = np.zeros(n, np.uint64)
    out[1:] = np.cumsum(length)[:-1]
    return file, off, length, out


@pytest.mark.parametrize("max_gap,max_request,depth", [
    (0, 0, 1), (0, 0, 8), (4096, 0, 4), (1 << 20, 64 << 10, 16), (1 << 20, 1, 3),
])
def test_every_extent_lands_where_asked(files, max_gap, max_request, depth):
    fds, paths, data = files
    file, off, length, out = _extents(data, 400, seed=depth)
    dst = np.full(int(length.sum()) + 13, 0xAB, np.uint8)
    requests, nbytes = _io.read_extents(fds, paths, file, off, length, out, dst,
                                        max_gap=max_gap, max_request=max_request, depth=depth)
    for j in range(len(file)):
        got = dst[int(out[j]): int(out[j] + length[j])].tobytes()
        assert got == data[file[j]][int(off[j]): int(off[j] + length[j])], j
    assert (dst[-13:] == 0xAB).all()  # nothing written past the extents
    assert 1 <= requests <= len(file)
    assert nbytes >= int(np.unique(np.stack([file, off, length]), axis=1)[2].sum())


def test_neighbours_join_into_one_request_per_file_and_gaps_are_read(files):
    fds, paths, data = files
    # 30 records of 1000 bytes back to back in file 0, given in reverse order, and two in
    # file 2 with a 100-byte gap between them
    file = np.array([0] * 30 + [2, 2], np.uint32)
    off = np.array([1000 * k for k in range(29, -1, -1)] + [500, 1600], np.uint64)
    length = np.array([1000] * 30 + [1000, 50], np.uint64)
    out = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.uint64)
    dst = np.empty(int(length.sum()), np.uint8)
    assert _io.read_extents(fds, paths, file, off, length, out, dst, max_gap=100, depth=4) == (2, 30_000 + 1150)
    assert _io.read_extents(fds, paths, file, off, length, out, dst, max_gap=99, depth=4) == (3, 30_000 + 1050)
    # a request never grows past max_request: 30 KB in 8 KB requests is four of them
    assert _io.read_extents(fds, paths, file[:30], off[:30], length[:30], out[:30], dst,
                            max_request=8000) == (4, 30_000)
    assert dst[: 1000].tobytes() == data[0][29_000:30_000]


def test_an_extent_past_the_end_of_its_file_names_file_and_offset(files):
    fds, paths, data = files
    file = np.array([0, 2], np.uint32)
    off = np.array([0, 69_990], np.uint64)
    length = np.array([10, 20], np.uint64)
    dst = np.empty(30, np.uint8)
    with pytest.raises(TruncatedShardError) as info:
        _io.read_extents(fds, paths, file, off, length, np.array([0, 10], np.uint64), dst, depth=2)
    assert str(info.value) == (f"file ends after 10 of the 20 bytes expected at byte 69990 "
                               f"({paths[2]}, byte offset 70000)")


def test_bad_arguments_are_refused_before_reading(files):
    fds, paths, _ = files
    one = np.array([0], np.uint64)
    with pytest.raises(ValueError, match="extent names file 5 of 3"):
        _io.read_extents(fds, paths, np.array([5], np.uint32), one, one + 1, one, np.empty(4, np.uint8))
    with pytest.raises(BufferError, match="extent of 8 bytes does not fit the output at 0 \\(4 bytes\\)"):
        _io.read_extents(fds, paths, np.array([0], np.uint32), one, one + 8, one, np.empty(4, np.uint8))
    assert _io.read_extents(fds, paths, [], [], [], [], np.empty(0, np.uint8)) == (0, 0)
