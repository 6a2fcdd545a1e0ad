"""The calculation-free I/O test: a PyTorch DataLoader over each format and storage tier.

Training is emulated as DLIO and MLPerf Storage do: the loop sleeps for the compute time
of each batch it receives (``compute_per_sample * len(batch)``), so the reader has that
long to prepare the next batches in its workers.  The figure of merit is the accelerator
utilisation ``AU = compute time / wall time`` of one epoch: 1.0 means the accelerator
never waited for data.  The wall time includes starting the workers and the first batch's
read, as a real epoch does; ``au_steady`` and ``samples_per_s_steady`` count from the
first batch's arrival, the regime of an epoch much longer than the benchmark's.

Workers read with :class:`hpcio.torch.IterableDataset` (one ``get_batch`` per batch, global
shuffle) and hand the main process plain dicts, which is what a training step receives.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time

from ..errors import InvalidArgumentError
from ..formats.jinx import sidecar_path
from .limits import dataset_files, settle_page_cache
from .pagecache import evict, resident
from .tier import cache_source

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

    with hpcio.open(path, **options) as ds:  # closed: an open file keeps the emulated tier mounted
        source = hpcio.torch.IterableDataset(ds, batch_size=batch_size, shuffle=True, seed=42,
                                             collate_fn=collate_plain, context={"rank": 0, "world_size": 1})
        kwargs = {"num_workers": workers}
        if workers:
            kwargs["prefetch_factor"] = prefetch
        loader = hpcio.torch.DataLoader(source, **kwargs)
        samples = 0
        compute = 0.0
        first = None
        t0 = time.perf_counter()
        for batch in loader:
            if first is None:
                first = time.perf_counter() - t0
            samples += len(batch)
            pause = compute_per_sample * len(batch)
            t = time.perf_counter()
            time.sleep(pause)
            compute += time.perf_counter() - t
        wall = time.perf_counter() - t0
    steady = wall - (first or 0.0)
    return {"samples": samples, "wall_s": wall, "compute_s": compute, "first_batch_s": first,
            "samples_per_s": samples / wall if wall else float("inf"),
            "au": compute / wall if wall else 0.0,
            "samples_per_s_steady": samples / steady if steady else float("inf"),
            "au_steady": compute / steady if steady else 0.0}


@contextlib.contextmanager
def _tier_scratch(root: str, emulated: dict | None):
    """A scratch directory under ``root`` to copy the datasets to, and the directory to
    read them from: the same one, or its mount through the emulated tier (``emulated``:
    keyword arguments of :class:`~hpcio.bench.tier.EmulatedTier`)."""
    scratch = tempfile.mkdtemp(prefix="hpcio-bench-loader-", dir=root)
    try:
        if emulated is None:
            yield scratch, lambda name: os.path.join(scratch, name)
        else:
            from .tier import EmulatedTier

            with EmulatedTier(scratch, **emulated) as tier:
                yield scratch, tier.path
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _copy_dataset(d, path: str) -> None:
    if os.path.isdir(d.path):
        shutil.copytree(d.path, path)
    else:  # a single-file JINX dataset travels with its binary sidecar
        shutil.copy(d.path, path)
        if os.path.exists(sidecar_path(d.path)):
            shutil.copy(sidecar_path(d.path), sidecar_path(path))


def run_dataloader_sweep(
    datasets,
    profile: str,
    *,
    tiers: dict[str, str] | None = None,
    emulated_tier: dict | None = None,
    formats=LOADER_FORMATS,
    workers=(0, 1, 2),
    batch_sizes=(32, 256),
    prefetch_factors=(2, 8),
    compute_per_sample=(50e-6,),
    cache: str = "cold",
    log=print,
) -> list[dict]:
    """DataLoader epochs over every (tier, format, compute, num_workers, batch size,
    prefetch_factor).

    Parameters
    ----------
    datasets : list of hpcio.bench.data.BenchDataset
        The prepared datasets of ``profile``; each chosen one is copied to every tier.
    emulated_tier : dict, optional
        Adds the tier ``"emulated"``: the datasets copied to a temporary directory and
        read through :class:`~hpcio.bench.tier.EmulatedTier` with these keyword
        arguments (``latency_us``, ``bandwidth``).
    compute_per_sample : float or sequence of float
        Emulated accelerator seconds per sample (slept once per batch), each swept.
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
    tiers = dict(tier_roots() if tiers is None else tiers)
    emulation: dict[str, dict | None] = {name: None for name in tiers}
    if emulated_tier is not None:
        tiers["emulated"], emulation["emulated"] = tempfile.gettempdir(), emulated_tier
    computes = (compute_per_sample,) if isinstance(compute_per_sample, (int, float)) else tuple(compute_per_sample)
    chosen = [d for d in datasets if d.name in formats]
    configs = [(c, w, bs, pf) for c in computes for w in workers for bs in batch_sizes
               for pf in (prefetch_factors if w else (None,))]
    records = []
    for tier, root in tiers.items():
        with _tier_scratch(root, emulation[tier]) as (scratch, read_path):
            for d in chosen:
                _copy_dataset(d, os.path.join(scratch, d.name))
                path = read_path(d.name)
                files = dataset_files(path)
                nbytes = sum(os.path.getsize(f) for f in files)
                if cache == "warm":
                    settle_page_cache(path)  # as the comparison's datasets are
                options = {"lazy": True} if d.name.startswith("jinx") else {}
                for c, w, bs, pf in configs:
                    rec = {"profile": profile, "tier": tier, "dataset": d.name, "workers": w,
                           "batch_size": bs, "prefetch_factor": pf, "compute_per_sample_s": c, "cache": cache}
                    if emulation[tier] is not None:
                        rec["tier_source_resident"] = cache_source(dataset_files(os.path.join(scratch, d.name)))
                    if cache == "cold":
                        evict(files)
                        rec["resident_before"] = resident(files).fraction
                    try:
                        rec.update(_epoch(path, options, batch_size=bs, workers=w, prefetch=pf,
                                          compute_per_sample=c))
                        rec["bytes_per_s"] = nbytes / rec["wall_s"] if rec["wall_s"] else float("inf")
                    except Exception as exc:  # one failing configuration must not hide the rest
                        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
                        rec.update(error=f"{type(exc).__name__}: {last}", samples=0, samples_per_s=0.0, au=0.0)
                    log(f"  loader {profile:5s} {tier:8s} {d.name:16s} {cache} compute={c * 1e6:g}us workers={w} "
                        f"batch={bs:<4d} prefetch={pf}  {rec['samples_per_s']:>10,.0f} samples/s  AU {rec['au']:.2f}"
                        f" (steady {rec.get('au_steady', 0.0):.2f})")
                    records.append(rec)
    return records
