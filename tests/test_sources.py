"""The source layer: listing and reading sources, bytes carried as base64, data URLs,
references and Hugging Face structs, Hugging Face datasets saved to disk, and the
errors, each also end to end through ``hpcio convert``."""

import base64
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hpcio
from hpcio.cli.main import main
from hpcio.errors import DecodeError, ShardNotFoundError
from hpcio.sources import DecodedReader, expand_sources, measure_source, open_reader

IMAGES = [b"\x89PNG\r\n\x1a\n" + bytes([i]) * (40 + 13 * i) for i in range(6)]
IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
HF_FEATURES = {
    "image": {"decode": True, "id": None, "_type": "Image"},
    "label": {"dtype": "int64", "id": None, "_type": "Value"},
    "text": {"dtype": "string", "id": None, "_type": "Value"},
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_jsonl(path, rows) -> str:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(path)


def read_one(path, **options):
    with open_reader(expand_sources(str(path))[0], options) as reader:
        return reader.read(0)


def convert(*args) -> int:
    return main(["convert", *map(str, args), "--to", "mds", "--no-progress"])


def converted(out) -> dict:
    """The samples of a converted dataset by ``id``, values as plain Python objects."""
    return {int(s["id"]): {k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()}
            for s in hpcio.open(out)}


# --- listing and reading ----------------------------------------------------------------
def test_expand_sources_sniffs_files_and_claims_saved_datasets(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"id": 0}])
    (tmp_path / "notes.txt").write_text("not a dataset")
    save_to_disk(tmp_path / "hf", image_table(range(3)))
    found = expand_sources(tmp_path)
    assert [(os.path.basename(s.path), s.format) for s in found] == [("a.jsonl", "jsonl"), ("hf", "huggingface")]
    assert expand_sources(tmp_path / "hf", "hf")[0].format == "huggingface"


def test_training_formats_are_read_bare_and_raw_formats_decoded(tmp_path):
    with hpcio.open_writer(tmp_path / "m", format="mds") as w:
        w.write({"id": 0, "url": "data:image/png;base64,AAEC"})
    mds = expand_sources(tmp_path / "m")[0]
    with open_reader(mds) as reader:
        assert not isinstance(reader, DecodedReader) and reader.read(0)["url"] == "data:image/png;base64,AAEC"
    with open_reader(mds, {"decode_data_urls": True}) as reader:
        assert reader.read(0)["url"] == b"\x00\x01\x02"
    path = write_jsonl(tmp_path / "a.jsonl", [{"id": 0, "url": "data:image/png;base64,AAEC"}])
    assert read_one(path) == {"id": 0, "url": b"\x00\x01\x02"}
    assert read_one(path, decode_data_urls="false")["url"] == "data:image/png;base64,AAEC"


def test_measure_source_takes_field_options_out_of_the_reader_options(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"img": b64(b"abc")}, {"img": b64(b"defg")}])
    sizes = measure_source(expand_sources(path)[0], {"base64_fields": ["img"]})
    with open(path, "rb") as f:
        assert sizes.tolist() == [len(line) for line in f]


# --- base64 fields and data URLs -----------------------------------------------------------
def test_base64_fields_lists_nulls_and_data_urls(tmp_path):
    row = {"a": b64(IMAGES[0]), "b": [b64(IMAGES[1]), None, "data:image/png;base64," + b64(IMAGES[2])],
           "c": None, "text": "plain"}
    path = write_jsonl(tmp_path / "a.jsonl", [row])
    assert read_one(path, base64_fields="a,b,c") == {"a": IMAGES[0], "b": [IMAGES[1], None, IMAGES[2]],
                                                      "c": None, "text": "plain"}
    # outside the named fields only data URLs are decoded
    assert read_one(path, base64_fields=["a"])["b"] == [row["b"][0], None, IMAGES[2]]


def test_data_urls_are_found_inside_messages(tmp_path):
    url = "data:image/jpeg;base64," + b64(IMAGES[3])
    row = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                     {"type": "text", "text": "data: not a URL"}]}]}
    got = read_one(write_jsonl(tmp_path / "a.jsonl", [row]))
    assert got["messages"][0]["content"][0]["image_url"]["url"] == IMAGES[3]
    assert got["messages"][0]["content"][1]["text"] == "data: not a URL"


