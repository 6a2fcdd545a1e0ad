"""Figures of a benchmark run, drawn to be read at the width the documentation shows them.

Per profile, one panel per operation on shared axes: the best configuration of hpcio and
of each peer library, one colour per library throughout, the value written on each bar.
The DataLoader sweep is drawn as small multiples, one panel per (tier, batch size), with
``num_workers`` as integers on the x axis.

Regenerate the figures from a report without running anything again::

    python -m hpcio.bench.plots bench-output/results.json docs/img
"""

from __future__ import annotations

import json
import math
import os
import sys

from .runner import BATCH_OPS, OPERATIONS

__all__ = ["throughput_figures", "loader_figures", "main"]

# Libraries in the order their bars are drawn (top to bottom), with their colours.
LIBRARIES = {
    "hpcio": "#d95f02",
    "mldataforge": "#1b9e77",
    "pyarrow": "#7570b3",
    "hf-datasets": "#e7298a",
    "webdataset": "#66a61e",
    "streaming": "#a6761d",
}
LABELS = {"hf-datasets": "HF datasets", "streaming": "mosaicml-streaming"}
DPI = 100


def _pyplot():
    """``matplotlib.pyplot`` drawing off screen (Agg), or None when matplotlib is
    missing: the plots are optional, the tables are not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt, fig, path: str) -> str:
    """Write ``fig`` to ``path`` as PNG and free it; returns ``path``."""
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def library(system: str) -> str:
    """The library a system label belongs to: its first word (``"hpcio mds zero-copy"``)."""
    return system.split()[0]


def _compact(value: float) -> str:
    """2-3 significant digits with k/M: what a bar label has room for."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            v = value / scale
            return f"{v:.3g}{suffix}" if v < 100 else f"{v:.0f}{suffix}"
    return f"{value:.3g}"


def best_per_library(records: list[dict], profile: str, op: str) -> dict[str, dict]:
    """The fastest record of each library for (profile, op); for a batch operation, which
    no peer has, each peer's best per-sample ``shuffle`` (the same samples, same order)."""
    best: dict[str, dict] = {}
    for r in records:
        if r["profile"] != profile or r.get("error"):
            continue
        peer_stands_in = op in BATCH_OPS and r["peer"] and r["op"] == "shuffle"
        if r["op"] == op and not (op in BATCH_OPS and r["peer"]) or peer_stands_in:
            lib = library(r["system"])
            if lib not in best or r["samples_per_s"] > best[lib]["samples_per_s"]:
                best[lib] = r
    return best


def _panel(ax, best: dict[str, dict], key: str, scale: tuple[float, float], log: bool) -> None:
    libs = [lib for lib in LIBRARIES if lib in best and best[lib].get(key)]
    ys = range(len(libs))[::-1]
    values = [best[lib][key] for lib in libs]
    ax.barh(list(ys), values, color=[LIBRARIES[lib] for lib in libs], height=0.7)
    for y, value in zip(ys, values):
        x = value * 1.08 if log else value + scale[1] * 0.01
        ax.text(x, y, _compact(value), va="center", ha="left", fontsize=10)
    ax.set_yticks([])
    if log:
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: no overlaps
    ax.set_xlim(*scale)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)


def _panel_title(op: str, best: dict[str, dict]) -> str:
    ours = best.get("hpcio")
    peers = [r for lib, r in best.items() if lib != "hpcio"]
    title = op + (" (peers: per-sample shuffle)" if op in BATCH_OPS else "")
    if ours and peers:
        ratio = ours["samples_per_s"] / max(r["samples_per_s"] for r in peers)
        title += f"\nhpcio {ratio:.1f}× the best peer"
    return title


def _legend(fig, libraries: set[str]) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=LABELS.get(lib, lib)) for lib, c in LIBRARIES.items() if lib in libraries]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False, fontsize=11,
               bbox_to_anchor=(0.5, 0.965))


