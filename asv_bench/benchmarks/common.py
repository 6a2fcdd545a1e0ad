"""Shared set-up for the asv suite: storage tiers and cached demo datasets.

Tier roots come from ``HPCIO_TIERS`` ("name=path,name=path"), so the same suite runs on
a laptop, in CI and on a cluster, e.g.
``HPCIO_TIERS="work=$WORK/b,scratch=$SCRATCH/b,nvme=/local,shm=/dev/shm"``.
The default is a temporary directory on disk and /dev/shm.
"""

import os
import tempfile

import hpcio
from hpcio import demo

# Small enough that `asv run --quick` fits in CI; set HPCIO_ASV_SCALE to grow them.
SCALE = float(os.environ.get("HPCIO_ASV_SCALE", "1"))
SIZES = {"text": int(4000 * SCALE), "vlm": int(200 * SCALE)}
BATCH = 1024

CONFIGS = {
    "mds": ("mds", {}),
    "mds-sample-zstd": ("mds", {"compression": "sample::zstd"}),
    "jinx": ("jinx", {}),
    "jinx-zst-bin": ("jinx", {"compression": "zst", "binary_threshold": 256}),
}


def tiers():
    spec = os.environ.get("HPCIO_TIERS")
    if spec:
        return dict(item.split("=", 1) for item in spec.split(",") if item)
    out = {"disk": os.path.join(tempfile.gettempdir(), "hpcio-asv")}
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        out["shm"] = "/dev/shm/hpcio-asv"
    return out


def dataset_path(tier, profile, config):
    return os.path.join(tiers()[tier], f"{profile}-{SIZES[profile]}", config)


def ensure_datasets(profiles=("text", "vlm")):
    """Write every (tier, profile, config) once; later runs reuse them."""
    for tier in tiers():
        for profile in profiles:
            samples = None
            for config, (fmt, options) in CONFIGS.items():
                path = dataset_path(tier, profile, config)
                if os.path.exists(path):
                    continue
                if samples is None:
                    samples = list(demo.generate(profile, SIZES[profile]))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with hpcio.open_writer(path, format=fmt, **options) as w:
                    for s in samples:
                        w.write(s)


def touch(sample):
    n = 0
    for k in sample.keys():
        v = sample[k]
        n += len(v) if hasattr(v, "__len__") else 1
    return n