def test_bad_base64_names_file_line_and_field(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"img": b64(b"ok")}, {"img": "AA*C"}])
    with open(path, "a") as f:
        f.write('{"img": "AAA"}\n')
    reader = open_reader(expand_sources(path)[0], {"base64_fields": "img"})
    with pytest.raises(DecodeError) as err:
        reader.read(1)
    assert str(err.value) == (f"field 'img' on line 2 is not base64: Only base64 data is allowed "
                              f"({path}, byte offset 16, sample 1)")
    with pytest.raises(DecodeError, match=r"^field 'img' on line 3 is not base64: Incorrect padding"):
        reader.read_many(np.array([0, 2]))
    with pytest.raises(DecodeError, match=r"^field 'img' on line 1 holds a int, not base64 text \("):
        read_one(write_jsonl(tmp_path / "b.jsonl", [{"img": 7}]), base64_fields="img")
    reader.close()


def test_line_numbers_are_counted_in_bounded_pieces():
    from hpcio.sources.fields import _newlines

    text = memoryview(b"a\nbb\n\nccc\nd")
    assert [_newlines(text, stop, step=2) for stop in (0, 1, 2, 5, 6, 10, 11)] == [0, 0, 1, 2, 3, 4, 4]


@pytest.mark.parametrize("options, message", [
    ({"base64_fields": 3}, "reader option base64_fields: expected field names"),
    ({"decode_data_urls": "maybe"}, "reader option decode_data_urls: expected true or false, got 'maybe'"),
    ({"base64_fields": "a", "ref_fields": "a"}, "fields ['a'] are named both in base64_fields and ref_fields"),
])
def test_bad_field_options(tmp_path, options, message):
    path = write_jsonl(tmp_path / "a.jsonl", [{"a": "x"}])
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        open_reader(expand_sources(path)[0], options)


# --- references ------------------------------------------------------------------------------
def sidecar_layout(directory) -> str:
    """JSON lines beside tar shards and loose files: ``img`` references a tar member,
    ``mask`` a file, relative to the JSONL file."""
    with hpcio.open_writer(directory / "shards", format="webdataset", max_count=3) as w:
        for i in range(6):
            w.write({"__key__": f"k{i}", "jpg": IMAGES[i]})
    os.makedirs(directory / "masks")
    for i in range(6):
        (directory / "masks" / f"{i}.png").write_bytes(IMAGES[5 - i])
    rows = [{"id": i, "img": f"tar://shards/shard-{i // 3:06d}.tar#k{i}.jpg", "mask": f"masks/{i}.png"}
            for i in range(6)]
    return write_jsonl(directory / "refs.jsonl", rows)


def test_references_to_tar_members_and_files(tmp_path):
    path = sidecar_layout(tmp_path)
    with open_reader(expand_sources(path)[0], {"ref_fields": "img,mask", "max_open_tars": 1}) as reader:
        got = reader.read_many(np.arange(6))
    assert got == [{"id": i, "img": IMAGES[i], "mask": IMAGES[5 - i]} for i in range(6)]
    moved = write_jsonl(tmp_path / "elsewhere.jsonl", [{"img": "shards/shard-000001.tar"}])
    os.makedirs(tmp_path / "sub")
    os.rename(moved, tmp_path / "sub" / "elsewhere.jsonl")
    got = read_one(tmp_path / "sub" / "elsewhere.jsonl", ref_fields="img", ref_root=str(tmp_path))
    assert got["img"] == (tmp_path / "shards" / "shard-000001.tar").read_bytes()


def test_missing_references_name_file_line_field_and_target(tmp_path):
    sidecar_layout(tmp_path)
    path = write_jsonl(tmp_path / "bad.jsonl", [{"img": "tar://shards/shard-000000.tar#k9.jpg"},
                                                {"img": "masks/9.png"}, {"img": "tar://nohash"}])
    reader = open_reader(expand_sources(path)[0], {"ref_fields": "img"})
    shard = tmp_path / "shards" / "shard-000000.tar"
    with pytest.raises(ShardNotFoundError) as err:
        reader.read(0)
    assert str(err.value) == (f"field 'img' on line 1: tar member 'k9.jpg' not found in {shard} "
                              f"({path}, byte offset 0, sample 0)")
    with pytest.raises(ShardNotFoundError, match=(rf"^field 'img' on line 2: referenced file 'masks/9.png' "
                                                  rf"not found at {tmp_path}/masks/9.png \(")):
        reader.read(1)
    with pytest.raises(DecodeError, match=r"^field 'img' on line 3: bad tar reference 'tar://nohash'"):
        reader.read(2)
    reader.close()


