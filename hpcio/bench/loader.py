"""The calculation-free I/O test: a PyTorch DataLoader over each format and storage tier.

Training is emulated as DLIO and MLPerf Storage do: the loop sleeps for the compute time
of each batch it receives (``compute_per_sample * len(batch)``), so the reader has that
long to prepare the next batches in its workers.  The figure of merit is the accelerator
utilisation ``AU = compute time / wall time`` of one epoch: 1.0 means the accelerator
never waited for data.  The wall time includes starting the workers, as a real epoch does.

Workers read with :class:`hpcio.torch.IterableDataset` (one ``get_batch`` per batch, global
shuffle) and hand the main process plain dicts, which is what a training step receives.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from ..errors import InvalidArgumentError
from ..errors import InvalidArgumentError
from ..formats.jinx import sidecar_path
from .limits import dataset_files, settle_page_cache
from .pagecache import evict, resident

__all__ = ["tier_roots", "run_dataloader_sweep", "LOADER_FORMATS"]

# hpcio configurations with random access (webdataset is stream-only)
LOADER_FORMATS = ("mds", "mds-sample-zstd", "jinx", "jinx-bin", "jinx-zst-bin", "parquet")


def tier_roots(env=None) -> dict[str, str]:
    """Storage tiers to compare: ``HPCIO_TIERS="name=path,..."``, else a temp dir and /dev/shm."""
    env = os.environ if env is None else env
    spec = env.get("HPCIO_TIERS", "")
    if spec.strip():
        out = {}
        for item in filter(None, (s.strip() for s in spec.split(","))):
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise InvalidArgumentError(f"HPCIO_TIERS entry {item!r} is not name=path")
            out[name] = path
        return out
    out = {"tmp": tempfile.gettempdir()}
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        out["shm"] = "/dev/shm"
    return out


def _plain(value):
    """A lazy reader's mapping proxies and views as the plain objects a training step gets."""
    if hasattr(value, "keys"):
        return {k: _plain(value[k]) for k in value.keys()}
    if isinstance(value, memoryview):
        return value.tobytes()
    return value


def collate_plain(samples):
    """DataLoader collate: every field of every sample read, returned as plain dicts."""
    return [_plain(s) for s in samples]


def _epoch(path, options, *, batch_size, workers, prefetch, compute_per_sample) -> dict:
    import hpcio
    import hpcio.torch

    ds = hpcio.open(path, **options)
    source = hpcio.torch.IterableDataset(ds, batch_size=batch_size, shuffle=True, seed=42,
                                         collate_fn=collate_plain, context={"rank": 0, "world_size": 1})
    kwargs = {"num_workers": workers}
    if workers:
        kwargs["prefetch_factor"] = prefetch
    loader = hpcio.torch.DataLoader(source, **kwargs)
    samples = 0
    compute = 0.0
    t0 = time.perf_counter()
    for batch in loader:
        samples += len(batch)
        pause = compute_per_sample * len(batch)
        t = time.perf_counter()
        time.sleep(pause)
        compute += time.perf_counter() - t
    wall = time.perf_counter() - t0
    return {"samples": samples, "wall_s": wall, "compute_s": compute,
            "samples_per_s": samples / wall if wall else float("inf"),
            "au": compute / wall if wall else 0.0}


def run_dataloader_sweep(
    datasets,
    profile: str,
    *,
    tiers: dict[str, str] | None = None,
    formats=LOADER_FORMATS,
    workers=(0, 1, 2),
    batch_sizes=(32, 256),
    prefetch_factors=(2, 8),
    compute_per_sample: float = 50e-6,
    cache: str = "cold",
    log=print,
) -> list[dict]:
    """DataLoader epochs over every (tier, format, num_workers, batch size, prefetch_factor).

    Parameters
    ----------
    datasets : list of hpcio.bench.data.BenchDataset
        The prepared datasets of ``profile``; each chosen one is copied to every tier.
    compute_per_sample : float
        Emulated accelerator seconds per sample (slept once per batch).
    cache : {"cold", "warm"}
        ``"cold"``: every epoch starts with the dataset's files evicted from the page
        cache (checked with ``mincore``; the fraction still resident is recorded), as a
        first epoch from a parallel filesystem does. ``"warm"``: the files are settled in
        the page cache once, before the first epoch.

    Returns
    -------
    list of dict
        One record per configuration: samples/s, AU, wall and compute seconds.
    """
    if cache not in ("cold", "warm"):
        raise InvalidArgumentError(f"cache must be 'cold' or 'warm', got {cache!r}")
    tiers = tier_roots() if tiers is None else tiers
    chosen = [d for d in datasets if d.name in formats]
    records = []
    for tier, root in tiers.items():
        scratch = tempfile.mkdtemp(prefix="hpcio-bench-loader-", dir=root)
        try:
            for d in chosen:
                path = os.path.join(scratch, d.name)
                if os.path.isdir(d.path):
                    shutil.copytree(d.path, path)
                else:  # a single-file JINX dataset travels with its binary sidecar
                    shutil.copy(d.path, path)
                    if os.path.exists(sidecar_path(d.path)):
                        shutil.copy(sidecar_path(d.path), sidecar_path(path))
                files = dataset_files(path)
                if cache == "warm":
                    settle_page_cache(path)  # as the comparison's datasets are
                options = {"lazy": True} if d.name.startswith("jinx") else {}
                for w in workers:
                    for bs in batch_sizes:
                        for pf in (prefetch_factors if w else (None,)):
                            rec = {"profile": profile, "tier": tier, "dataset": d.name, "workers": w,
                                   "batch_size": bs, "prefetch_factor": pf,
                                   "compute_per_sample_s": compute_per_sample, "cache": cache}
                            if cache == "cold":
                                evict(files)
                                rec["resident_before"] = resident(files).fraction
                            try:
                                rec.update(_epoch(path, options, batch_size=bs, workers=w, prefetch=pf,
                                                  compute_per_sample=compute_per_sample))
                            except Exception as exc:  # one failing configuration must not hide the rest
                                last = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
                                rec.update(error=f"{type(exc).__name__}: {last}", samples=0,
                                           samples_per_s=0.0, au=0.0)
                            log(f"  loader {profile:5s} {tier:6s} {d.name:16s} {cache} workers={w} batch={bs:<4d} "
                                f"prefetch={pf}  {rec['samples_per_s']:>10,.0f} samples/s  AU {rec['au']:.2f}")
                            records.append(rec)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return records
