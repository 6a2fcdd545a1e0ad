"""The node-cache row: bytes a node-local shard cache smaller than the dataset makes the
shared tier serve, hpcio's :class:`hpcio.NodeCache` beside mosaicml-streaming's and
litdata's caches, on the same samples behind the same emulated tier.

Set-up, once per parameter set (reused while its stamp matches): ``shards`` MDS shards of
about ``shard_bytes``, written by hpcio, of samples ``{"id": int, "data": bytes}`` of
``sample_bytes`` random bytes each; the same samples written as litdata chunks of
``shard_bytes`` by litdata's own ``optimize()``.  Both live under one directory that
:class:`~hpcio.bench.tier.EmulatedTier` serves with a latency per request and a bandwidth
cap, and with ``client_cache=False``: every open of a file reads it from the tier again,
so a shard fetched twice is served twice, as on a node whose memory is far smaller than
the dataset.

Each run, in a fresh process, starts cold (the tier's files evicted from the page cache
and checked with ``mincore``, the cache directory new and empty) and reads ``epochs``
epochs with a cache limit of ``fraction`` of the dataset's bytes, in one of two orders:

- ``global``: every sample after any other.  hpcio: ``hpcio.torch.IterableDataset(ds,
  shuffle="global")``, one epoch after the other (``set_epoch``); streaming:
  ``shuffle_algo="naive"`` (a permutation of all samples); litdata has no global shuffle
  and is left out of this order.
- ``block``: shards in a random order, samples shuffled within each shard.  hpcio: the
  same adapter with ``shuffle="block"``; streaming: ``shuffle_algo="py1s"``; litdata:
  ``shuffle=True`` (chunks in a random order, items shuffled within each chunk).

hpcio runs with ``policy="belady"`` (the cache learns the order from the epochs the
adapter announces: the current one and the next) and ``policy="lru"``; hpcio and
streaming read in batches of hpcio's read batch (its reader's ``batch_size``).  Per
epoch each run reports the bytes the tier served (its own counter,
:func:`~hpcio.bench.tier.tier_stats`) as a multiple of the dataset's bytes, samples/s,
the seconds spent inside ``next()`` and, for hpcio, the seconds its cache waited for
fetches (``cache.stats()["wait_s"]``).  Beside each stands the Belady minimum of the
shard sequence that run delivered (:func:`hpcio.nodecache.simulate`): the fewest bytes a
cache of that limit fetches serving that sequence one sample at a time (a cache that
fetches a batch's shards together, in another order, may fetch a little less).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from ..errors import BenchmarkError, InvalidArgumentError

__all__ = ["node_cache_figures", "prepare_node_cache_data", "markdown", "SHARDS", "SHARD_BYTES", "SAMPLE_BYTES",
           "FRACTION", "EPOCHS", "LATENCY_US", "BANDWIDTH", "ORDERS", "SYSTEMS"]

SHARDS = 64
SHARD_BYTES = 4 << 20
# 16 samples a shard: a global shuffle then fetches each shard several times an epoch
# (the Belady minimum is about 7 dataset sizes at a quarter of the dataset), which
# keeps a default run to a few minutes at 200 MB/s
SAMPLE_BYTES = 256 << 10
FRACTION = 0.25
EPOCHS = 2
LATENCY_US = 1000
BANDWIDTH = 200_000_000
SEED = 17
ORDERS = ("global", "block")
SYSTEMS = ("hpcio belady", "hpcio lru", "streaming", "litdata")
STAMP_VERSION = 3
RUN_TIMEOUT_S = 1800
# room for each record's own bytes (offset, lengths, id) and each shard's header, so that
# a shard of ``shard_bytes`` holds ``shard_bytes // sample_bytes`` samples
_RECORD_SLACK = 64
_HEADER_SLACK = 4096
_CACHE_COUNTERS = ("fetched_bytes", "fetches", "hits", "misses", "evictions", "wait_s", "prefetched", "over_limit",
                   "prefetch_errors")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_GLOBAL_LITDATA = ("litdata has no global shuffle: its shuffle=True permutes the chunks, then the items "
                     "within each chunk (the block order)")


# --- the datasets ----------------------------------------------------------------------
def _layout_mds(path: str) -> dict:
    with open(os.path.join(path, "index.json")) as f:
        shards = json.load(f)["shards"]
    return {"counts": [s["samples"] for s in shards], "bytes": [s["raw_data"]["bytes"] for s in shards]}


def _layout_litdata(path: str) -> dict:
    with open(os.path.join(path, "index.json")) as f:
        chunks = json.load(f)["chunks"]
    return {"counts": [c["chunk_size"] for c in chunks], "bytes": [c["chunk_bytes"] for c in chunks]}


def _litdata_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("litdata")
    except PackageNotFoundError:
        return None


def prepare_node_cache_data(root: str, *, shards: int = SHARDS, shard_bytes: int = SHARD_BYTES,
                            sample_bytes: int = SAMPLE_BYTES, log=print) -> dict:
    """Write (or reuse) the MDS dataset and its litdata copy under ``root``; returns the
    set-up: paths, sample count, each dataset's layout (samples and bytes per shard) and,
    when litdata's chunks could not be written, ``litdata_error``."""
    import hpcio

    per_shard = shard_bytes // sample_bytes if sample_bytes else 0
    payload = (shard_bytes - _HEADER_SLACK) // per_shard - _RECORD_SLACK if per_shard else 0
    if payload < 1 or shards < 1:
        raise InvalidArgumentError(f"expected shards >= 1 and 0 < sample_bytes <= shard_bytes - "
                                   f"{_HEADER_SLACK + _RECORD_SLACK}, got {shards} shards, sample_bytes "
                                   f"{sample_bytes}, shard_bytes {shard_bytes}")
    root = os.path.abspath(root)
    key = {"version": STAMP_VERSION, "hpcio": hpcio.__version__, "shards": shards, "shard_bytes": shard_bytes,
           "sample_bytes": sample_bytes, "litdata": _litdata_version()}
    stamp_path = os.path.join(root, "node-cache.json")
    if os.path.exists(stamp_path):
        with open(stamp_path) as f:
            stamp = json.load(f)
        if stamp.get("key") == key:
            log(f"  node-cache: reusing the datasets under {root}")
            return stamp["setup"]
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    mds = os.path.join(root, "mds")
    n = shards * per_shard
    rng = np.random.default_rng(SEED)
    log(f"  node-cache: writing {n:,} samples of {payload:,} bytes as {shards} MDS shards in {mds}")
    with hpcio.open_writer(mds, format="mds", columns={"id": "int", "data": "bytes"}, size_limit=shard_bytes) as w:
        for i in range(n):
            w.write({"id": i, "data": rng.bytes(payload)})
    layout = _layout_mds(mds)
    if layout["counts"] != [per_shard] * shards:
        raise BenchmarkError(f"expected {shards} shards of {per_shard} samples in {mds}, found {layout['counts']}")
    with hpcio.open(mds) as ds:
        batch = ds.reader.batch_size  # the samples of one read of hpcio's iteration
    setup = {"root": root, "mds": mds, "samples": n, "batch": batch, "payload_bytes": payload,
             "layouts": {"mds": layout}, **key}
    if key["litdata"] is None:
        setup["litdata_error"] = "litdata is not installed (pip install litdata; it is in the bench extra)"
    else:
        out = os.path.join(root, "litdata")
        rec, failure = _run_worker({"task": "write-litdata", "mds": mds, "out": out, "chunk_bytes": shard_bytes,
                                    "samples": n})
        if failure:
            setup["litdata_error"] = f"litdata optimize() failed: {failure}"
        else:
            setup.update(litdata=out, litdata_optimize_s=rec["optimize_s"])
            setup["layouts"]["litdata"] = _layout_litdata(out)
    if "litdata_error" in setup:
        log(f"  node-cache: {setup['litdata_error']}")
    with open(stamp_path, "w") as f:
        json.dump({"key": key, "setup": setup}, f, indent=1)
    return setup