# --- Hugging Face ----------------------------------------------------------------------------
def image_table(ids, path_only=()):
    """Rows like a ``datasets`` Image/Value dataset; rows in ``path_only`` hold only the
    image's file name (``bytes`` null), as ``datasets`` stores images it read from files."""
    images = [{"bytes": None, "path": f"img{i}.png"} if i in path_only else {"bytes": IMAGES[i], "path": f"{i}.png"}
              for i in ids]
    return pa.table({"image": pa.array(images, IMAGE_STRUCT), "label": pa.array([i % 2 for i in ids], pa.int64()),
                     "text": pa.array([f"caption {i}" for i in ids]), "id": pa.array(list(ids), pa.int64())})


def hf_metadata() -> dict:
    return {"huggingface": json.dumps({"info": {"features": HF_FEATURES}})}


def save_to_disk(directory, table, num_shards: int = 2) -> None:
    """The layout ``datasets.Dataset.save_to_disk`` writes (datasets' arrow_dataset.py and
    arrow_writer.py): contiguous shards as Arrow IPC streams named
    ``data-NNNNN-of-MMMMM.arrow`` with the features as ``huggingface`` schema metadata,
    ``state.json`` listing them in ``_data_files``, and ``dataset_info.json``."""
    os.makedirs(directory)
    table = table.replace_schema_metadata(hf_metadata())
    bounds = np.linspace(0, table.num_rows, num_shards + 1).astype(int)
    names = [f"data-{k:05d}-of-{num_shards:05d}.arrow" for k in range(num_shards)]
    for name, a, b in zip(names, bounds[:-1], bounds[1:]):
        with pa.OSFile(str(directory / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(a, b - a))
    state = {"_data_files": [{"filename": n} for n in names], "_fingerprint": "5eed", "_format_columns": None,
             "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False, "_split": None}
    (directory / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    info = {"builder_name": None, "citation": "", "config_name": None, "dataset_name": None, "dataset_size": None,
            "description": "", "features": HF_FEATURES, "homepage": "", "license": "", "splits": None}
    (directory / "dataset_info.json").write_text(json.dumps(info, indent=2))


def test_saved_dataset_reader(tmp_path):
    save_to_disk(tmp_path / "hf", image_table(range(6)), num_shards=3)
    (source,) = expand_sources(tmp_path / "hf")
    with open_reader(source) as reader:
        assert len(reader) == 6
        assert reader.read_many(np.array([4, 1]), ["image", "label"]) == [{"image": IMAGES[4], "label": 0},
                                                                           {"image": IMAGES[1], "label": 1}]
        sizes = measure_source(source, reader=reader)
    text = [len(f"caption {i}") for i in range(6)]
    assert (sizes - [len(b) + len(f"{i}.png") + t for i, (b, t) in enumerate(zip(IMAGES, text))]).tolist() == [16] * 6


def test_missing_struct_file_names_data_file_row_and_field(tmp_path):
    save_to_disk(tmp_path / "hf", image_table(range(4), path_only={3}))
    reader = open_reader(expand_sources(tmp_path / "hf")[0])
    with pytest.raises(ShardNotFoundError) as err:
        reader.read(3)
    assert str(err.value) == (f"field 'image' in row 1: referenced file 'img3.png' not found at "
                              f"{tmp_path / 'hf' / 'img3.png'} ({tmp_path / 'hf' / 'data-00001-of-00002.arrow'}, "
                              f"sample 3)")
    reader.close()


# --- end to end through hpcio convert -----------------------------------------------------------
def test_convert_base64_fields(tmp_path):
    from hpcio import demo

    path = tmp_path / "vlm.jsonl"
    demo.write_jsonl(path, "vlm", 6)
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"id": i, "img": b64(IMAGES[i])} for i in range(6)])
    assert convert(plain, tmp_path / "out", "-I", "base64_fields=img") == 0
    assert converted(tmp_path / "out") == {i: {"id": i, "img": IMAGES[i]} for i in range(6)}
    # vlm samples hold a list of base64 images: stored as a list of bytes
    assert convert(path, tmp_path / "vlm", "-I", "base64_fields=images") == 0
    expected = {s["id"]: s["images"] for s in demo.generate("vlm", 6)}
    assert {s["id"]: s["images"] for s in hpcio.open(tmp_path / "vlm")} == expected


