"""Readers refuse a shard that is a symbolic link out of the dataset's directory."""

import glob
import os
import shutil

import pytest

import hpcio
from hpcio.errors import PathEscapeError

OPTIONS = {"hdf5": {"max_count": 5}, "webdataset": {"max_count": 5}, "msgpack": {"max_count": 5},
           "parquet": {"max_count": 5, "row_group_size": 5}, "jinx": {"shard_size": 64}}
SUFFIX = {"hdf5": ".h5", "webdataset": ".tar", "msgpack": ".msgpack", "parquet": ".parquet", "jinx": ".jinx"}


@pytest.mark.parametrize("fmt", sorted(OPTIONS))
def test_a_shard_linked_out_of_the_dataset_is_refused(tmp_path, fmt):
    d = tmp_path / "data"
    with hpcio.open_writer(str(d), format=fmt, **OPTIONS[fmt]) as w:
        for i in range(12):
            w.write({"id": i, "text": f"t{i}"})
    shards = sorted(glob.glob(str(d / f"*{SUFFIX[fmt]}")))
    assert len(shards) > 1
    assert sum(1 for _ in hpcio.open(str(d))) == 12
    victim = shards[-1]
    os.makedirs(tmp_path / "elsewhere")
    target = str(tmp_path / "elsewhere" / os.path.basename(victim))
    shutil.move(victim, target)
    os.symlink(target, victim)
    with pytest.raises(PathEscapeError) as err:
        list(hpcio.open(str(d)))
    assert f"{os.path.basename(victim)!r} is a symbolic link to {target}, outside {d}" in str(err.value)
    os.unlink(victim)  # a link that stays inside is the dataset's own
    shutil.move(target, str(d / "moved"))
    os.symlink("moved", victim)
    assert sum(1 for _ in hpcio.open(str(d))) == 12


def test_an_mds_shard_under_a_directory_linked_out_of_the_dataset_is_refused(tmp_path):
    """MDS names its shards in index.json: a basename under a subdirectory that is a link
    leaving the dataset is refused when the shard is opened; a plain one costs one lstat."""
    import json

    d = tmp_path / "data"
    with hpcio.open_writer(str(d), format="mds", size_limit=1 << 10) as w:
        for i in range(40):
            w.write({"id": i, "text": f"t{i}" * 20})
    index = json.loads((d / "index.json").read_text())
    assert len(index["shards"]) > 1
    first = index["shards"][0]["raw_data"]["basename"]
    os.makedirs(tmp_path / "elsewhere")
    shutil.move(str(d / first), str(tmp_path / "elsewhere" / first))
    os.symlink(str(tmp_path / "elsewhere"), str(d / "sub"))
    index["shards"][0]["raw_data"]["basename"] = f"sub/{first}"
    (d / "index.json").write_text(json.dumps(index))
    (d / "index.hpcio").unlink(missing_ok=True)
    ds = hpcio.open(str(d))
    assert ds[len(ds) - 1]["id"] == 39  # the other shards read
    with pytest.raises(PathEscapeError) as err:
        ds[0]
    assert str(err.value) == (f"shard file 'sub/{first}' resolves to {tmp_path / 'elsewhere' / first}, outside {d} "
                              f"({d / 'index.json'})")
    os.unlink(d / "sub")  # the same name through a directory of its own reads
    os.makedirs(d / "sub")
    shutil.move(str(tmp_path / "elsewhere" / first), str(d / "sub" / first))
    assert [s["id"] for s in hpcio.open(str(d))] == list(range(40))
