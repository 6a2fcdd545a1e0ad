"""hpcio.NodeCache's units: a run of a reader's shards reading the same files (the row
groups of one Parquet file) is one unit the cache fetches and evicts."""

from __future__ import annotations

import re

import pytest

from hpcio.errors import CapabilityError
from hpcio.formats.base import ShardFile
from hpcio.nodecache import _release_units, _units


# --- cache units ------------------------------------------------------------------------
def test_shards_reading_the_same_files_are_one_cache_unit():
    a, b, c, d = (ShardFile(name, 10) for name in ("a", "b", "c", "d"))
    shards = [[a], [a], [b, c], [b, c], [b, c], [], [], [d]]
    units, first = _units(shards, "/top", "fmt")
    assert units == [[a], [b, c], [], [d]] and first.tolist() == [0, 2, 5, 7, 8]
    released = []
    _release_units(released.extend, first)([1, 3])
    assert released == [2, 3, 4, 7]
    assert _units([], "/top", "fmt")[1].tolist() == [0]
    with pytest.raises(CapabilityError, match=re.escape(
            "the fmt reader's shards 0 and 2 both read this file but are not one run of shards reading the "
            "same files, which a node cache fetches and evicts as one unit (/top/a)") + "$"):
        _units([[a], [b], [a]], "/top", "fmt")
    with pytest.raises(CapabilityError, match=re.escape("shards 0 and 1 both read this file") + ".*/top/b"):
        _units([[a, b], [b, c]], "/top", "fmt")
