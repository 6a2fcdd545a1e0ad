"""``hpcio bench``: hpcio against its peers on the same data, in one run.

Generates (or reuses) the demo profiles in every format, measures the machine's physical
limits, then runs every (system, operation) in fresh processes and writes Markdown, CSV,
JSON and PNG reports with hpcio/peer ratios.  See ``docs/performance.md``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from typing import Any

from .data import prepare
from .report import write_reports
from .runner import OPERATIONS, interop_python, interop_python_path, measure, systems_for

__all__ = ["run_bench", "machine_facts", "CONVERSION_SCALE"]

DEFAULT_SIZES = {"text": 20000, "vlm": 2000}
# The conversion's 1->2 rank scaling is measured again on this many times the profile's
# samples: the largest multiple at which one rank still converts the vlm profile in one
# round of the default --round-size (512 MiB), so both rank counts read every row group
# once and differ only in how the work is shared.
CONVERSION_SCALE = 4


def switches_on() -> str:
    """The :func:`hpcio.tune` switches on in this process (and so in the workers, which
    inherit its HPCIO_TUNE), or ``none``."""
    import hpcio

    return ", ".join(name for name, on in hpcio.tune().items() if on) or "none"


def machine_facts() -> dict:
    import hpcio

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    facts = {
        "cpu": cpu,
        "cores (affinity)": len(os.sched_getaffinity(0)),
        "memory": f"{mem / 2**30:.1f} GiB",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hpcio": hpcio.__version__,
        "hpcio tuning": switches_on(),
    }
    for mod in ("numpy", "streaming", "webdataset", "pyarrow", "orjson"):
        try:
            facts[mod] = __import__(mod).__version__
        except Exception:  # a peer that is missing or broken is reported, not fatal
            facts[mod] = "not installed"
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("litdata", "tokenizers"):  # not imported: litdata imports torch
        try:
            facts[dist] = version(dist)
        except PackageNotFoundError:
            facts[dist] = "not installed"
    py = interop_python()
    if py is None:
        # say so in the report: a table without these peers must not read as if they lost
        facts["mldataforge, hf datasets"] = (
            f"not run: no interop environment at {interop_python_path()} "
            "(create it with tools/interop-env.sh or set HPCIO_INTEROP_PYTHON)")
    if py:
        out = subprocess.run(
            [py, "-c", "import sys, mldataforge, datasets; print(sys.version.split()[0], "
             "__import__('importlib.metadata').metadata.version('mldataforge'), datasets.__version__)"],
            capture_output=True, text=True,
        ).stdout.split()
        if len(out) == 3:
            facts["interop python"], facts["mldataforge"], facts["hf datasets"] = out
    return facts


def _limits(profile: str, datasets, n_floor: int = 5000) -> dict:
    """Physical limits for one profile: page cache per dataset, zstd decode, dict floor.
    The datasets' files stay in the page cache as their writers left them."""
    import orjson

    from .. import demo
    from .limits import dict_floor, page_cache_read_bandwidth, zstd_decode_bandwidth

    # 800 vlm samples hold about 2,000 images: enough for the floor, and quick to generate
    samples = list(demo.generate(profile, min(n_floor, 800 if profile == "vlm" else n_floor)))
    raw = []
    for s in samples:
        fields: dict[str, tuple[str, Any]] = {}
        for k, v in s.items():
            if isinstance(v, bytes):
                fields[k] = ("bytes", v)
            elif isinstance(v, list) and v and all(isinstance(x, bytes) for x in v):
                fields[k] = ("bytes_list", v)
            elif isinstance(v, str):
                fields[k] = ("str", v.encode())
            elif isinstance(v, int):
                fields[k] = ("int", v.to_bytes(8, "little", signed=True))
            else:
                fields[k] = ("json", orjson.dumps(v))
        raw.append(fields)
    blob = b"".join(b"".join(b) if kind == "bytes_list" else b for f in raw[:200] for kind, b in f.values())
    return {
        "page_cache": {d.name: page_cache_read_bandwidth(d.path) for d in datasets},
        "zstd_decode": zstd_decode_bandwidth(blob),
        "dict_floor": dict_floor(raw),
    }


def run_bench(
    out_dir: str,
    data_dir: str | None = None,
    profiles=("text", "vlm"),
    sizes: dict | None = None,
    ops=OPERATIONS,
    repeats: int = 3,
    include_interop: bool = True,
    only: list[str] | None = None,
    dataloader: dict | None = None,
    staging: bool = False,
    conversion: bool = False,
    conversion_scale: int = CONVERSION_SCALE,
    pipeline_repeats: int | None = None,
    packed_llm: dict | None = None,
    log=print,
) -> dict:
    """Run the whole comparison and write the reports under ``out_dir``.

    ``dataloader`` (keyword arguments of :func:`hpcio.bench.loader.run_dataloader_sweep`)
    adds the DataLoader sweep; ``staging`` and ``conversion`` add those figures, hpcio's
    conversion scaling also on ``conversion_scale`` times the samples (1: not), each
    system run ``pipeline_repeats`` times (default :data:`.pipeline.PIPELINE_REPEATS`).
    ``packed_llm`` (keyword arguments of :func:`hpcio.bench.tokens.packed_llm_figures`:
    ``workers``, ``max_len``, ``rows``) adds the packed-LLM row over the text profile,
    each run ``repeats`` times.
    """
    # The readers run as a user's process does: tuned only as HPCIO_TUNE says, which the
    # workers inherit (``hpcio bench --tuned`` sets it to all).
    log(f"process tuning: {switches_on()} (HPCIO_TUNE; --tuned turns every switch on)")
    return _run_bench(out_dir, data_dir, profiles, sizes, ops, repeats, include_interop, only, dataloader,
                      staging, conversion, conversion_scale, pipeline_repeats, packed_llm, log)