def test_generated_vlm_jsonl_converts_to_bytes_with_no_option(tmp_path, capsys):
    from hpcio import demo

    raw = tmp_path / "raw.jsonl"
    assert main(["demo", "generate", "--profile", "vlm", "-n", "4", str(raw)]) == 0
    assert convert(raw, tmp_path / "out") == 0
    assert "warning" not in capsys.readouterr().err
    expected = {s["id"]: s["images"] for s in demo.generate("vlm", 4)}
    got = {s["id"]: [bytes(v) for v in s["images"]] for s in hpcio.open(tmp_path / "out")}
    assert got == expected and all(v[:3] == b"\xff\xd8\xff" for images in got.values() for v in images)


def test_base64_text_of_a_binary_format_is_named_in_a_warning(tmp_path, capsys):
    path = write_jsonl(tmp_path / "plain.jsonl", [{"id": i, "img": [b64(IMAGES[i])], "note": b64(b"just words here!")}
                                                  for i in range(3)])
    assert convert(path, tmp_path / "out") == 0
    assert capsys.readouterr().err.splitlines() == [
        f"hpcio: warning: field 'img' of {path} holds base64 text of PNG data, converted as text; "
        "-I base64_fields=img converts it to bytes"]
    assert converted(tmp_path / "out")[0]["img"] == [b64(IMAGES[0])]  # as given: the warning changes nothing
    assert convert(path, tmp_path / "out2", "-I", "base64_fields=img") == 0
    assert "warning" not in capsys.readouterr().err


def test_convert_bad_base64_message(tmp_path, capsys):
    path = write_jsonl(tmp_path / "a.jsonl", [{"id": 0, "img": b64(b"ok")}, {"id": 1, "img": "AA*C"}])
    assert convert(path, tmp_path / "out", "-I", "base64_fields=img") == 1
    second_line = len('{"id": 0, "img": "b2s="}\n')
    assert capsys.readouterr().err == (
        f"hpcio: error: bad sample, conversion stopped (read failed at {path}, byte offset {second_line}, sample 1: "
        f"DecodeError: field 'img' on line 2 is not base64: Only base64 data is allowed); pass --skip-bad "
        f"to leave such samples out and list them in a report, or fix the sample and run the same command again\n")


def test_convert_data_urls_and_opt_out(tmp_path):
    rows = [{"id": i, "image": f"data:image/png;base64,{b64(IMAGES[i])}"} for i in range(6)]
    path = write_jsonl(tmp_path / "a.jsonl", rows)
    assert convert(path, tmp_path / "out") == 0
    assert converted(tmp_path / "out") == {i: {"id": i, "image": IMAGES[i]} for i in range(6)}
    assert convert(path, tmp_path / "kept", "-I", "decode_data_urls=false") == 0
    assert converted(tmp_path / "kept") == {r["id"]: r for r in rows}


def test_convert_references(tmp_path):
    path = sidecar_layout(tmp_path)
    assert convert(path, tmp_path / "out", "-I", "ref_fields=img,mask") == 0
    assert converted(tmp_path / "out") == {i: {"id": i, "img": IMAGES[i], "mask": IMAGES[5 - i]} for i in range(6)}


def test_convert_saved_hugging_face_dataset(tmp_path):
    save_to_disk(tmp_path / "hf", image_table(range(6), path_only={2}))
    (tmp_path / "hf" / "img2.png").write_bytes(IMAGES[2])
    assert convert(tmp_path / "hf", tmp_path / "out") == 0
    assert converted(tmp_path / "out") == {i: {"id": i, "image": IMAGES[i], "label": i % 2, "text": f"caption {i}"}
                                           for i in range(6)}


