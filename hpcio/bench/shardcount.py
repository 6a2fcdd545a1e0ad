"""Whether the cost of a sample grows with the number of shards.

The same synthetic samples (:mod:`hpcio.bench.cold`'s) are written with ``base`` shards
and with 4 and 16 times as many, and each copy is read in a fresh process, warm (settled
in the page cache) and cold (evicted first, checked with ``mincore``): one sequential
pass and one pass in ``numpy.random.default_rng(42).permutation(n)`` order, the
worker's ``iterate`` and ``shuffle`` operations.  A reader whose per-sample work is flat
shows the same µs/sample on every row of a format; one that does Python work per shard
a batch touches gets slower as the shards get smaller.
"""

from __future__ import annotations

import os
import shutil

from ..errors import InvalidArgumentError
from .cold import _samples, measure_cold
from .data import VLM_COLUMNS, BenchDataset
from .limits import settle_page_cache
from .runner import System, interop_python, measure

__all__ = ["sharded_datasets", "systems", "run", "steady", "markdown"]

MULTIPLES = (1, 4, 16)
# Shard counts are multiples of this: the 21 shards a 16,000-sample vlm dataset had when
# the per-shard cost of the shuffled pass was first measured.
BASE_SHARDS = 21
_COLUMNS = {"vlm": VLM_COLUMNS, "text": {"id": "int", "text": "str", "meta": "json"}}


