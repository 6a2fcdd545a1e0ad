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
