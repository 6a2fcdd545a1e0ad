"""A synthetic MDS dataset at the design's scale: 10^5 shards of 10^5 samples each.

``index.json`` is written in streaming's exact layout (``json.dump(..., sort_keys=True)``
of streaming's entries).  Every entry describes the same real shard, written once; only
the shards a test names get a file (a hard link to that shard), so opening the index
costs what it would on a real dataset of that size while the disk holds one shard.
"""

from __future__ import annotations

import errno
import json
import os
import shutil

import hpcio

SHARDS = 100_000
PER_SHARD = 100_000


def write_template(directory) -> dict:
    """One real shard of ``PER_SHARD`` samples ``{"id": local index}`` in ``directory``;
    returns its ``index.json`` entry."""
    with hpcio.open_writer(directory, format="mds", columns={"id": "int"}, size_limit=None) as w:
        for i in range(PER_SHARD):
            w.write({"id": i})
    with open(os.path.join(directory, "index.json")) as f:
        return json.load(f)["shards"][0]


def write_index(directory, template: dict, shards: int = SHARDS) -> str:
    """``index.json`` of ``shards`` copies of ``template`` (shard ``k`` is
    ``shard.kkkkk.mds``), in streaming's layout; returns its path."""
    os.makedirs(directory, exist_ok=True)
    entries = []
    for k in range(shards):
        raw = dict(template["raw_data"], basename=f"shard.{k:05}.mds")
        entries.append({**template, "raw_data": raw})
    path = os.path.join(directory, "index.json")
    with open(path, "w") as f:
        json.dump({"version": 2, "shards": entries}, f, sort_keys=True)
    return path


def link_shards(directory, template_dir, shards) -> None:
    """Give shards ``shards`` of the synthetic dataset their file: a hard link to the
    template's shard (to a fresh copy of it once a file has as many links as the
    filesystem allows)."""
    source = os.path.join(template_dir, "shard.00000.mds")
    for k in shards:
        target = os.path.join(directory, f"shard.{k:05}.mds")
        if os.path.exists(target):
            continue
        try:
            os.link(source, target)
        except OSError as exc:
            if exc.errno != errno.EMLINK:
                raise
            shutil.copyfile(source, target)
            source = target