def test_convert_hugging_face_parquet(tmp_path):
    os.makedirs(tmp_path / "data")
    table = image_table(range(6), path_only={5}).replace_schema_metadata(hf_metadata())
    pq.write_table(table, tmp_path / "data" / "train-00000-of-00001.parquet", row_group_size=4)
    (tmp_path / "data" / "img5.png").write_bytes(IMAGES[5])
    assert convert(tmp_path / "data" / "train-00000-of-00001.parquet", tmp_path / "out") == 0
    assert converted(tmp_path / "out") == {i: {"id": i, "image": IMAGES[i], "label": i % 2, "text": f"caption {i}"}
                                           for i in range(6)}


def test_source_totals_sum_the_sizes_a_window_at_a_time(tmp_path):
    from hpcio.sources.inputs import sample_sizes, source_totals

    lines = tmp_path / "lines.jsonl"
    lines.write_text("".join(f'{{"i": {i}, "t": "{"x" * (i % 7)}"}}\n' for i in range(1000)))
    save_to_disk(tmp_path / "hf", image_table(range(6)), num_shards=3)
    for source in expand_sources([lines, tmp_path / "hf"]):
        sizes = measure_source(source)
        assert source_totals(source, window=64) == (len(sizes), int(sizes.sum()))
        with open_reader(source) as reader:
            windows = [sample_sizes(source, reader, a, min(len(sizes), a + 7)) for a in range(0, len(sizes), 7)]
        assert np.concatenate(windows).tolist() == sizes.tolist()
    # a format whose reader gives no sizes: the bytes on disk spread over the samples
    mds = tmp_path / "mds"
    with hpcio.get_format("mds").Writer(mds, columns={"v": "bytes"}) as w:
        for i in range(10):
            w.write({"v": b"x" * i})
    (source,) = expand_sources(mds)
    with open_reader(source) as reader:
        spread = np.concatenate([sample_sizes(source, reader, a, min(10, a + 3)) for a in range(0, 10, 3)])
    assert spread.tolist() == measure_source(source).tolist() and int(spread.sum()) == source.nbytes
    assert spread.max() - spread.min() <= 1


# --- reader options across the sources' formats ------------------------------------------
def write_webdataset(path, n=4):
    """A tar as webdataset tools write it, keys holding a dot (``k000.part``)."""
    import io
    import tarfile

    os.makedirs(path)
    with tarfile.open(os.path.join(path, "shard-000000.tar"), "w") as tar:
        for i in range(n):
            for suffix, data in (("id", str(i).encode()), ("txt", f"text {i}".encode())):
                info = tarfile.TarInfo(f"k{i:03d}.part.{suffix}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_webdataset_conversions_keep_the_key(tmp_path):
    src = write_webdataset(tmp_path / "wds")
    assert convert(src, tmp_path / "out") == 0
    assert [s["__key__"] for s in hpcio.open(tmp_path / "out")] == [f"k{i:03d}" for i in range(4)]
    assert convert(src, tmp_path / "dots", "-I", "key_dots=1") == 0
    assert [s["__key__"] for s in hpcio.open(tmp_path / "dots")] == [f"k{i:03d}.part" for i in range(4)]
    assert convert(src, tmp_path / "nokey", "-I", "include_key=false") == 0
    assert "__key__" not in hpcio.open(tmp_path / "nokey")[0]


def test_a_reader_option_goes_to_the_formats_that_take_it(tmp_path):
    wds = write_webdataset(tmp_path / "wds")
    lines = write_jsonl(tmp_path / "a.jsonl", [{"__key__": f"j{i}", "id": 10 + i, "txt": "x"} for i in range(3)])
    assert convert(wds, lines, tmp_path / "out", "-I", "key_dots=1") == 0  # jsonl is not given key_dots
    got = sorted(s["__key__"] for s in hpcio.open(tmp_path / "out"))
    assert got == ["j0", "j1", "j2", "k000.part", "k001.part", "k002.part", "k003.part"]


def test_a_reader_option_no_source_format_takes_is_refused_by_name(tmp_path, capsys):
    lines = write_jsonl(tmp_path / "good.jsonl", [{"id": 0}])
    assert main(["convert", lines, str(tmp_path / "out"), "--to", "mds", "-I", "key_dots=1"]) == 2
    assert capsys.readouterr().err == (
        "hpcio: error: reader option 'key_dots' is taken by none of the sources' formats (jsonl); their "
        "options: cache_dir, validate_hashes\n")
    assert sorted(os.listdir(tmp_path)) == ["good.jsonl"]  # refused before any work: no partial output
