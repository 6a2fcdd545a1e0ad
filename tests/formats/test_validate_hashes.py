"""validate_hashes is taken by every format's reader, also where checksums are always checked."""

import pytest

import hpcio


@pytest.mark.parametrize("fmt", ["zarr", "hdf5", "parquet", "mds", "jinx", "webdataset", "msgpack"])
def test_every_format_accepts_validate_hashes(tmp_path, fmt):
    path = tmp_path / "d"
    with hpcio.open_writer(str(path), format=fmt) as w:
        for i in range(3):
            w.write({"id": i, "text": f"t{i}"})
    assert [s["id"] for s in hpcio.open(str(path), validate_hashes=True)] == [0, 1, 2]
