"""The benchmark figures: each library's best configuration per operation, and the
DataLoader sweep as small multiples; the committed figures redraw from their data."""

from __future__ import annotations

import pathlib

import pytest

from hpcio.bench.plots import best_per_library, loader_figures, main, throughput_figures

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


def test_committed_figures_redraw_from_their_data(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main([str(REPO / "docs" / "img" / "plot-data.json"), str(tmp_path)]) == 0
    drawn = {p.name for p in tmp_path.iterdir()}
    assert drawn == {"throughput_text.png", "throughput_vlm.png", "memory_text.png", "memory_vlm.png"}
    assert drawn <= {p.name for p in (REPO / "docs" / "img").iterdir()}
