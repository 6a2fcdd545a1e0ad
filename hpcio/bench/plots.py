"""Figures of a benchmark run, drawn to be read at the width the documentation shows them.

Per profile, one panel per operation on shared axes: the best configuration of hpcio and
of each peer library, one colour per library throughout, the value written on each bar.
The DataLoader sweep is drawn as small multiples, one panel per (tier, batch size), with
``num_workers`` as integers on the x axis.

Regenerate the figures from a report without running anything again::

    python -m hpcio.bench.plots bench-output/results.json docs/img

which also writes ``docs/img/plot-data.json``, the report cut down to what the figures
draw, so the committed figures can be drawn again from committed data.
"""

from __future__ import annotations

import json
import math
import os
import sys

from .runner import BATCH_OPS, OPERATIONS

__all__ = ["throughput_figures", "loader_figures", "plot_data", "main"]

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
# Figures are drawn at most this wide (inches at DPI): the width documentation pages show
# an image at, so the text is read at its own size rather than scaled down.
WIDTH = 8.8
PLOT_DATA = "plot-data.json"
# The fields of a report's records and DataLoader rows that the figures use, with how many
# decimals are worth keeping.
RECORD_FIELDS = {"profile": None, "op": None, "system": None, "peer": None, "samples_per_s": 1,
                 "maxrss_mb": 1, "error": None}
LOADER_FIELDS = {"profile": None, "tier": None, "dataset": None, "workers": None, "batch_size": None,
                 "prefetch_factor": None, "cache": None, "samples_per_s": 1, "au": 3, "error": None}


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


def _panel(ax, best: dict[str, dict], key: str, scale: tuple[float, float], log: bool) -> list:
    """One operation's bars, value at the end of each and configuration inside it; returns
    the (label, bar) pairs of the inside labels, which :func:`_drop_overflowing` checks."""
    libs = [lib for lib in LIBRARIES if lib in best and best[lib].get(key)]
    ys = range(len(libs))[::-1]
    values = [best[lib][key] for lib in libs]
    bars = ax.barh(list(ys), values, color=[LIBRARIES[lib] for lib in libs], height=0.72)
    inside = []
    for y, value, lib, bar in zip(ys, values, libs, bars):
        x = value * 1.08 if log else value + scale[1] * 0.01
        ax.text(x, y, _compact(value), va="center", ha="left", fontsize=10)
        configuration = best[lib]["system"][len(lib):].strip()
        if configuration:
            start = scale[0] * 1.12 if log else scale[1] * 0.01
            inside.append((ax.text(start, y, configuration, va="center", ha="left", fontsize=8.5, color="white"),
                           bar))
    ax.set_yticks([])
    if log:
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: no overlaps
    ax.set_xlim(*scale)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    return inside


def _drop_overflowing(fig, inside: list) -> None:
    """Remove the configuration labels that do not fit inside their bar once laid out:
    a label running past its bar's end would collide with the value written there."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for label, bar in inside:
        if label.get_window_extent(renderer).x1 > bar.get_window_extent(renderer).x1 - 2:
            label.remove()


def _panel_title(op: str, best: dict[str, dict], ratio: bool) -> str:
    """The operation, what the peers stand in with, and with ``ratio`` hpcio's speed-up."""
    ours = best.get("hpcio")
    peers = [r for lib, r in best.items() if lib != "hpcio"]
    title = op + (" (peers: per-sample shuffle)" if op in BATCH_OPS else "")
    if ratio and ours and peers:
        speedup = ours["samples_per_s"] / max(r["samples_per_s"] for r in peers)
        title += f"\nhpcio {speedup:.1f}× the best peer"
    return title


def _legend(fig, handles: list, columns: int, title: str) -> None:
    """The figure's title with its legend under it, above every panel: one block, for which
    constrained layout makes room (a separate suptitle would overlap the legend)."""
    fig.legend(handles=handles, loc="outside upper center", ncol=columns, frameon=False, fontsize=10.5,
               title=title, title_fontsize=12)