def _figure(plt, records, profile, key, xlabel, log, suptitle):
    ops = [op for op in OPERATIONS if any(r["profile"] == profile and r["op"] == op for r in records)]
    bests = {op: best_per_library(records, profile, op) for op in ops}
    values = [r[key] for b in bests.values() for r in b.values() if r.get(key)]
    if not values:
        return None
    # room right of the longest bar for its label: a factor on a log axis, a fraction on a linear one
    top = max(values) * 4
    low = 10 ** min(math.floor(math.log10(min(values))), math.floor(math.log10(top)) - 2)
    scale = (low, top) if log else (0, max(values) * 1.2)
    cols = min(3, len(ops))
    rows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.5 * rows + 0.9), sharex=True, squeeze=False)
    for ax, op in zip(axes.flat, ops):
        _panel(ax, bests[op], key, scale, log)
        ax.set_title(_panel_title(op, bests[op]) if key == "samples_per_s" else op, fontsize=11)
    for ax in list(axes.flat)[len(ops):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(xlabel, fontsize=10)
        ax.tick_params(axis="x", labelbottom=True, labelsize=10)
    _legend(fig, {lib for b in bests.values() for lib, r in b.items() if r.get(key)})
    fig.suptitle(suptitle, fontsize=12, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig


def throughput_figures(records: list[dict], out_dir: str) -> list[str]:
    """``throughput_<profile>.png`` and ``memory_<profile>.png`` for every profile."""
    plt = _pyplot()
    if plt is None:
        return []
    written = []
    for profile in sorted({r["profile"] for r in records}):
        fig = _figure(plt, records, profile, "samples_per_s", "samples/s (open + operation), log scale", True,
                      f"{profile}: best configuration of each library")
        if fig is not None:
            written.append(_save(plt, fig, os.path.join(out_dir, f"throughput_{profile}.png")))
        fig = _figure(plt, records, profile, "maxrss_mb", "peak RSS (MB) of that configuration", False,
                      f"{profile}: peak memory of each library's fastest configuration")
        if fig is not None:
            written.append(_save(plt, fig, os.path.join(out_dir, f"memory_{profile}.png")))
    return written


def loader_figures(rows: list[dict], out_dir: str) -> list[str]:
    """``dataloader_<profile>.png``: accelerator utilisation against ``num_workers``, one
    panel per (tier, batch size), one line per dataset at its best ``prefetch_factor``, at
    the least compute per sample swept (where the reader is hardest pressed)."""
    ok = [r for r in rows if not r.get("error")]
    plt = _pyplot() if ok else None
    if plt is None:
        return []
    written = []
    for profile in sorted({r["profile"] for r in ok}):
        mine = [r for r in ok if r["profile"] == profile]
        compute = min(r.get("compute_per_sample_s", 0.0) for r in mine)
        mine = [r for r in mine if r.get("compute_per_sample_s", 0.0) == compute]
        label = f", {compute * 1e6:g} µs compute per sample" if "compute_per_sample_s" in mine[0] else ""
        tiers = sorted({r["tier"] for r in mine})
        batches = sorted({r["batch_size"] for r in mine})
        datasets = sorted({r["dataset"] for r in mine})
        workers = sorted({r["workers"] for r in mine})
        colors = plt.get_cmap("tab10")
        fig, axes = plt.subplots(len(batches), len(tiers), figsize=(4.2 * len(tiers), 2.8 * len(batches) + 0.8),
                                 sharex=True, sharey=True, squeeze=False)
        for (i, batch), (j, tier) in ((b, t) for b in enumerate(batches) for t in enumerate(tiers)):
            ax = axes[i][j]
            for k, name in enumerate(datasets):
                best = {}
                for r in mine:
                    if (r["tier"], r["batch_size"], r["dataset"]) == (tier, batch, name):
                        best[r["workers"]] = max(best.get(r["workers"], 0.0), r["au"])
                if best:
                    xs = sorted(best)
                    ax.plot(xs, [best[x] for x in xs], marker="o", color=colors(k % 10), label=name)
            ax.set_title(f"{tier}, batch {batch}", fontsize=11)
            ax.set_xticks(workers)
            ax.set_ylim(0, 1)
            ax.grid(color="#dddddd", linewidth=0.6)
            if i == len(batches) - 1:
                ax.set_xlabel("num_workers", fontsize=10)
            if j == 0:
                ax.set_ylabel("accelerator utilisation", fontsize=10)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 6), frameon=False, fontsize=10,
                   bbox_to_anchor=(0.5, 0.96))
        fig.suptitle(f"{profile}: DataLoader, one shuffled epoch{label} (best prefetch_factor)",
                     fontsize=12, y=0.995)
        fig.tight_layout(rect=(0, 0, 1, 0.91))
        written.append(_save(plt, fig, os.path.join(out_dir, f"dataloader_{profile}.png")))
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m hpcio.bench.plots RESULTS_JSON OUT_DIR", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        report = json.load(f)
    os.makedirs(args[1], exist_ok=True)
    for path in throughput_figures(report.get("records", []), args[1]) + loader_figures(
            report.get("dataloader", []), args[1]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