def _litdata_items(mds: str, bounds: tuple[int, int]):
    """litdata's ``optimize`` function: samples ``bounds`` of the MDS dataset, as they are
    (module-level, so litdata's worker can import it)."""
    import hpcio

    with hpcio.open(mds) as ds:
        for i in range(*bounds):
            s = ds[i]
            yield {"id": int(s["id"]), "data": bytes(s["data"])}


def _write_litdata(spec: dict) -> dict:
    """The MDS samples as litdata chunks, written by litdata's ``optimize``, in order: item
    ``i`` is sample ``i`` (checked at each chunk's first item)."""
    import functools

    from litdata import StreamingDataset, optimize

    n = spec["samples"]
    step = max(1, -(-n // 64))
    inputs = [(a, min(a + step, n)) for a in range(0, n, step)]
    t = time.perf_counter()
    optimize(fn=functools.partial(_litdata_items, spec["mds"]), inputs=inputs, output_dir=spec["out"],
             chunk_bytes=spec["chunk_bytes"], num_workers=1, mode="overwrite", verbose=False)
    seconds = time.perf_counter() - t
    firsts = np.concatenate(([0], np.cumsum(_layout_litdata(spec["out"])["counts"])[:-1]))
    ds = StreamingDataset(spec["out"])
    wrong = [int(i) for i in firsts if ds[int(i)]["id"] != i]
    if len(ds) != n or wrong:
        raise BenchmarkError(f"litdata's chunks hold {len(ds)} items of the {n} written, out of order at {wrong[:5]}")
    return {"optimize_s": seconds}


# --- one run, in a fresh process -------------------------------------------------------
def _cached_bytes(directory: str) -> int:
    """Bytes of the regular files under ``directory`` (links to the tier not counted)."""
    total = 0
    for top, _dirs, names in os.walk(directory):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(os.path.join(top, name))
                if not os.path.islink(os.path.join(top, name)):
                    total += st.st_size
    return total


class _PeakWatch:
    """The most bytes ``directory`` held, sampled every ``interval`` seconds by a thread
    while the ``with`` block runs."""

    def __init__(self, directory: str, interval: float = 0.05):
        self.directory, self.interval, self.peak = directory, interval, 0

    def __enter__(self):
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while True:
            self.peak = max(self.peak, _cached_bytes(self.directory))
            if self._stop.wait(self.interval):
                return

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _epochs(epoch_iter, spec: dict, cache=None) -> list[dict]:
    """Read ``spec["epochs"]`` epochs of ``epoch_iter(epoch)``: per epoch the tier's
    bytes and requests, wall seconds, seconds inside ``next()``, the ids delivered in order,
    the most bytes the cache directory held and, with an hpcio ``cache``, the change of each
    of its counters."""
    out = []
    for epoch in range(spec["epochs"]):
        with _PeakWatch(spec["cache_dir"]) as watch:
            rec = _epoch(epoch_iter(epoch), spec, cache)
        rec.update(epoch=epoch, cache_dir_peak_bytes=watch.peak)
        out.append(rec)
    return out


def _epoch(epoch_iterable, spec: dict, cache=None) -> dict:
    """One epoch of ``epoch_iterable`` (see :func:`_epochs`)."""
    from .tier import tier_stats

    tier0 = tier_stats(spec["mount"])
    cache0 = cache.stats() if cache else None
    ids, size, in_next = [], 0, 0.0
    t0 = time.perf_counter()
    it = iter(epoch_iterable)
    while True:
        t = time.perf_counter()
        try:
            sample = next(it)
        except StopIteration:
            break
        in_next += time.perf_counter() - t
        ids.append(int(sample["id"]))
        size += len(sample["data"])
    wall = time.perf_counter() - t0
    if cache:
        # a fetch of the next epoch's shards in flight has tier bytes but no count yet
        cache.wait()
    tier1 = tier_stats(spec["mount"])
    rec = {"samples": len(ids), "data_bytes": size, "epoch_s": wall, "next_s": in_next,
           "tier_bytes": tier1["bytes"] - tier0["bytes"], "tier_requests": tier1["requests"] - tier0["requests"],
           "ids": ids}
    if cache:
        cache1 = cache.stats()
        # counters as the epoch's change, levels (resident bytes, the limit) as at its end
        rec["cache"] = {k: cache1[k] - cache0.get(k, 0) if k in _CACHE_COUNTERS else cache1[k] for k in cache1}
    return rec


def _hpcio_run(spec: dict) -> dict:
    import hpcio
    from hpcio.torch import IterableDataset

    cache = hpcio.NodeCache(spec["cache_dir"], limit=spec["limit"], policy=spec["policy"])
    ds = hpcio.open(spec["path"], cache=cache)
    # the adapter a training loop reads through: it announces each epoch's order, and the
    # next epoch's, to the cache
    adapter = IterableDataset(ds, batch_size=spec["batch"], shuffle=spec["order"], seed=spec["seed"],
                              collate_fn=list, context={"rank": 0, "world_size": 1})

    def epoch_iter(epoch):
        adapter.set_epoch(epoch)
        return (sample for batch in adapter for sample in batch)

    epochs = _epochs(epoch_iter, spec, cache)
    return {"epochs": epochs, "cache_stats": cache.stats()}


def _streaming_run(spec: dict) -> dict:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    algo = "py1s" if spec["order"] == "block" else "naive"
    # the batch of hpcio's reads; streaming downloads 8 batches ahead by default
    ds = StreamingDataset(remote=spec["path"], local=spec["cache_dir"], cache_limit=spec["limit"], shuffle=True,
                          shuffle_algo=algo, shuffle_seed=spec["seed"], num_canonical_nodes=1,
                          batch_size=spec["batch"])
    # each iteration of the dataset is its next epoch, with the seed changed per epoch
    return {"epochs": _epochs(lambda epoch: ds, spec), "shuffle_algo": algo}


def _litdata_run(spec: dict) -> dict:
    from litdata import StreamingDataset

    ds = StreamingDataset(f"local:{spec['path']}", cache_dir=spec["cache_dir"], shuffle=True, seed=spec["seed"],
                          max_cache_size=spec["limit"])

    def epoch_iter(epoch):
        ds.set_epoch(epoch + 1)  # litdata counts epochs from 1, as its DataLoader sets them
        return ds

    return {"epochs": _epochs(epoch_iter, spec)}


def _main(spec: dict) -> dict:
    tasks = {"write-litdata": _write_litdata, "hpcio": _hpcio_run, "streaming": _streaming_run,
             "litdata": _litdata_run}
    if spec["task"] not in tasks:
        raise InvalidArgumentError(f"unknown node-cache task {spec['task']!r}; expected one of {', '.join(tasks)}")
    return tasks[spec["task"]](spec)


def _run_worker(spec: dict, timeout: float = RUN_TIMEOUT_S) -> tuple[dict | None, str | None]:
    """Run ``spec`` in a fresh process with a TMPDIR of its own: (its record, failure or None)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               PYTHONWARNINGS="ignore")
    with tempfile.TemporaryDirectory(prefix="hpcio-bench-nodecache-") as tmp:
        env["TMPDIR"] = tmp
        try:
            proc = subprocess.run([sys.executable, "-m", "hpcio.bench.node_cache", json.dumps(spec)],
                                  capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout:.0f} s"
    if proc.returncode:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        return None, f"exit status {proc.returncode}: {tail}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


# --- the figures -----------------------------------------------------------------------
def _plan(setup: dict, orders, only) -> list[tuple[str, str, str | None]]:
    """``(order, system, why it cannot run or None)`` of every run asked for."""
    plan = []
    for order in orders:
        for system in SYSTEMS:
            if only and not any(word in system for word in only):
                continue
            why = None
            if system == "litdata":
                why = setup.get("litdata_error") or (NO_GLOBAL_LITDATA if order == "global" else None)
            plan.append((order, system, why))
    return plan


def _spec(setup: dict, order: str, system: str, tier, limit: int, epochs: int) -> dict:
    dataset = "litdata" if system == "litdata" else "mds"
    spec = {"task": system.split()[0], "order": order, "seed": SEED, "epochs": epochs, "limit": limit,
            "mount": tier.path(), "path": tier.path(os.path.relpath(setup[dataset], tier.source)),
            "dataset": dataset, "batch": setup["batch"]}
    if system.startswith("hpcio"):
        spec["policy"] = system.split()[1]
    return spec


def _summary(rec: dict, layout: dict, limit: int, samples: int, batch: int) -> dict:
    """Per-epoch ratios and the Belady minimum of the shard sequence the run delivered:
    one sample at a time, and in the reads hpcio's cache makes of it (``batch`` samples,
    in parts whose shards are resident together: what the policy itself works under)."""
    from ..nodecache import simulate
    from ..nodecache.policy import read_groups, units_per_read

    sizes = np.asarray(layout["bytes"], dtype=np.int64)
    total = int(sizes.sum())
    cum = np.cumsum(layout["counts"])
    sequences = [np.searchsorted(cum, np.asarray(e["ids"], dtype=np.int64), side="right") for e in rec["epochs"]]
    whole = np.concatenate(sequences) if sequences else np.zeros(0, np.int64)
    epochs = []
    for e in rec["epochs"]:
        ids = e.pop("ids")
        row = {k: v for k, v in e.items()}
        row.update(ratio=e["tier_bytes"] / total, samples_per_s=e["samples"] / e["epoch_s"] if e["epoch_s"] else None,
                   every_sample_once=len(ids) == samples and bool(np.array_equal(np.sort(ids), np.arange(samples))))
        if "cache" in e:
            row["wait_s"] = e["cache"].get("wait_s")
        epochs.append(row)
    tier_bytes = sum(e["tier_bytes"] for e in epochs)
    minimum = simulate(whole, sizes, limit) if len(whole) else 0
    fits = units_per_read(limit, sizes)  # as the cache reads
    in_reads = simulate(whole, sizes, limit, groups=read_groups(whole, batch, fits)) if len(whole) else 0
    return {"dataset_bytes": total, "epochs": epochs, "tier_bytes": tier_bytes, "ratio": tier_bytes / total,
            "belady_min_bytes": minimum, "belady_min_ratio": minimum / total,
            "belady_reads_min_bytes": in_reads, "belady_reads_min_ratio": in_reads / total,
            "over_reads_minimum": tier_bytes / in_reads if in_reads else None,
            "belady_min_first_epoch_ratio": simulate(sequences[0], sizes, limit) / total if sequences else 0.0,
            "lru_sim_ratio": (simulate(whole, sizes, limit, policy="lru") if len(whole) else 0) / total,
            "over_minimum": tier_bytes / minimum if minimum else None,
            "every_sample_once": all(e["every_sample_once"] for e in epochs)}


def _cold(path: str, source: str) -> float:
    """Evict the files of dataset ``path`` (on the tier) from the page cache, with the
    tier's source files cached where they fit (:func:`~hpcio.bench.tier.cache_source`);
    the fraction of ``path``'s bytes still resident after."""
    from .limits import dataset_files
    from .pagecache import evict, resident
    from .tier import cache_source

    cache_source(dataset_files(source))
    files = dataset_files(path)
    evict(files)
    return resident(files).fraction


def node_cache_figures(data_dir: str, *, shards: int = SHARDS, shard_bytes: int = SHARD_BYTES,
                       sample_bytes: int = SAMPLE_BYTES, fraction: float = FRACTION, epochs: int = EPOCHS,
                       orders=ORDERS, tier: dict | None = None, only=None, log=print) -> dict:
    """Every run of the node-cache row over datasets kept under ``data_dir``; ``tier``:
    :class:`~hpcio.bench.tier.EmulatedTier`'s keyword arguments (default: 1 ms a
    request, 200 MB/s).  Returns ``{"setup", "tier", "limit", "runs"}``."""
    from .tier import EmulatedTier

    orders = tuple(orders or ORDERS)
    if not 0 < fraction <= 1 or epochs < 1 or not set(orders) <= set(ORDERS):
        raise InvalidArgumentError(f"expected 0 < fraction <= 1, epochs >= 1 and orders among {', '.join(ORDERS)}, "
                                   f"got {fraction}, {epochs}, {', '.join(orders)}")
    name = f"node-cache-{shards}x{shard_bytes}-{sample_bytes}"
    setup = prepare_node_cache_data(os.path.join(data_dir, name), shards=shards, shard_bytes=shard_bytes,
                                    sample_bytes=sample_bytes, log=log)
    limit = int(sum(setup["layouts"]["mds"]["bytes"]) * fraction)
    tier = {"latency_us": LATENCY_US, "bandwidth": BANDWIDTH, **(tier or {}), "client_cache": False}
    runs = []
    cache_parent = os.path.join(data_dir, f"{name}-caches")
    os.makedirs(cache_parent, exist_ok=True)
    with EmulatedTier(setup["root"], **tier) as mounted:
        for order, system, why in _plan(setup, orders, only):
            head = {"order": order, "system": system, "limit": limit, "epochs_asked": epochs}
            if why:
                runs.append({**head, "error": why})
                log(f"  node-cache {order:6s} {system:12s} not run: {why}")
                continue
            spec = _spec(setup, order, system, mounted, limit, epochs)
            head["resident_before"] = _cold(spec["path"], setup[spec["dataset"]])
            with tempfile.TemporaryDirectory(prefix="run-", dir=cache_parent) as cache_dir:
                spec["cache_dir"] = cache_dir
                rec, failure = _run_worker(spec)
            if failure:
                runs.append({**head, "error": failure})
                log(f"  node-cache {order:6s} {system:12s} failed: {failure}")
                continue
            row = {**head, **{k: v for k, v in rec.items() if k != "epochs"},
                   **_summary(rec, setup["layouts"][spec["dataset"]], limit, setup["samples"], setup["batch"])}
            runs.append(row)
            log(f"  node-cache {order:6s} {system:12s} fetched "
                + " / ".join(f"{e['ratio']:.2f}" for e in row["epochs"])
                + f" x dataset (Belady minimum {row['belady_min_ratio']:.2f} over all epochs), "
                + " / ".join(f"{e['samples_per_s']:,.0f}" for e in row["epochs"]) + " samples/s")
    with contextlib.suppress(OSError):
        os.rmdir(cache_parent)
    return {"setup": setup, "tier": {k: v for k, v in tier.items()}, "limit": limit, "fraction": fraction,
            "runs": runs}


def _cells(values, fmt: str) -> str:
    return " / ".join("-" if v is None else format(v, fmt) for v in values)


def markdown(result: dict) -> str:
    """The runs as a table: per epoch (``a / b``) the tier's bytes over the dataset's,
    samples/s, seconds in ``next()`` and the cache's wait."""
    setup, tier = result["setup"], result["tier"]
    total = sum(setup["layouts"]["mds"]["bytes"])
    lines = [f"{setup['samples']:,} samples of {setup['payload_bytes']:,} bytes in {setup['shards']} shards "
             f"({total / 2**20:,.0f} MiB); cache limit {result['limit'] / 2**20:,.0f} MiB "
             f"({result['fraction']:g} of the dataset); emulated tier: {tier['latency_us']} us a request, "
             f"{tier['bandwidth'] / 1e6:,.0f} MB/s, no client page cache between opens. Per epoch, a / b / ...; "
             "fetched: bytes the tier served over the dataset's bytes; minimum: the Belady minimum of the shard "
             "sequence the run delivered, all epochs, a sample at a time, and in hpcio's reads (its batches, "
             "in parts whose shards are resident together); the cache's own count: the bytes hpcio's cache says "
             "it fetched (the rest of what the tier served was read around it).", "",
             "| order | system | fetched × dataset per epoch | all epochs | cache's own count | Belady minimum "
             "| fetched / minimum | Belady minimum in hpcio's reads | fetched / that minimum | samples/s "
             "| in next() s | cache wait s | peak cached / limit | every sample once |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"| {r['order']} | {r['system']} | {r['error'].replace('|', '/')} | | | | | | | | | | | |")
            continue
        e = r["epochs"]
        ours = r["system"].startswith("hpcio")
        wait = _cells([x.get("wait_s") for x in e], ".1f") if ours else "-"
        own = f"{sum(x['cache']['fetched_bytes'] for x in e) / r['dataset_bytes']:.2f}" if ours else "-"
        lines.append(f"| {r['order']} | {r['system']} | {_cells([x['ratio'] for x in e], '.2f')} | {r['ratio']:.2f} "
                     f"| {own} | {r['belady_min_ratio']:.2f} | {_cells([r['over_minimum']], '.2f')} "
                     f"| {r['belady_reads_min_ratio']:.2f} | {_cells([r['over_reads_minimum']], '.2f')} "
                     f"| {_cells([x['samples_per_s'] for x in e], ',.0f')} | {_cells([x['next_s'] for x in e], '.1f')} "
                     f"| {wait} | {max(x['cache_dir_peak_bytes'] for x in e) / r['limit']:.2f} "
                     f"| {'yes' if r['every_sample_once'] else 'no'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # through the module's own name, so that litdata's worker imports _litdata_items
    # from hpcio.bench.node_cache, not from __main__
    from hpcio.bench.node_cache import _main as main

    print(json.dumps(main(json.loads(sys.argv[1]))))
