"""Writers on a full disk: whether the write or the final flush in ``close()`` fails,
no partial output is left behind, and the HDF5 writer fails cleanly instead of crashing
inside HDF5.  The disk is a real tmpfs of a few hundred KiB (mounting needs root)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hpcio
from hpcio.errors import WriterSpaceError

FILLER = "filler"

# (format, output name, writer options)
CASES = [
    ("mds", "out", {}),
    ("jinx", "out.jinx", {}),
    ("jinx", "out", {"shard_size": 1 << 20, "binary_threshold": 64}),
    ("webdataset", "out", {}),
    ("zarr", "out", {}),
    ("hdf5", "out", {}),
    ("parquet", "out", {}),
    ("msgpack", "out", {}),
    ("jsonl", "out.jsonl", {}),
    ("jsonl", "out.jsonl.zst", {}),
]


@pytest.fixture
def tmpfs(mount_tmpfs):
    """A 512 KiB tmpfs; ``fill(leave)`` fills it until ``leave`` bytes stay free."""
    mnt = mount_tmpfs("tmpfs", "size=512k")

    def fill(leave: int) -> None:
        with open(mnt / FILLER, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        if leave:
            os.truncate(mnt / FILLER, os.path.getsize(mnt / FILLER) - leave)

    return mnt, fill


def samples(n: int, size: int):
    rng = np.random.default_rng(0)
    for i in range(n):
        yield {"id": i, "text": rng.bytes(size).hex()[:size]}


def write_all(path, fmt, options, n, size):
    with hpcio.open_writer(path, format=fmt, **options) as w:
        for s in samples(n, size):
            w.write(s)


def write_in_child(path, fmt, options, n, size) -> subprocess.CompletedProcess:
    """The same write in a child process, so a crash inside a library fails this test
    instead of killing the test run."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{tests!r}, {os.path.dirname(tests)!r}]
        from formats.test_full_disk import write_all
        try:
            write_all({str(path)!r}, {fmt!r}, {options!r}, {n}, {size})
        except Exception as exc:
            print(type(exc).__name__, exc)
        else:
            print("no error")
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("fmt,name,options", CASES, ids=[f"{c[0]}-{c[1]}-{len(c[2])}" for c in CASES])
@pytest.mark.parametrize("leave,n,size", [(0, 4, 100), (64 << 10, 400, 1000)], ids=["close", "write"])
def test_a_full_disk_leaves_no_partial_output(tmpfs, fmt, name, options, leave, n, size):
    if fmt in ("zarr", "hdf5", "parquet"):
        pytest.importorskip({"zarr": "zarr", "hdf5": "h5py", "parquet": "pyarrow"}[fmt])
    mnt, fill = tmpfs
    fill(leave)
    out = mnt / name
    if fmt == "hdf5":
        proc = write_in_child(out, fmt, options, n, size)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.startswith("WriterSpaceError HDF5 file needs"), proc.stdout + proc.stderr[-2000:]
    else:
        with pytest.raises(OSError) as info:
            write_all(out, fmt, options, n, size)
        assert info.value.errno in (errno.ENOSPC, None), info.value
    assert os.listdir(mnt) == [FILLER]


def test_hdf5_space_error_is_typed_and_names_the_file(tmpfs):
    pytest.importorskip("h5py")
    mnt, fill = tmpfs
    fill(0)
    with pytest.raises(WriterSpaceError, match=r"HDF5 file needs .* free \(.*/out/shard-000000.h5.tmp.\d+\)"):
        write_all(mnt / "out", "hdf5", {}, 4, 100)
    assert os.listdir(mnt) == [FILLER]


def test_hdf5_files_written_from_memory_read_back(tmp_path):
    pytest.importorskip("h5py")
    write_all(tmp_path / "ds", "hdf5", {"max_count": 3}, 7, 50)
    got = list(hpcio.open(tmp_path / "ds"))
    assert [s["id"] for s in got] == list(range(7))
    assert [s["text"] for s in got] == [s["text"] for s in samples(7, 50)]


def test_hpcio_convert_to_hdf5_on_a_full_disk_fails_cleanly(tmpfs, tmp_path, run_hpcio):
    pytest.importorskip("h5py")
    mnt, fill = tmpfs
    src = tmp_path / "src.jsonl"
    src.write_text("".join(f'{{"id": {s["id"]}, "text": "{s["text"]}"}}\n' for s in samples(3000, 200)))
    fill(128 << 10)
    proc = run_hpcio("convert", str(src), str(mnt / "out"), "--to", "hdf5")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "hpcio: error: HDF5 file needs" in proc.stderr and "Traceback" not in proc.stderr
    assert not (mnt / "out").exists()  # only the resumable partial state stays
