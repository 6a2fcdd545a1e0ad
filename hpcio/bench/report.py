"""Tables (Markdown, CSV, JSON) of a benchmark run, with hpcio/peer ratios; figures in
:mod:`hpcio.bench.plots`."""

from __future__ import annotations

import csv
import io
import json
import os

from .runner import BATCH_OPS

__all__ = ["summarize", "write_reports"]

COLUMNS = [
    ("profile", "profile"),
    ("op", "operation"),
    ("system", "system"),
    ("samples_per_s", "samples/s (open+op)"),
    ("op_samples_per_s", "samples/s (op)"),
    ("ratio_to_best_peer", "× best peer"),
    ("total_s", "open+op s"),
    ("import_s", "import s"),
    ("user_s", "user s"),
    ("sys_s", "sys s"),
    ("maxrss_mb", "peak RSS MB"),
    ("storage_bytes", "storage bytes"),
]


def summarize(records: list[dict], limits: dict) -> dict:
    """Per (profile, op): best hpcio, best peer, their ratio and RSS; physical-limit ratios."""
    groups: dict = {}
    for r in records:
        if r.get("error"):
            continue
        groups.setdefault((r["profile"], r["op"]), []).append(r)
    summary = []
    for (profile, op), rows in sorted(groups.items()):
        ours = [r for r in rows if not r["peer"]]
        peers = [r for r in rows if r["peer"]]
        if op in BATCH_OPS and not peers:
            # no peer has a batch API: compare with the best peer's per-sample shuffle,
            # the same samples in the same order
            peers = [dict(r, system=f"{r['system']} (per-sample shuffle)")
                     for r in groups.get((profile, "shuffle"), []) if r["peer"]]
        best_ours = max(ours, key=lambda r: r["samples_per_s"], default=None)
        best_peer = max(peers, key=lambda r: r["samples_per_s"], default=None)
        for r in rows:
            r["ratio_to_best_peer"] = (r["samples_per_s"] / best_peer["samples_per_s"]) if best_peer else None
        entry = {
            "profile": profile,
            "op": op,
            "best_hpcio": best_ours and best_ours["system"],
            "best_hpcio_samples_per_s": best_ours and best_ours["samples_per_s"],
            "best_peer": best_peer and best_peer["system"],
            "best_peer_samples_per_s": best_peer and best_peer["samples_per_s"],
            "ratio": (best_ours["samples_per_s"] / best_peer["samples_per_s"]) if best_ours and best_peer else None,
            "hpcio_rss_mb": best_ours and best_ours["maxrss_mb"],
            "peer_rss_mb": best_peer and best_peer["maxrss_mb"],
        }
        lim = limits.get(profile, {})
        if best_ours and "dict_floor" in lim:
            floor = lim["dict_floor"]["samples_per_s"]
            per_sample = 1 / best_ours["op_samples_per_s"]
            entry["dict_floor_samples_per_s"] = floor
            # overhead beyond the unavoidable object building, relative to that floor
            entry["overhead_over_floor"] = (per_sample - 1 / floor) * floor
        if best_ours and op == "iterate" and "page_cache" in lim:
            bw = lim["page_cache"][best_ours["dataset"]]["bytes_per_s"] if best_ours["dataset"] in lim["page_cache"] else None
            if bw:
                bytes_per_sample = best_ours["storage_bytes"] / best_ours["samples"]
                entry["fraction_of_page_cache"] = best_ours["op_samples_per_s"] * bytes_per_sample / bw
        summary.append(entry)
    return {"summary": summary, "limits": limits}


def _fmt(v):
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return "" if v is None else str(v)


