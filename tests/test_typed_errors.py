"""Damaged bytes raise hpcio's typed errors, located, whichever path reads them: a
sample, a column batch, or a third-party library (zarr, h5py, numpy, json)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import hpcio
from hpcio.errors import CorruptShardError, DecodeError, HpcioError


def _replace_in(path, old: bytes, new: bytes) -> None:
    assert len(old) == len(new)
    with open(path, "r+b") as f:
        data = f.read()
        assert data.count(old) == 1
        f.seek(0)
        f.write(data.replace(old, new))


def _mds_with(tmp_path, columns, samples):
    path = tmp_path / "mds"
    with hpcio.open_writer(path, format="mds", columns=columns) as w:
        for s in samples:
            w.write(s)
    return path, path / "shard.00000.mds"


def test_a_column_value_that_does_not_decode_is_located_as_the_sample_is(tmp_path):
    path, shard = _mds_with(tmp_path, {"text": "str"}, [{"text": "good"}, {"text": "hello"}])
    _replace_in(shard, b"hello", b"\xffello")
    ds = hpcio.open(path)
    with pytest.raises(DecodeError) as by_sample:
        ds[1]
    assert by_sample.value.sample == 1 and by_sample.value.path == str(shard)
    for read in (lambda col: col.to_pylist(), lambda col: col[1]):
        with pytest.raises(DecodeError) as by_column:
            read(ds.get_columns([0, 1])["text"])
        assert str(by_column.value) == str(by_sample.value)


def test_json_nested_past_the_recursion_limit_is_a_decode_error(tmp_path):
    depth = 100_000
    path, shard = _mds_with(tmp_path, {"doc": "json"}, [{"doc": "x" * (2 * depth - 2)}])
    _replace_in(shard, b'"' + b"x" * (2 * depth - 2) + b'"', b"[" * depth + b"]" * depth)
    ds = hpcio.open(path)
    with pytest.raises(DecodeError, match="column 'doc'") as exc:
        ds[0]
    assert exc.value.sample == 0
    with pytest.raises(DecodeError):
        ds.get_columns([0])["doc"].to_pylist()


def test_a_hand_built_json_column_raises_a_json_decode_error_that_is_typed():
    col = hpcio.VarColumn("json", np.frombuffer(b"1[", np.uint8), np.array([0, 1, 2]))
    with pytest.raises(DecodeError, match=r"^value 1 of a json column is not JSON: ") as exc:
        col.to_pylist()
    assert isinstance(exc.value, json.JSONDecodeError)


def test_a_garbled_npy_header_is_a_decode_error(tmp_path):
    import io
    import tarfile

    header = b"\x93NUMPY\x01\x00" + (16).to_bytes(2, "little") + b"{'descr': '''<i8\n"
    path = tmp_path / "shard-000000.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("0.x.npy")
        info.size = len(header)
        tar.addfile(info, io.BytesIO(header))
    with pytest.raises(DecodeError, match="not a valid .npy array"):
        hpcio.open(path, format="webdataset")[0]


@pytest.mark.parametrize(("shape", "wrong"), [(f"({-(2**70)}, 3)", "a negative dimension"),
                                              ("(0, True, 3)", "a dimension that is not an integer")])
def test_an_npy_dimension_that_is_not_a_size_is_a_decode_error(shape, wrong):
    from hpcio.formats import _values

    value = np.lib.format._wrap_header(f"{{'descr': '<f4', 'fortran_order': True, 'shape': {shape}, }}",
                                       (1, 0)) + b"\0" * 12
    with pytest.raises(DecodeError) as exc:
        _values.decode_value("ndarray", value, field="arr", sample=3, path="x.npy")
    assert str(exc.value) == (f"field 'arr' is not a valid .npy array: .npy header declares shape "
                              f"{shape}, with {wrong} (x.npy, sample 3)")


@pytest.mark.parametrize(("key", "value"), [("size", 1e400), ("source_mtime_ns", 17.0), ("size", True),
                                            ("path", 7)])
def test_a_manifest_field_of_the_wrong_json_type_is_a_corrupt_shard(tmp_path, key, value):
    from hpcio.staging import MANIFEST_NAME, read_manifest

    record = {"algo": "xxh3_64", "digest": "c91ac5dbf83c05be", "path": "a", "size": 3, "source_mtime_ns": 17}
    record[key] = value
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"version": 1, "source": "/src", "files": [record]}))
    kind = "a string" if key == "path" else "an integer"
    with pytest.raises(CorruptShardError) as exc:
        read_manifest(tmp_path)
    assert str(exc.value) == (f"not a valid staging manifest: TypeError('{key} is "
                              f"{json.loads(json.dumps(value))!r}, not {kind}') ({tmp_path / MANIFEST_NAME})")


def _zarr_offsets_array(tmp_path):
    """A Zarr store of four samples, and the zarr.json of its first part's text offsets."""
    pytest.importorskip("zarr")
    path = tmp_path / "store"
    with hpcio.open_writer(path, format="zarr") as w:
        for i in range(4):
            w.write({"id": i, "text": f"t{i}"})
    return path, path / "part-00000" / "text" / "offsets" / "zarr.json"


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_a_damaged_zarr_array_description_is_a_corrupt_shard(tmp_path, damage):
    path, meta = _zarr_offsets_array(tmp_path)
    data = meta.read_bytes()
    meta.write_bytes(data[: len(data) // 2] if damage == "truncate" else data.replace(b'"', b"'", 3))
    with pytest.raises(CorruptShardError, match=r"array 'text/offsets' cannot be opened: ") as exc:
        hpcio.open(path)[0]
    assert exc.value.path == str(meta)


def test_a_zarr_inner_chunk_of_zero_is_a_corrupt_shard(tmp_path):
    path, meta = _zarr_offsets_array(tmp_path)
    doc = json.loads(meta.read_text())
    doc["codecs"] = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [0], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]
    meta.write_text(json.dumps(doc))
    with pytest.raises(CorruptShardError) as exc:
        hpcio.open(path)[0]
    assert str(exc.value) == (f"array 'text/offsets' cannot be opened: ZeroDivisionError: integer modulo by zero "
                              f"({meta})")


def test_a_damaged_hdf5_layout_attribute_is_a_corrupt_shard(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "h5"
    with hpcio.open_writer(path, format="hdf5", hashes=[]) as w:  # no manifest: the layout is read at open
        for i in range(4):
            w.write({"id": i})
    (shard,) = [path / n for n in os.listdir(path) if n.endswith(".h5")]
    with h5py.File(shard, "r+") as f:
        f.attrs["hpcio"] = f.attrs["hpcio"][:-3]
    with pytest.raises(CorruptShardError, match=r"^damaged hpcio layout in HDF5 file: JSONDecodeError: "):
        hpcio.open(path)


def test_every_error_class_is_an_hpcio_error_with_a_builtin_base():
    from hpcio import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        if isinstance(cls, type):
            assert issubclass(cls, HpcioError), name
            assert cls is HpcioError or any(
                not issubclass(base, HpcioError) for base in cls.__mro__[1:-2]), name
