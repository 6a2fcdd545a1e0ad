"""References read only what the user named: files inside the source's directory or a
``ref_root``, regular, size-bounded; anything else a typed error naming field, sample
and path."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hpcio
from hpcio.cli.main import main
from hpcio.errors import DecompressionLimitError, PathEscapeError
from hpcio.sources import expand_sources, open_reader

STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def jsonl(path, refs) -> str:
    with open(path, "w") as f:
        for i, ref in enumerate(refs):
            f.write(json.dumps({"id": i, "img": ref}) + "\n")
    return str(path)


def reader_of(path, **options):
    return open_reader(expand_sources(str(path))[0], {"ref_fields": "img", **options})


@pytest.fixture
def layout(tmp_path):
    """``src/`` holds the source and ``a.bin``; ``outside.bin`` and ``other/b.bin`` lie beside it."""
    (tmp_path / "src").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"inside")
    (tmp_path / "outside.bin").write_bytes(b"secret")
    (tmp_path / "other" / "b.bin").write_bytes(b"other root")
    return tmp_path


@pytest.mark.parametrize("ref", ["../outside.bin", "/etc/passwd", "/proc/self/environ"])
def test_a_reference_outside_the_source_directory_is_refused(layout, ref):
    path = jsonl(layout / "src" / "refs.jsonl", ["a.bin", ref])
    with reader_of(path) as reader:
        assert reader.read(0)["img"] == b"inside"
        with pytest.raises(PathEscapeError) as err:
            reader.read(1)
    real = os.path.realpath(os.path.join(layout / "src", ref))
    assert str(err.value) == (
        f"field 'img' on line 2: reference {ref!r} resolves to {real}, outside {layout / 'src'}: give "
        f"-I ref_root=DIR for another directory, or -I ref_anywhere=true to read any path "
        f"({path}, byte offset 26, sample 1)")


def test_a_tar_reference_that_climbs_out_is_refused(layout):
    path = jsonl(layout / "src" / "refs.jsonl", ["tar://../../o.tar#k.jpg"])
    with reader_of(path) as reader, pytest.raises(PathEscapeError, match=r"^field 'img' on line 1: reference "
                                                  r"'../../o.tar' resolves to .*, outside "):
        reader.read(0)


def test_a_symlink_inside_the_root_that_points_outside_is_refused(layout):
    os.symlink(layout / "outside.bin", layout / "src" / "link.bin")
    path = jsonl(layout / "src" / "refs.jsonl", ["link.bin"])
    with reader_of(path) as reader, pytest.raises(PathEscapeError, match=r"^field 'img' on line 1: reference "
                                                  rf"'link.bin' resolves to {layout}/outside.bin, outside "):
        reader.read(0)


def test_ref_roots_admit_other_directories_and_ref_anywhere_any_path(layout):
    path = jsonl(layout / "src" / "refs.jsonl", ["b.bin", str(layout / "outside.bin")])
    roots = os.pathsep.join([str(layout / "src"), str(layout / "other"), str(layout)])
    with reader_of(path, ref_root=roots) as reader:
        assert [s["img"] for s in reader.read_many([0, 1])] == [b"other root", b"secret"]
    with reader_of(path, ref_root=[str(layout / "other")], ref_anywhere="true") as reader:
        assert reader.read(1)["img"] == b"secret"


@pytest.mark.parametrize("make", ["fifo", "device", "directory"])
def test_only_regular_files_are_read(layout, make):
    target = {"fifo": layout / "src" / "pipe", "device": "/dev/zero", "directory": layout / "src"}[make]
    if make == "fifo":
        os.mkfifo(target)
    path = jsonl(layout / "src" / "refs.jsonl", [str(target)])
    with reader_of(path, ref_anywhere=True) as reader, pytest.raises(
            PathEscapeError, match=rf"^field 'img' on line 1: reference '{target}' names {target}, which is not "
                                   r"a regular file \("):
        reader.read(0)  # a FIFO would block an open(); it is never opened


def test_a_referenced_file_beyond_ref_max_bytes_is_refused_before_reading(layout):
    path = jsonl(layout / "src" / "refs.jsonl", ["a.bin"])
    with reader_of(path, ref_max_bytes=5) as reader, pytest.raises(
            DecompressionLimitError, match=rf"^field 'img' on line 1: referenced file {layout}/src/a.bin holds 6 "
                                           r"bytes, more than ref_max_bytes=5 \("):
        reader.read(0)
    with pytest.raises(ValueError, match=r"^reader option ref_max_bytes: expected a whole number of bytes >= 1, "
                                         r"got '0'$"):
        reader_of(path, ref_max_bytes="0")


def test_a_file_struct_naming_an_outside_path_is_refused_with_no_option_given(layout, capsys):
    """The layout Hugging Face ``Image`` features write, with a path and no bytes."""
    table = pa.table({"id": [0, 1], "image": pa.array([{"bytes": b"\x89PNG", "path": "x.png"},
                                                       {"bytes": None, "path": "/etc/passwd"}], STRUCT)})
    pq.write_table(table, layout / "src" / "data.parquet")
    out = layout / "out"
    assert main(["convert", str(layout / "src" / "data.parquet"), str(out), "--to", "mds", "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert ("field 'image' in row 1: reference '/etc/passwd' resolves to /etc/passwd, outside "
            f"{layout / 'src'}") in err
    assert not os.path.exists(out)
    pq.write_table(table.slice(0, 1), layout / "src" / "data.parquet")
    good = layout / "good"
    assert main(["convert", str(layout / "src" / "data.parquet"), str(good), "--to", "mds", "--no-progress"]) == 0
    assert [bytes(s["image"]) for s in hpcio.open(good)] == [b"\x89PNG"]


def test_ref_root_is_repeatable_on_the_command_line(layout):
    path = jsonl(layout / "src" / "refs.jsonl", ["a.bin", "b.bin"])
    out = layout / "out"
    assert main(["convert", path, str(out), "--to", "mds", "--no-progress", "-I", "ref_fields=img",
                 "-I", f"ref_root={layout / 'src'}", "-I", f"ref_root={layout / 'other'}"]) == 0
    assert sorted(bytes(s["img"]) for s in hpcio.open(out)) == [b"inside", b"other root"]
