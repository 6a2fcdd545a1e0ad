"""The machine's physical limits, measured next to every benchmark.

A throughput means little alone; next to the page-cache read bandwidth of the same
files, the single-thread zstd decode bandwidth and the cost of merely building the
result dicts from bytes already in memory, it says how close to the floor a reader is.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time

import numpy as np

from ..formats.jinx import sidecar_path

__all__ = [
    "dict_floor",
    "median_time",
    "memory_copy_scaling",
    "page_cache_read_bandwidth",
    "settle_page_cache",
    "zstd_decode_bandwidth",
]


def median_time(fn, repeats: int = 5) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def dataset_files(path: str) -> list[str]:
    """The files of a dataset: a directory's tree, or a single file and its ``.binx``
    sidecar (where a JINX file keeps its binary values)."""
    if os.path.isfile(path):
        sidecar = sidecar_path(path)
        return [path] + ([sidecar] if os.path.isfile(sidecar) else [])
    return sorted(
        os.path.join(root, n) for root, _d, names in os.walk(path) for n in names
    )


def settle_page_cache(path: str) -> None:
    """Drop the files of dataset ``path`` from the page cache and read them back in
    through a huge-page mapping (:func:`hpcio._core._io.map_file`).

    A cached file costs a mapping reader one page fault per cached page run, so a file
    held in 2 MiB pages maps with a small fraction of the faults of one in 4 KiB pages.
    Which one a file is in depends on its history: hpcio's writers and
    ``hpcio stage`` write in large pieces and leave 2 MiB pages, ``cp`` and ``read()``
    after an eviction leave small ones.  Every run starts from the same state this way:
    the one hpcio's writers leave and its readers restore.
    """
    from .._core import _io

    populate = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux 5.14; the constant is newer
    for name in dataset_files(path):
        with open(name, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                continue
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            m = _io.map_file(f.fileno())
        try:
            m.madvise(populate)
        except OSError:  # an older kernel: fault every page in
            view = np.frombuffer(m, np.uint8)
            int(view[:: mmap.PAGESIZE].sum())
            del view
        m.close()


def page_cache_read_bandwidth(path: str, repeats: int = 3) -> dict:
    """Bytes/s reading every file under ``path`` from the (warmed) page cache.

    Reads with ``readinto`` into one reused 8 MiB buffer: the ceiling for any reader
    that must bring the bytes into user space.
    """
    files = dataset_files(path)
    total = sum(os.path.getsize(f) for f in files)
    buf = bytearray(8 << 20)
    view = memoryview(buf)

    def read_all():
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                while fh.readinto(view):
                    pass

    read_all()  # warm the cache: the benchmarks also run warm
    seconds = median_time(read_all, repeats)
    return {"bytes": total, "seconds": seconds, "bytes_per_s": total / seconds if seconds else float("inf")}


def zstd_decode_bandwidth(sample: bytes, level: int = 3, repeats: int = 5) -> dict:
    """Single-thread zstd decode bandwidth (output bytes/s) on data like ``sample``."""
    from .._core import _codecs

    data = (sample * (max(1, (32 << 20) // max(1, len(sample)))))[: 32 << 20]
    frame = _codecs.zstd_compress(data, level, True)
    seconds = median_time(lambda: _codecs.zstd_decompress(frame, len(data)), repeats)
    return {"bytes": len(data), "seconds": seconds, "bytes_per_s": len(data) / seconds}


def dict_floor(raw_samples: list[dict], repeats: int = 3) -> dict:
    """Samples/s of building the benchmark's sample dicts from bytes already in memory.

    ``raw_samples`` maps each field to its stored bytes plus how the field becomes a
    Python value (``("str", b)``, ``("int", b)``, ``("json", b)``, ``("bytes", b)``, and
    ``("bytes_list", [b, ...])`` for a list of bytes).  This is the work no reader can
    avoid: creating the str/int/dict/bytes objects.
    """
    import orjson

    makers = {
        "str": lambda b: b.decode("utf-8"),
        "int": lambda b: int.from_bytes(b, "little", signed=True),
        "json": orjson.loads,
        "bytes": bytes,
        "bytes_list": lambda parts: [bytes(b) for b in parts],
    }
    prepared = [[(k, makers[kind], b) for k, (kind, b) in s.items()] for s in raw_samples]

    def build():
        for fields in prepared:
            d = {k: make(b) for k, make, b in fields}
            for k in d:
                d[k]

    seconds = median_time(build, repeats)
    n = len(raw_samples)
    return {"samples": n, "seconds": seconds, "samples_per_s": n / seconds if seconds else float("inf")}


# One process copying a warm buffer over and over for a while; prints the median bytes/s.
_COPY_SCRIPT = """
import json, sys, time
import numpy as np
src = np.ones(int(sys.argv[1]), np.uint8); dst = src.copy()
rates, end = [], time.perf_counter() + float(sys.argv[2])
while time.perf_counter() < end:
    t = time.perf_counter(); np.copyto(dst, src); rates.append(len(src) / (time.perf_counter() - t))
print(json.dumps(float(np.median(rates))))
"""


def memory_copy_scaling(nbytes: int = 64 << 20, seconds: float = 1.0) -> dict:
    """Bytes/s one process copies a warm ``nbytes`` buffer with, alone and with a second
    process copying at the same time (the median copy of each over ``seconds``).

    Two ranks on one node share its memory bandwidth: a job whose time goes into copying
    (decoding Parquet into buffers, packing records, writing them to the page cache)
    cannot scale from one rank to two by more than ``scaling``, the two processes'
    bandwidth over one's."""

    def run(count: int) -> list[float]:
        procs = [subprocess.Popen([sys.executable, "-c", _COPY_SCRIPT, str(nbytes), str(seconds)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(count)]
        return [json.loads(p.communicate()[0]) for p in procs]

    (one,) = run(1)
    two = run(2)
    return {"bytes": nbytes, "one_bytes_per_s": one, "two_bytes_per_s": two, "scaling": sum(two) / one}
