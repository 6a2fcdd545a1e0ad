"""Micro-benchmarks of the compiled kernels."""

import numpy as np

from hpcio._core import _codecs, _index


class Bisect:
    params = [[100, 10000], [1000, 1000000]]
    param_names = ["shards", "ids"]

    def setup(self, shards, ids):
        rng = np.random.default_rng(0)
        counts = rng.integers(0, 2000, size=shards).astype(np.uint64)
        self.cum = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint64)
        self.ids = rng.integers(0, int(self.cum[-1]), size=ids).astype(np.uint64)

    def time_bisect_ids(self, shards, ids):
        _index.bisect_ids(self.cum, self.ids)


class ZstdDecode:
    params = [[256, 4096, 65536], [1, 2]]
    param_names = ["value_bytes", "threads"]

    def setup(self, value_bytes, threads):
        rng = np.random.default_rng(0)
        words = rng.choice([b"lorem", b"ipsum", b"dolor", b"sit", b"amet", b"data"], size=value_bytes)
        frames = [_codecs.zstd_compress(b" ".join(np.roll(words, i))[:value_bytes], 3, True) for i in range(2000)]
        self.src = b"".join(frames)
        lens = np.array([len(f) for f in frames], dtype=np.uint64)
        self.ends = np.cumsum(lens).astype(np.uint64)
        self.starts = (self.ends - lens).astype(np.uint64)
        self.total = 2000 * value_bytes

    def time_decode_many(self, value_bytes, threads):
        _codecs.zstd_decode_many(self.src, self.starts, self.ends, nthreads=threads)

    def track_decode_bandwidth(self, value_bytes, threads):
        import time

        t = time.perf_counter()
        _codecs.zstd_decode_many(self.src, self.starts, self.ends, nthreads=threads)
        return self.total / (time.perf_counter() - t) / 1e6

    track_decode_bandwidth.unit = "MB/s"


class ScanLines:
    def setup(self):
        rng = np.random.default_rng(0)
        lines = [b"x" * int(n) + b"\n" for n in rng.integers(10, 2000, size=20000)]
        self.buf = b"".join(lines)

    def time_scan_lines(self):
        _index.scan_lines(self.buf)
