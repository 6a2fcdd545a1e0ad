"""An edited array ``zarr.json`` that would read other values than were written is refused."""

import json

import pytest

import hpcio
from hpcio.errors import CorruptShardError

EDITS = {
    "separator": (lambda m: m["chunk_key_encoding"]["configuration"].update(separator="."),
                  "chunk keys 'default' with separator '.', not 'default' with '/'"),
    "data type": (lambda m: m.update(data_type="int32"), "data type <i4, the layout records <i8"),
    "byte order": (lambda m: m["codecs"][0]["configuration"]["codecs"][0]["configuration"].update(endian="big"),
                   "bytes stored big-endian, not little-endian"),
    "no sharding": (lambda m: m.update(codecs=m["codecs"][0]["configuration"]["codecs"]), "no sharding codec"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_array_metadata_is_refused_by_name(tmp_path, edit):
    path = tmp_path / "z"
    with hpcio.open_writer(str(path), format="zarr") as w:
        for i in range(10):
            w.write({"id": i, "text": "t"})
    assert [s["id"] for s in hpcio.open(str(path))] == list(range(10))
    meta = path / "part-00000" / "id" / "zarr.json"
    m = json.loads(meta.read_text())
    change, reason = EDITS[edit]
    change(m)
    meta.write_text(json.dumps(m))
    with pytest.raises(CorruptShardError) as err:
        list(hpcio.open(str(path)))
    assert str(err.value) == f"array 'id': {reason}; hpcio reads the layout its writer makes ({meta})"


def test_an_empty_chunk_shape_is_a_typed_error(tmp_path):
    path = tmp_path / "z"
    with hpcio.open_writer(str(path), format="zarr") as w:
        w.write({"id": 0})
    meta = path / "part-00000" / "id" / "zarr.json"
    m = json.loads(meta.read_text())
    m["codecs"][0]["configuration"]["chunk_shape"] = [0]
    meta.write_text(json.dumps(m))
    with pytest.raises(CorruptShardError, match=r"^array 'id' "):
        list(hpcio.open(str(path)))