def _writer_options(fmt: str, profile: str, shards: int, n: int, nbytes: int) -> dict:
    """Writer options that cut ``n`` samples of ``nbytes`` into about ``shards`` shards."""
    if fmt == "mds":
        return {"columns": _COLUMNS[profile], "size_limit": nbytes // shards + 1}
    if fmt == "webdataset":
        return {"max_count": -(-n // shards)}
    if fmt == "jinx":
        return {"shard_size": nbytes // shards + 1}
    raise InvalidArgumentError(f"no shard-count option for {fmt}")


def sharded_datasets(profile: str, n: int, root: str, *, formats=("mds",), multiples=MULTIPLES,
                     base: int = BASE_SHARDS, seed: int = 0, log=print) -> list[BenchDataset]:
    """``n`` synthetic samples written once per format and shard multiple under ``root``
    (reused when complete); a dataset's name is ``<format>-x<multiple>``."""
    import hpcio

    nbytes = None
    out = []
    for fmt in formats:
        for mult in multiples:
            name = f"{fmt}-x{mult}"
            path = os.path.join(root, f"{profile}-{n}-{seed}", name)
            done = os.path.join(path, ".complete")
            if nbytes is None:
                nbytes = sum(len(v) if isinstance(v, (bytes, str)) else sum(map(len, v)) if isinstance(v, list)
                             and v and isinstance(v[0], bytes) else 16
                             for s in _samples(profile, n, seed) for v in s.values())
            options = _writer_options(fmt, profile, base * mult, n, nbytes)
            if not os.path.exists(done):
                shutil.rmtree(path, ignore_errors=True)
                log(f"writing {n} {profile} samples as {fmt} in about {base * mult} shards: {path}")
                with hpcio.open_writer(path, format=fmt, **options) as w:
                    for sample in _samples(profile, n, seed):
                        w.write(sample)
                open(done, "w").close()
            out.append(BenchDataset(name, fmt, path, n, options, profile))
    return out


def systems(datasets: list[BenchDataset], include_interop: bool = True, hpcio_options=None) -> list[System]:
    """hpcio on every dataset, and the MDS peers (streaming; mldataforge's RAM reader when
    the interop environment exists) on the MDS ones."""
    out = []
    py = interop_python() if include_interop else None
    for d in datasets:
        ops = ("iterate", "shuffle") if d.format != "webdataset" else ("iterate",)
        out.append(System(f"hpcio {d.name}", "hpcio", d.name, dict(hpcio_options or {}), ops=ops, peer=False))
        if d.format == "mds" and include_interop:
            out.append(System(f"streaming {d.name}", "streaming", d.name, ops=("iterate", "shuffle")))
            if py:
                out.append(System(f"mldataforge {d.name} ram", "mdf-mds", d.name, {"reader": "ram"}, py,
                                  ops=("iterate", "shuffle")))
    return out


def _shards(d: BenchDataset) -> int:
    import hpcio

    with hpcio.open(d.path) as ds:
        sizes = ds.reader.shard_sizes()
    return len(sizes) if sizes is not None else 1


def run(profile: str, n: int, root: str, *, formats=("mds",), multiples=MULTIPLES, caches=("warm", "cold"),
        repeats: int = 1, include_interop: bool = True, only=None, hpcio_options=None, log=print) -> list[dict]:
    """Every system on every shard count, warm and cold: one record per (system, op, cache)."""
    datasets = sharded_datasets(profile, n, root, formats=formats, multiples=multiples, log=log)
    by_name = {d.name: d for d in datasets}
    shards = {d.name: _shards(d) for d in datasets}
    records = []
    for system in systems(datasets, include_interop, hpcio_options):
        if only and not any(word in system.label for word in only):
            continue
        d = by_name[system.dataset]
        for op in system.ops:
            for cache in caches:
                if cache == "warm":
                    settle_page_cache(d.path)
                    rec = measure(system, d, op, profile, repeats)
                    seconds = rec["op_s"]
                else:
                    rec = measure_cold(system, d, op, profile)
                    if "error" in rec:
                        log(f"{system.label:28} {op:8} cold failed: {rec['error']}")
                        continue
                    seconds = rec["op_s"]
                row = {"system": system.label.replace(f" {d.name}", ""), "format": d.format,
                       "multiple": int(d.name.rsplit("x", 1)[1]), "shards": shards[d.name], "op": op,
                       "cache": cache, "samples": n, "samples_per_s": n / seconds if seconds else float("inf"),
                       "us_per_sample": 1e6 * seconds / n, "maxrss_mb": rec["maxrss_mb"],
                       "checksum": rec["checksum"]}
                records.append(row)
                log(f"{row['system']:22} {d.name:14} {op:8} {cache:4} {row['shards']:5d} shards "
                    f"{row['samples_per_s']:>10,.0f} samples/s {row['us_per_sample']:8.1f} us/sample")
    return records


def steady(datasets: list[BenchDataset], *, epochs: int = 3, options=None, log=print) -> list[dict]:
    """hpcio's shuffled pass with its shards already open (one epoch first, then the best
    of ``epochs`` timed, each in another order), in this process: the cost per sample a
    long run pays once opening every shard is behind it (cache ``"open"``)."""
    import time

    import hpcio

    records = []
    for d in datasets:
        if d.format == "webdataset":
            continue
        with hpcio.open(d.path, **(options or {})) as ds:
            n, shards = len(ds), len(ds.reader.shard_sizes() or [1])
            for _ in ds.shuffle(seed=0):
                pass
            best = float("inf")
            for epoch in range(1, epochs + 1):
                t0 = time.perf_counter()
                for _ in ds.shuffle(seed=epoch):
                    pass
                best = min(best, time.perf_counter() - t0)
        row = {"system": "hpcio", "format": d.format, "multiple": int(d.name.rsplit("x", 1)[1]), "shards": shards,
               "op": "shuffle", "cache": "open", "samples": n, "samples_per_s": n / best,
               "us_per_sample": 1e6 * best / n, "maxrss_mb": None, "checksum": None}
        records.append(row)
        log(f"hpcio {d.name:14} shuffle open {shards:5d} shards {row['samples_per_s']:>10,.0f} samples/s "
            f"{row['us_per_sample']:8.1f} us/sample")
    return records


def markdown(records: list[dict]) -> str:
    """One row per (system, format, op, cache): µs/sample at each shard count, and the
    largest over the smallest (1.00: flat)."""
    keys = sorted({(r["system"], r["format"], r["op"], r["cache"]) for r in records})
    mults = sorted({r["multiple"] for r in records})
    head = " | ".join(f"×{m} µs/sample (samples/s)" for m in mults)
    lines = [f"| system | format | op | cache | {head} | max/min |",
             "|---|---|---|---|" + "---|" * (len(mults) + 1)]
    for key in keys:
        by_mult = {r["multiple"]: r for r in records if (r["system"], r["format"], r["op"], r["cache"]) == key}
        cells = [f"{by_mult[m]['us_per_sample']:.1f} ({by_mult[m]['samples_per_s']:,.0f}, {by_mult[m]['shards']} shards)"
                 if m in by_mult else "-" for m in mults]
        us = [r["us_per_sample"] for r in by_mult.values()]
        spread = f"{max(us) / min(us):.2f}" if us and min(us) > 0 else "-"
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {' | '.join(cells)} | {spread} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="directory for the datasets and shardcount.json/.md")
    p.add_argument("--profile", choices=["vlm", "text"], default="vlm")
    p.add_argument("-n", "--samples", type=int, default=4000)
    p.add_argument("--formats", default="mds", help="comma-separated: mds,jinx,webdataset")
    p.add_argument("--caches", default="warm,cold",
                   help="comma-separated: warm, cold (fresh processes), open (steady(): shards open)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--no-interop", action="store_true", help="hpcio only, no peers")
    p.add_argument("--only", nargs="*", help="systems whose label contains one of these words")
    p.add_argument("--hpcio-option", action="append", default=[], metavar="KEY=JSON",
                   help="a reader option for hpcio, e.g. read_path='\"map\"'")
    args = p.parse_args(argv)
    options = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.hpcio_option)}
    caches = tuple(args.caches.split(","))
    formats = tuple(args.formats.split(","))
    records = run(args.profile, args.samples, args.out, formats=formats, caches=tuple(c for c in caches if c != "open"),
                  repeats=args.repeats, include_interop=not args.no_interop, only=args.only, hpcio_options=options)
    if "open" in caches:
        records += steady(sharded_datasets(args.profile, args.samples, args.out, formats=formats), options=options)
    with open(os.path.join(args.out, "shardcount.json"), "w") as f:
        json.dump(records, f, indent=1)
    with open(os.path.join(args.out, "shardcount.md"), "w") as f:
        f.write(markdown(records))
    print(markdown(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