def _figure(plt, records, profile, key, xlabel, log, suptitle):
    from matplotlib.patches import Patch

    ops = [op for op in OPERATIONS if any(r["profile"] == profile and r["op"] == op for r in records)]
    bests = {op: best_per_library(records, profile, op) for op in ops}
    values = [r[key] for b in bests.values() for r in b.values() if r.get(key)]
    if not values:
        return None
    # room right of the longest bar for its label: a factor on a log axis, a fraction on a linear one
    top = max(values) * 4
    low = 10 ** min(math.floor(math.log10(min(values))), math.floor(math.log10(top)) - 2)
    scale = (low, top) if log else (0, max(values) * 1.2)
    cols = min(2, len(ops))
    rows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH * cols / 2, 2.3 * rows + 1.3), sharex=True,
                             squeeze=False, layout="constrained")
    inside = []
    for ax, op in zip(axes.flat, ops):
        inside += _panel(ax, bests[op], key, scale, log)
        ax.set_title(_panel_title(op, bests[op], ratio=key == "samples_per_s"), fontsize=11)
    for ax in list(axes.flat)[len(ops):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(xlabel, fontsize=10)
        ax.tick_params(axis="x", labelbottom=True, labelsize=10)
    drawn = {lib for b in bests.values() for lib, r in b.items() if r.get(key)}
    handles = [Patch(color=c, label=LABELS.get(lib, lib)) for lib, c in LIBRARIES.items() if lib in drawn]
    _legend(fig, handles, min(len(handles), 3), suptitle)
    _drop_overflowing(fig, inside)
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
        fig = _figure(plt, records, profile, "maxrss_mb", "peak RSS (MB)", False,
                      f"{profile}: peak memory of each library's fastest configuration")
        if fig is not None:
            written.append(_save(plt, fig, os.path.join(out_dir, f"memory_{profile}.png")))
    return written


def best_au(rows: list[dict], tier: str, batch: int, dataset: str) -> dict[int, float]:
    """``num_workers`` -> the best accelerator utilisation over ``prefetch_factor`` of one
    (tier, batch size, dataset)."""
    best: dict[int, float] = {}
    for r in rows:
        if (r["tier"], r["batch_size"], r["dataset"]) == (tier, batch, dataset):
            best[r["workers"]] = max(best.get(r["workers"], 0.0), r["au"])
    return best


def _loader_figure(plt, rows: list[dict], profile: str, label: str = ""):
    from matplotlib.lines import Line2D

    tiers = list(dict.fromkeys(r["tier"] for r in rows))  # in the order the sweep ran them
    batches = sorted({r["batch_size"] for r in rows})
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    workers = sorted({r["workers"] for r in rows})
    colors = {name: plt.get_cmap("tab10")(k % 10) for k, name in enumerate(datasets)}
    fig, axes = plt.subplots(len(batches), len(tiers), figsize=(min(WIDTH, 4.4 * len(tiers)), 2.6 * len(batches) + 1.3),
                             sharex=True, sharey=True, squeeze=False, layout="constrained")
    for (i, batch), (j, tier) in ((b, t) for b in enumerate(batches) for t in enumerate(tiers)):
        ax = axes[i][j]
        for name in datasets:
            best = best_au(rows, tier, batch, name)
            if best:
                xs = sorted(best)
                ax.plot(xs, [best[x] for x in xs], marker="o", color=colors[name], linewidth=1.6)
        ax.set_title(f"tier {tier}, batch size {batch}", fontsize=11)
        ax.set_xticks(workers)  # integers only: num_workers has no 0.5
        ax.set_xlim(workers[0] - 0.25, workers[-1] + 0.25)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=10, labelbottom=True)
        ax.grid(color="#dddddd", linewidth=0.6)
        if i == len(batches) - 1:
            ax.set_xlabel("num_workers", fontsize=10)
        if j == 0:
            ax.set_ylabel("accelerator utilisation", fontsize=10)
    handles = [Line2D([], [], color=colors[name], marker="o", label=name) for name in datasets]
    cache = rows[0].get("cache", "warm")
    _legend(fig, handles, min(len(handles), 3),
            f"{profile}: DataLoader, one shuffled epoch{label}, {cache} page cache (best prefetch_factor)")
    return fig


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
        fig = _loader_figure(plt, mine, profile, label)
        written.append(_save(plt, fig, os.path.join(out_dir, f"dataloader_{profile}.png")))
    return written


def _cut(row: dict, fields: dict) -> dict:
    out = {}
    for key, decimals in fields.items():
        value = row.get(key)
        if value is not None:
            out[key] = round(value, decimals) if decimals is not None and isinstance(value, float) else value
    return out


def _dumps(data: dict) -> str:
    """JSON with one row per line: short, and a new run changes the lines of what changed."""
    parts = []
    for key, value in data.items():
        if isinstance(value, list):
            rows = ",\n".join("  " + json.dumps(row) for row in value)
            parts.append(f" {json.dumps(key)}: [\n{rows}\n ]")
        else:
            parts.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def plot_data(report: dict) -> dict:
    """``report`` (a ``results.json``) cut down to the machine facts and the fields the
    figures draw: small enough to commit beside them, and enough to draw them again."""
    return {"facts": report.get("facts", {}),
            "records": [_cut(r, RECORD_FIELDS) for r in report.get("records", [])],
            "dataloader": [_cut(r, LOADER_FIELDS) for r in report.get("dataloader", [])]}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m hpcio.bench.plots RESULTS_JSON OUT_DIR", file=sys.stderr)
        return 2
    source, out_dir = args
    with open(source, encoding="utf-8") as f:
        data = plot_data(json.load(f))
    os.makedirs(out_dir, exist_ok=True)
    kept = os.path.join(out_dir, PLOT_DATA)
    if not os.path.exists(kept) or not os.path.samefile(source, kept):
        with open(kept, "w", encoding="utf-8") as f:
            f.write(_dumps(data))
        print(kept)
    for path in throughput_figures(data["records"], out_dir) + loader_figures(data["dataloader"], out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
