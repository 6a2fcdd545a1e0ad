"""Reading: format × compression × reader × operation × storage tier × page cache.

``cold`` runs start with the dataset's files evicted from the page cache (checked with
``mincore``), so a tier comparison measures the tier; ``warm`` ones read what the
previous run left cached.  Each measurement is one pass (``number = 1``), so every cold
pass follows its own eviction.
"""

import numpy as np

import hpcio
from hpcio.bench.limits import dataset_files
from hpcio.bench.pagecache import evict, resident

from .common import BATCH, CONFIGS, dataset_path, ensure_datasets, tiers, touch

META = {"text": ["id", "meta"], "vlm": ["id", "messages"]}


class Read:
    params = (list(tiers()), ["text", "vlm"], list(CONFIGS),
              ["iterate", "iterate-meta", "shuffle", "sort", "batch", "columns"], ["cold", "warm"])
    param_names = ["tier", "profile", "config", "op", "cache"]
    timeout = 600
    number = 1

    def setup_cache(self):
        ensure_datasets()

    def setup(self, tier, profile, config, op, cache):
        self.path = dataset_path(tier, profile, config)
        options = {"lazy": True} if config.startswith("jinx") else {}
        self.open = lambda: hpcio.open(self.path, **options)
        if cache == "cold":
            files = dataset_files(self.path)
            evict(files)
            left = resident(files).fraction
            if left > 0.01:
                # tmpfs (/dev/shm) keeps its pages: a cold figure there would be a warm one
                raise NotImplementedError(f"{tier}: {left:.0%} of the files stay cached after eviction")

    def _run(self, profile, op):
        ds = self.open()
        total = 0
        if op == "iterate":
            for s in ds:
                total += touch(s)
        elif op == "iterate-meta":
            for s in ds.select(META[profile]):
                total += touch(s)
        elif op == "shuffle":
            for s in ds.shuffle(seed=42):
                total += touch(s)
        elif op == "sort":
            for s in ds.sort(len, field="messages" if profile == "vlm" else "text"):
                total += touch(s)
        elif op == "batch":
            perm = np.random.default_rng(42).permutation(len(ds))
            for lo in range(0, len(ds), BATCH):
                for s in ds.get_batch(perm[lo : lo + BATCH]):
                    total += touch(s)
        else:
            perm = np.random.default_rng(42).permutation(len(ds))
            for lo in range(0, len(ds), BATCH):
                total += touch(ds.get_columns(perm[lo : lo + BATCH]))
        return total

    def time_read(self, tier, profile, config, op, cache):
        self._run(profile, op)

    def peakmem_read(self, tier, profile, config, op, cache):
        self._run(profile, op)

    def track_samples_per_second(self, tier, profile, config, op, cache):
        import time

        t = time.perf_counter()
        ds_len = len(self.open())
        self._run(profile, op)
        return ds_len / (time.perf_counter() - t)

    track_samples_per_second.unit = "samples/s"
