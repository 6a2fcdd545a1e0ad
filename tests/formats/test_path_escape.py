"""Names read from a dataset's own files never lead a reader outside the dataset: Zarr
part and array names, HDF5 external storage, external links and virtual datasets, tar
member names, image folder index entries and the parts a parallel conversion merges."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile

import numpy as np
import pytest

import hpcio
from hpcio.errors import ExternalStorageError, PathEscapeError
from hpcio.formats import hdf5 as h5fmt, webdataset as wdsfmt, zarr as zfmt


def write(path, fmt, samples, **options):
    with hpcio.open_writer(path, format=fmt, **options) as w:
        for s in samples:
            w.write(s)
    return path


# --- Zarr --------------------------------------------------------------------------------
@pytest.fixture
def zarr_stores(tmp_path):
    pytest.importorskip("zarr")
    public = write(tmp_path / "public" / "store", "zarr", [{"v": i} for i in range(3)])
    private = write(tmp_path / "private" / "victim", "zarr", [{"v": 1000 + i} for i in range(3)])
    return public, private


def set_root_parts(store, names):
    meta_path = store / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["attributes"]["hpcio"]["parts"] = [{"name": n, "num_samples": 3} for n in names]
    meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize("kind", ["relative", "absolute"])
def test_zarr_part_names_cannot_leave_the_store(zarr_stores, kind):
    public, private = zarr_stores
    name = "../../private/victim/part-00000" if kind == "relative" else str(private / "part-00000")
    set_root_parts(public, [name])
    with pytest.raises(PathEscapeError, match=re.escape(f"Zarr part name {name!r} leaves its directory ({public}/zarr.json)")):
        hpcio.open(public)


def test_a_zarr_part_name_the_file_system_cannot_encode_is_refused(zarr_stores):
    public, _private = zarr_stores
    set_root_parts(public, ["part-\ud800"])
    with pytest.raises(PathEscapeError) as exc:
        hpcio.open(public)
    assert str(exc.value) == f"Zarr part name 'part-\\ud800' is not a file name ({public}/zarr.json)"


def test_zarr_part_through_a_link_cannot_leave_the_store(zarr_stores):
    public, private = zarr_stores
    os.symlink(private / "part-00000", public / "part-00001")
    set_root_parts(public, ["part-00001"])
    with pytest.raises(PathEscapeError, match=r"Zarr part name 'part-00001' resolves to .*/private/victim/part-00000, outside"):
        hpcio.open(public)


def test_zarr_field_names_cannot_leave_the_part(zarr_stores):
    public, _private = zarr_stores
    meta_path = public / "zarr.json"
    meta = json.loads(meta_path.read_text())
    layout = meta["attributes"]["hpcio"]
    layout["fields"] = {"../../../private/victim/part-00000/v": layout["fields"]["v"]}
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(PathEscapeError, match=re.escape("Zarr array name '../../../private/victim/part-00000/v' leaves")):
        hpcio.open(public)


def test_zarr_merge_index_refuses_part_names_leaving_the_store(tmp_path):
    pytest.importorskip("zarr")
    with pytest.raises(PathEscapeError, match=re.escape("Zarr part name '../x' leaves its directory")):
        zfmt.merge_index(tmp_path, [{"name": "../x", "num_samples": 1, "fields": {}}])


# --- HDF5 --------------------------------------------------------------------------------
@pytest.fixture
def h5_shard(tmp_path):
    h5py = pytest.importorskip("h5py")
    # no hash manifest: the file is edited below, and the reader checks it as it opens
    # (a recorded file is checked on its first read: tests/test_nodecache_hdf5.py)
    out = write(tmp_path / "ds", "hdf5", [{"v": i, "t": f"x{i}"} for i in range(4)], compression=None, hashes=[])
    secret = tmp_path / "secret.bin"
    np.arange(4, dtype="<i8").__add__(7000).tofile(secret)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("v", data=np.arange(4, dtype="<i8") + 9000)
    return h5py, out / "shard-000000.h5", secret, other


def external_storage(h5py, f, secret, other):
    del f["v"]
    f.create_dataset("v", shape=(4,), dtype="<i8", external=[(str(secret), 0, 32)])
    return f"dataset 'v' keeps its values in external files ['{secret}']"


def external_link(h5py, f, secret, other):
    del f["t/offsets"]
    f["t/offsets"] = h5py.ExternalLink(str(other), "/v")
    return f"dataset 't/offsets': 't/offsets' is an external link to {other}:/v"


@pytest.mark.parametrize("damage", [external_storage, external_link])
def test_hdf5_values_in_other_files_are_refused(h5_shard, damage):
    h5py, shard, secret, other = h5_shard
    with h5py.File(shard, "a") as f:
        message = damage(h5py, f, secret, other)
    with pytest.raises(ExternalStorageError, match=re.escape(f"{message} ({shard})")):
        hpcio.open(shard.parent)


def test_hdf5_external_link_on_the_way_to_a_dataset_is_refused(h5_shard):
    h5py, shard, _secret, other = h5_shard
    with h5py.File(shard, "a") as f:
        del f["t"]
        f["t"] = h5py.ExternalLink(str(other), "/")
    with pytest.raises(ExternalStorageError, match=r"dataset 't/offsets': 't' is an external link"):
        hpcio.open(shard.parent)


def test_hdf5_virtual_dataset_is_refused(h5_shard):
    h5py, shard, _secret, other = h5_shard
    layout = h5py.VirtualLayout(shape=(4,), dtype="<i8")
    layout[:] = h5py.VirtualSource(str(other), "v", shape=(4,))
    with h5py.File(shard, "a") as f:
        del f["v"]
        f.create_virtual_dataset("v", layout)
    with pytest.raises(ExternalStorageError, match=re.escape(
            f"dataset 'v' is a virtual dataset over ['{other}'] ({shard})")):
        hpcio.open(shard.parent)


def test_hdf5_merge_index_refuses_file_names_leaving_the_directory(tmp_path):
    with pytest.raises(PathEscapeError, match=re.escape("HDF5 shard name '/etc/passwd' leaves its directory")):
        h5fmt.merge_index(tmp_path, [{"file": "/etc/passwd", "samples": 0, "fields": {}}])


# --- WebDataset --------------------------------------------------------------------------
def tar_with(path, names):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return path


@pytest.mark.parametrize("name", ["../../etc/cron.d/job.txt", "/etc/cron.d/job.txt", "a/../../b.txt"])
def test_tar_member_names_leaving_the_archive_are_refused(tmp_path, name):
    shard = tar_with(tmp_path / "shard-000000.tar", ["ok.txt", name])
    with pytest.raises(PathEscapeError, match=re.escape(f"tar member name {name!r} leaves its directory ({shard}, byte offset 1024")):
        hpcio.open(shard)
    with pytest.raises(PathEscapeError, match=re.escape(f"tar member name {name!r} leaves its directory ({shard}, byte offset 1024")):
        with open(shard, "rb") as f:
            list(wdsfmt.iter_tar(f, path=str(shard)))


def test_member_names_with_dots_inside_a_component_are_kept(tmp_path):
    shard = tar_with(tmp_path / "shard-000000.tar", ["d..e/a.txt", "c/x...txt"])
    assert [len(s) for s in hpcio.open(shard)] == [1, 1]


def test_webdataset_writer_refuses_keys_leaving_the_archive(tmp_path):
    with pytest.raises(PathEscapeError, match=re.escape("sample key '../up' leaves its directory")):
        write(tmp_path / "w", "webdataset", [{"__key__": "../up", "txt": "x"}])
    assert not (tmp_path / "w").exists()


def test_webdataset_merge_index_refuses_file_names_leaving_the_directory(tmp_path):
    with pytest.raises(PathEscapeError, match=re.escape("WebDataset shard name '../x.tar' leaves its directory")):
        wdsfmt.merge_index(tmp_path, [{"file": "../x.tar", "samples": 1}])


# --- image folders -----------------------------------------------------------------------
@pytest.mark.parametrize("entry", [("..", "secret.txt"), ("cat", "../../secret.txt"), ("/", "secret.txt")])
def test_image_folder_index_cannot_name_files_outside(tmp_path, entry):
    (tmp_path / "secret.txt").write_text("s")
    folder = write(tmp_path / "f", "imagefolder", [{"label": "cat", "image": b"\xff\xd8\xff" + b"0" * 8}])
    meta = json.loads((folder / "index.json").read_text())
    cls, name = entry
    meta["samples"] = [[cls, "000000000", [[name, 1]]]]
    (folder / "index.json").write_text(json.dumps(meta))
    with pytest.raises(PathEscapeError, match=re.escape(str(folder / "index.json"))):
        hpcio.open(folder)


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("how", ["sample", "schema"])
def test_layout_writers_refuse_field_names_naming_directories(tmp_path, fmt, how):
    pytest.importorskip({"zarr": "zarr", "hdf5": "h5py"}[fmt])
    from hpcio.errors import UnsupportedValueError

    options = {"schema": {"..": "int"}} if how == "schema" else {}
    with pytest.raises(UnsupportedValueError, match=re.escape("field name '..' would name a directory")):
        write(tmp_path / "out", fmt, [{"..": 1}], **options)
    assert not (tmp_path / "out").exists()
