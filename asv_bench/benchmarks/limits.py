"""The machine's physical limits, tracked beside the readers so plots show the fraction reached."""

import os

from hpcio.bench.limits import page_cache_read_bandwidth, zstd_decode_bandwidth

from .common import dataset_path, ensure_datasets, tiers


class Limits:
    params = [list(tiers())]
    param_names = ["tier"]

    def setup_cache(self):
        ensure_datasets()

    def track_page_cache_read_MBps(self, tier):
        return page_cache_read_bandwidth(dataset_path(tier, "vlm", "mds"))["bytes_per_s"] / 1e6

    track_page_cache_read_MBps.unit = "MB/s"

    def track_zstd_decode_MBps(self, tier):
        return zstd_decode_bandwidth(os.urandom(64) * 4096 + b"lorem ipsum " * 8192)["bytes_per_s"] / 1e6

    track_zstd_decode_MBps.unit = "MB/s"