def markdown(records: list[dict], summary: dict, facts: dict) -> str:
    out = io.StringIO()
    out.write("## Machine\n\n")
    for k, v in facts.items():
        out.write(f"- {k}: {v}\n")
    out.write("\n## hpcio against the best peer\n\n")
    out.write("| profile | operation | best hpcio | samples/s | best peer | samples/s | ratio | RSS hpcio/peer MB |\n")
    out.write("|---|---|---|---|---|---|---|---|\n")
    for s in summary["summary"]:
        out.write(
            f"| {s['profile']} | {s['op']} | {_fmt(s['best_hpcio'])} | {_fmt(s['best_hpcio_samples_per_s'])} | "
            f"{_fmt(s['best_peer'])} | {_fmt(s['best_peer_samples_per_s'])} | {_fmt(s['ratio'])} | "
            f"{_fmt(s['hpcio_rss_mb'])} / {_fmt(s['peer_rss_mb'])} |\n"
        )
    out.write("\n## Physical limits\n\n")
    for profile, lim in summary["limits"].items():
        for name, value in lim.items():
            out.write(f"- {profile} {name}: {json.dumps(value)}\n")
    for s in summary["summary"]:
        extra = {k: s[k] for k in ("overhead_over_floor", "fraction_of_page_cache") if k in s}
        if extra:
            out.write(f"- {s['profile']} {s['op']}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in extra.items()) + "\n")
    out.write("\n## Every measurement (median of runs)\n\n")
    out.write("| " + " | ".join(h for _k, h in COLUMNS) + " |\n")
    out.write("|" + "---|" * len(COLUMNS) + "\n")
    for r in sorted(records, key=lambda r: (r["profile"], r["op"], -r["samples_per_s"])):
        out.write("| " + " | ".join(_fmt(r.get(k)) for k, _h in COLUMNS) + " |\n")
    return out.getvalue()


def loader_markdown(rows: list[dict]) -> str:
    """The DataLoader sweep: samples/s and accelerator utilisation per configuration."""
    out = io.StringIO()
    out.write("\n## DataLoader (calculation-free I/O test)\n\n")
    if rows:
        out.write("Compute emulated by sleeping the given µs per sample once per batch; AU = compute "
                  "time / wall time of one shuffled epoch, worker start included; steady: from the first "
                  "batch's arrival (first batch: its latency); page cache "
                  f"{rows[0].get('cache', 'warm')} (cold: each dataset's files evicted before every epoch).\n\n")
    out.write("| profile | tier | dataset | compute µs | workers | batch | prefetch | samples/s | MB/s | AU | "
              "first batch s | steady samples/s | steady AU |\n")
    out.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        value = r.get("error") or _fmt(r["samples_per_s"])
        mb = _fmt(r["bytes_per_s"] / 1e6) if "bytes_per_s" in r else "-"
        out.write(f"| {r['profile']} | {r['tier']} | {r['dataset']} | {r['compute_per_sample_s'] * 1e6:g} | "
                  f"{r['workers']} | {r['batch_size']} | {_fmt(r['prefetch_factor'])} | {value} | {mb} | "
                  f"{r['au']:.2f} | {_fmt(r.get('first_batch_s'))} | {_fmt(r.get('samples_per_s_steady'))} | "
                  f"{_fmt(r.get('au_steady'))} |\n")
    return out.getvalue()


def pipeline_markdown(rows: list[dict]) -> str:
    """Staging against cp -r, conversion writers against each other."""
    out = io.StringIO()
    staging = [r for r in rows if r["section"] == "staging"]
    conversion = [r for r in rows if r["section"] == "conversion"]
    packed = [r for r in rows if r["section"] == "packed-llm"]
    if staging:
        out.write("\n## Staging (verified) against cp -r\n\n")
        out.write("`hpcio.stage` timed inside its process (imports excluded; whole process in brackets), "
                  "checksums verified in both modes. Without fsync (the default for a node-local destination) "
                  "against `cp -r`; with `fsync=True` (the default for a shared one) against `cp -r && sync`, "
                  "the same durability. Medians of alternating runs; the ratio of the best runs in brackets.\n\n")
        out.write("| profile | dataset | bytes | hpcio stage MB/s | cp -r MB/s | stage / cp "
                  "| hpcio stage fsync MB/s | cp -r + sync MB/s | stage fsync / (cp + sync) |\n"
                  "|---|---|---|---|---|---|---|---|---|\n")
        for r in staging:
            if r.get("error"):
                out.write(f"| {r['profile']} | {r['dataset']} | {r['error']} | | | | | | |\n")
                continue
            mb = lambda seconds, r=r: f"{r['bytes'] / seconds / 1e6:,.0f}"  # noqa: E731
            out.write(f"| {r['profile']} | {r['dataset']} | {r['bytes']:,} | {mb(r['stage_s'])} "
                      f"({mb(r['stage_process_s'])}) | {mb(r['cp_s'])} | {r['ratio']:.2f} ({r['ratio_best']:.2f}) | "
                      f"{mb(r['stage_fsync_s'])} ({mb(r['stage_fsync_process_s'])}) | {mb(r['cp_sync_s'])} | "
                      f"{r['ratio_sync']:.2f} ({r['ratio_sync_best']:.2f}) |\n")
    if conversion:
        out.write("\n## Conversion (Parquet to shards)\n\n")
        out.write("Whole process from launch to exit; for hpcio also the job alone (planning, writing, "
                  "publishing; without interpreter and MPI start-up, and without importing the formats' libraries). "
                  "Medians of alternating runs; the job-alone scaling of the best runs in brackets. hpcio's "
                  "jobs run twice a turn, so each has as many runs after a one-rank job as after a two-rank job "
                  "(a job here is faster after a two-rank job); the last two columns give the job-alone scaling "
                  "with both jobs after the same kind of job. hpcio's jobs run again on a larger input of the "
                  "same profile, where their fixed costs weigh less.\n\n")
        out.write("| profile | writer | samples | ranks | samples/s | samples/s per rank | job alone samples/s "
                  "| 1→2 rank scaling (process / job) | hpcio (1 rank) / writer | job scaling, both after a 1-rank job "
                  "| job scaling, both after a 2-rank job |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in conversion:
            if r.get("error"):
                out.write(f"| {r['profile']} | {r['writer']} | {r['samples']:,} | {r['ranks']} | {r['error']} "
                          "| | | | | | |\n")
                continue
            scaling = ""
            if r.get("scaling_1_to_2"):
                scaling = f"{_fmt(r['scaling_1_to_2'])} / {_fmt(r.get('job_scaling_1_to_2'))}"
                if r.get("job_scaling_1_to_2_best"):
                    scaling += f" ({_fmt(r['job_scaling_1_to_2_best'])})"
            out.write(f"| {r['profile']} | {r['writer']} | {r['samples']:,} | {r['ranks']} | {_fmt(r['samples_per_s'])} | "
                      f"{_fmt(r['samples_per_s_per_rank'])} | {_fmt(r.get('job_samples_per_s'))} | {scaling} | "
                      f"{_fmt(r.get('hpcio_ratio'))} | {_fmt(r.get('job_scaling_1_to_2_after_one_rank'))} | "
                      f"{_fmt(r.get('job_scaling_1_to_2_after_two_ranks'))} |\n")
        for r in conversion:
            if r.get("memory_copy"):
                copy = r["memory_copy"]
                out.write(f"\nMemory copy ({r['profile']}, measured before its conversions; {copy['bytes'] >> 20} MiB "
                          f"buffers, warm, median copy over a second): one process "
                          f"{copy['one_bytes_per_s'] / 1e9:.1f} GB/s, two at once "
                          f"{sum(copy['two_bytes_per_s']) / 1e9:.1f} GB/s together: a 1→2 rank scaling of "
                          f"{copy['scaling']:.2f} for a job's copying.\n")
        phased = [r for r in conversion if r.get("phases_s")]
        if phased:
            from ..convert.driver import PhaseClock  # the phases in the order they run

            names = [name for name in PhaseClock.PHASES
                     if any(r["phases_s"].get(name, 0) >= PhaseClock.SHOWN for r in phased)]
            out.write("\nWhere hpcio's job spends its time (milliseconds; per phase, the median over the runs "
                      "of the slowest rank; see `hpcio.convert.driver.PhaseClock`):\n\n")
            out.write("| profile | samples | ranks | " + " | ".join(names) + " | job |\n|---|---|---|"
                      + "---|" * (len(names) + 1) + "\n")
            for r in phased:
                cells = " | ".join(f"{1000 * r['phases_s'][name]:.0f}" for name in names)
                out.write(f"| {r['profile']} | {r['samples']:,} | {r['ranks']} | {cells} | {1000 * r['job_s']:.0f} |\n")
    if packed:
        out.write(packed_llm_markdown(packed))
    return out.getvalue()


def packed_llm_markdown(rows: list[dict]) -> str:
    """The packed-LLM row: tokens/s through a DataLoader, hpcio's pipeline and litdata."""
    out = io.StringIO()
    first = rows[0]
    out.write("\n## Packed LLM pretraining (tokens through a DataLoader)\n\n")
    out.write(f"The text profile's {first['documents']:,} documents tokenised once by a byte-level BPE trained "
              f"on them, {first['tokens_total']:,} tokens with an end-of-document token each. hpcio: the "
              "pipeline's cache of the tokens, packed after it into rows of whole documents (`pack`, with "
              "`cu_seqlens` and `position_ids`) and stacked into tensors; litdata: the same tokens written by "
              "its `optimize()`, read by `StreamingDataset(item_loader=TokensLoader(block_size))` and "
              "`StreamingDataLoader`, blocks cut across documents. Rows of "
              f"{first['max_len']} tokens, {first['rows']} rows a step; one shuffled epoch from building "
              "the loader, worker start included; tokens/s counts documents' tokens delivered (no padding). "
              f"Medians of fresh-process runs; {first['cores']} cores.\n\n")
    out.write("| system | workers | tokens/s | hpcio / litdata | first batch s | steps | tokens delivered "
              "| token sum matches | fill | set-up s |\n|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        workers = "" if r.get("workers") is None else r["workers"]
        if r.get("error"):
            error = r["error"].replace("|", "/")  # a cell of the table
            out.write(f"| {r['system']} | {workers} | {error} | | | | | | | |\n")
            continue
        if r["system"] not in ("hpcio", "litdata"):
            continue
        match = "yes" if r["checksum"] == r["checksum_total"] else f"{r['checksum']:,} of {r['checksum_total']:,}"
        out.write(f"| {r['system']} | {workers} | {_fmt(r['tokens_per_s'])} | {_fmt(r.get('ratio_to_litdata'))} | "
                  f"{_fmt(r['first_batch_s'])} | {r['steps']:,} | {r['tokens_delivered']:,} | {match} | "
                  f"{r['fill']:.3f} | {_fmt(r['prepare_s'])} |\n")
    for r in rows:
        if r["system"] == "numpy copy (limit)":
            out.write(f"\nLimit: numpy copying the same tokens into int64 rows in memory, one process, "
                      f"{_fmt(r['tokens_per_s'])} tokens/s.\n")
    out.write("\nSet-up: hpcio's is tokenising and writing the cache, once; litdata's is its `optimize()` of the "
              "tokens already made. litdata reads no block across its chunks, so each chunk's last partial "
              "block is not delivered; with workers, hpcio leaves the epoch's last groups that do not fill a "
              "round of every worker.\n")
    return out.getvalue()


def write_reports(records: list[dict], limits: dict, facts: dict, out_dir: str,
                  dataloader: list[dict] | None = None, pipeline: list[dict] | None = None) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    summary = summarize(records, limits)
    dataloader, pipeline = dataloader or [], pipeline or []
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"facts": facts, "records": records, **summary, "dataloader": dataloader,
                   "pipeline": pipeline}, f, indent=1)
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        keys = sorted({k for r in records for k in r})
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(records)
    for name, rows in (("dataloader.csv", dataloader), ("pipeline.csv", pipeline)):
        if rows:
            with open(os.path.join(out_dir, name), "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
                w.writeheader()
                w.writerows(rows)
    md = markdown(records, summary, facts)
    if dataloader:
        md += loader_markdown(dataloader)
    if pipeline:
        md += pipeline_markdown(pipeline)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(md)
    from .plots import loader_figures, throughput_figures  # not at import: python -m hpcio.bench.plots

    pngs = throughput_figures(records, out_dir) + loader_figures(dataloader, out_dir)
    return {"markdown": md, "plots": pngs, **summary}