def _run_bench(out_dir, data_dir, profiles, sizes, ops, repeats, include_interop, only, dataloader, staging,
               conversion, conversion_scale, pipeline_repeats, packed_llm, log) -> dict:
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    data_dir = data_dir or os.path.join(out_dir, "data")
    taken, limits = {"read": [], "dataloader": [], "pipeline": []}, {}
    os.makedirs(out_dir, exist_ok=True)
    # Every figure is appended to records.jsonl as soon as it is taken: a run stopped before
    # its end (a job's time limit) keeps what it measured.
    with open(os.path.join(out_dir, "records.jsonl"), "w") as f:
        for kind, row in _measurements(profiles, sizes, data_dir, ops, repeats, include_interop, only, dataloader,
                                       staging, conversion, conversion_scale, pipeline_repeats, packed_llm,
                                       limits, log):
            taken[kind].append(row)
            f.write(json.dumps({"kind": kind, **row}) + "\n")
            f.flush()
    return write_reports(taken["read"], limits, machine_facts(), out_dir,
                         dataloader=taken["dataloader"], pipeline=taken["pipeline"])


def _measurements(profiles, sizes, data_dir, ops, repeats, include_interop, only, dataloader, staging,
                  conversion, conversion_scale, pipeline_repeats, packed_llm, limits, log):
    """``(kind, row)`` for each figure as it is taken (kind: read, dataloader or pipeline);
    ``limits`` gets each profile's physical limits."""
    for profile in profiles:
        datasets = prepare(profile, sizes[profile], os.path.join(data_dir, profile), log=log)
        by_name = {d.name: d for d in datasets}
        log(f"measuring physical limits ({profile})")
        limits[profile] = _limits(profile, datasets)
        for system in systems_for(datasets, include_interop):
            if only and not any(word in system.label for word in only):
                continue
            for op in ops:
                if op not in system.ops:
                    continue
                try:
                    rec = measure(system, by_name[system.dataset], op, profile, repeats)
                except RuntimeError as exc:
                    log(f"  {exc}")
                    yield "read", {
                        "profile": profile, "op": op, "system": system.label, "peer": system.peer,
                        "error": str(exc), "samples_per_s": 0.0, "op_samples_per_s": 0.0, "maxrss_mb": 0.0,
                        "dataset": system.dataset, "samples": 0, "storage_bytes": by_name[system.dataset].bytes}
                    continue
                log(f"  {profile:5s} {op:12s} {system.label:34s} {rec['samples_per_s']:>12,.0f} samples/s  "
                    f"rss {rec['maxrss_mb']:.0f} MB")
                yield "read", rec
        if dataloader is not None:
            from .loader import run_dataloader_sweep

            log(f"DataLoader sweep ({profile})")
            for row in run_dataloader_sweep(datasets, profile, log=log, **dataloader):
                yield "dataloader", row
        if staging or conversion:
            from .pipeline import PIPELINE_REPEATS, conversion_figures, staging_figures

            turns = pipeline_repeats or PIPELINE_REPEATS

            if staging:
                log(f"staging against cp -r ({profile})")
                for row in staging_figures(datasets, profile, repeats=turns, log=log):
                    yield "pipeline", row
            if conversion:
                larger = None
                if conversion_scale > 1:
                    count = conversion_scale * sizes[profile]
                    (parquet,) = prepare(profile, count, os.path.join(data_dir, f"{profile}-x{conversion_scale}"),
                                         formats=["parquet"], log=log)
                    larger = (os.path.join(parquet.path, "data.parquet"), count)
                log(f"conversion writers ({profile})")
                for row in conversion_figures(
                        profile, sizes[profile], datasets=datasets, repeats=turns, log=log,
                        interop_python=interop_python() if include_interop else None, larger=larger, only=only):
                    yield "pipeline", row
        if packed_llm is not None and profile == "text" and "mds" in by_name:
            from .tokens import packed_llm_figures

            log(f"packed LLM pretraining: hpcio pipeline against litdata's TokensLoader ({profile})")
            for row in packed_llm_figures(by_name["mds"], os.path.join(data_dir, f"{profile}-packed-llm"),
                                          repeats=repeats, log=log, **packed_llm):
                yield "pipeline", row
