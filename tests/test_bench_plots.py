"""The benchmark figures: each library's best configuration per operation, and the
DataLoader sweep as small multiples; the committed figures redraw from their data."""

from __future__ import annotations

import json
import pathlib

import pytest

from hpcio.bench.plots import (
    _figure,
    _loader_figure,
    _pyplot,
    best_au,
    best_per_library,
    loader_figures,
    main,
    plot_data,
    throughput_figures,
)

REPO = pathlib.Path(__file__).resolve().parent.parent


def _record(system, op, samples_per_s, peer=True, rss=100.0):
    return {"profile": "text", "op": op, "system": system, "peer": peer, "samples_per_s": samples_per_s,
            "maxrss_mb": rss}


RECORDS = [
    _record("hpcio mds", "iterate", 500.0, peer=False),
    _record("hpcio mds zero-copy", "iterate", 700.0, peer=False),
    _record("mldataforge mds ram", "iterate", 100.0),
    _record("mldataforge jinx eager", "iterate", 150.0),
    _record("webdataset", "iterate", 20.0),
    _record("mldataforge jinx eager", "shuffle", 90.0),
    _record("hpcio mds", "shuffle", 400.0, peer=False),
    _record("hpcio mds", "batch", 800.0, peer=False),
]


def test_best_per_library_keeps_each_librarys_fastest():
    best = best_per_library(RECORDS, "text", "iterate")
    assert {lib: r["system"] for lib, r in best.items()} == {
        "hpcio": "hpcio mds zero-copy", "mldataforge": "mldataforge jinx eager", "webdataset": "webdataset"}


def test_batch_operations_compare_with_the_peers_shuffle():
    best = best_per_library(RECORDS, "text", "batch")
    assert best["hpcio"]["op"] == "batch"
    assert best["mldataforge"]["op"] == "shuffle"


def test_figures_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    assert sorted(p.split("/")[-1] for p in throughput_figures(RECORDS, str(tmp_path))) == [
        "memory_text.png", "throughput_text.png"]
    loader = [{"profile": "vlm", "tier": tier, "dataset": "mds", "batch_size": 32, "workers": w,
               "prefetch_factor": 2, "au": 0.5} for tier in ("tmp", "shm") for w in (0, 1, 2)]
    assert [p.split("/")[-1] for p in loader_figures(loader, str(tmp_path))] == ["dataloader_vlm.png"]


def _loader_rows():
    rows = [{"profile": "vlm", "tier": tier, "dataset": name, "batch_size": 32, "workers": w, "prefetch_factor": pf,
             "au": 0.1 * w + (0.05 if pf == 8 else 0.0), "cache": "cold", "samples_per_s": 10.0}
            for tier in ("tmp", "shm") for name in ("mds", "jinx") for w in (0, 1, 2) for pf in (2, 8)]
    return [r for r in rows if not (r["tier"] == "tmp" and r["dataset"] == "jinx")]


def test_dataloader_panels_keep_the_best_prefetch_and_integer_workers():
    plt = pytest.importorskip("matplotlib") and _pyplot()
    rows = _loader_rows()
    assert best_au(rows, "shm", 32, "jinx") == pytest.approx({0: 0.05, 1: 0.15, 2: 0.25})
    fig = _loader_figure(plt, rows, "vlm")
    try:
        for ax in fig.axes:
            assert list(ax.get_xticks()) == [0, 1, 2]
        # every dataset in the legend, also one missing from the first panel
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["mds", "jinx"]
        assert [ax.get_title() for ax in fig.axes] == ["tier tmp, batch size 32", "tier shm, batch size 32"]
    finally:
        plt.close(fig)


def test_configuration_labels_stay_inside_their_bars():
    plt = pytest.importorskip("matplotlib") and _pyplot()
    fig = _figure(plt, RECORDS, "text", "samples_per_s", "samples/s", True, "text")
    try:
        renderer = fig.canvas.get_renderer()
        inside = [t for ax in fig.axes for t in ax.texts if t.get_color() == "white"]
        assert "mds zero-copy" in [t.get_text() for t in inside]
        for ax in fig.axes:
            for text in (t for t in ax.texts if t.get_color() == "white"):
                bar = min(ax.patches, key=lambda p: abs(p.get_y() + p.get_height() / 2 - text.get_position()[1]))
                assert text.get_window_extent(renderer).x1 <= bar.get_window_extent(renderer).x1
    finally:
        plt.close(fig)


def test_plot_data_keeps_what_the_figures_draw(tmp_path, capsys):
    report = {"facts": {"cpu": "x"}, "summary": [{"op": "iterate"}],
              "records": [dict(r, checksum="abc", samples_per_s=r["samples_per_s"] + 0.123456) for r in RECORDS],
              "dataloader": [dict(r, wall_s=1.0, au=0.1234567) for r in _loader_rows()]}
    data = plot_data(report)
    assert set(data) == {"facts", "records", "dataloader"}
    assert data["records"][0] == {"profile": "text", "op": "iterate", "system": "hpcio mds", "peer": False,
                                  "samples_per_s": 500.1, "maxrss_mb": 100.0}
    assert data["dataloader"][0]["au"] == 0.123 and "wall_s" not in data["dataloader"][0]
    source = tmp_path / "results.json"
    source.write_text(json.dumps(report))
    assert main([str(source), str(tmp_path / "img")]) == 0
    assert json.loads((tmp_path / "img" / "plot-data.json").read_text()) == data


def test_committed_figures_redraw_from_their_data(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main([str(REPO / "docs" / "img" / "plot-data.json"), str(tmp_path)]) == 0
    drawn = {p.name for p in tmp_path.iterdir() if p.suffix == ".png"}
    assert drawn == {"throughput_text.png", "throughput_vlm.png", "memory_text.png", "memory_vlm.png",
                     "dataloader_text.png", "dataloader_vlm.png"}
    assert drawn <= {p.name for p in (REPO / "docs" / "img").iterdir()}
