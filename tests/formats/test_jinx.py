"""JINX: conformance suite, golden files from mldataforge, lazy samples, passthrough,
bad input with exact messages, and no temporary files."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pickle
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import orjson
import pytest

import hpcio
from hpcio._core import _jinx
from hpcio.distributed import GlobalOrder
from hpcio.errors import (
    CorruptShardError,
    DecodeError,
    ShardNotFoundError,
    TruncatedShardError,
    UnsupportedValueError,
)
from hpcio.formats import jinx
from hpcio.formats.jinx import shard as jinx_shard
from hpcio.formats.reports import InspectReport, VerifyReport
from hpcio.testing import FormatTests

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "jinx"
_spec = importlib.util.spec_from_file_location("jinx_samples", FIXTURES / "samples.py")
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)
sys.path.insert(0, str(FIXTURES))
import make_fixtures  # noqa: E402

sys.path.remove(str(FIXTURES))


@pytest.fixture(autouse=True)
def no_temp_files(tmp_path_factory, monkeypatch):
    """Nothing hpcio does here may create a file in the system temp dir.

    The temp dir is pointed at a private empty directory for each test (the real one
    is shared with other processes), which must still be empty afterwards."""
    private = tmp_path_factory.mktemp("system-temp")
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    yield
    assert os.listdir(private) == [], f"temp files created: {os.listdir(private)}"


# --- conformance ----------------------------------------------------------------------
class TestJinxDefaults(FormatTests):
    format_name = "jinx"


class TestJinxZstSidecarLazy(FormatTests):
    format_name = "jinx"
    writer_options = {"compression": "zst", "index_compression": "zst", "binary_threshold": 64}
    reader_options = {"lazy": True}

    def make_sample(self, i):
        s = super().make_sample(i)
        s["arr"] = np.arange(i % 9, dtype=np.float64)
        s["meta"] = {"i": i, "tags": ["x"] * (i % 3), "blob": bytes([i % 256]) * (i * 5)}
        return s


class TestJinxEagerB64(FormatTests):
    format_name = "jinx"
    writer_options = {"encoding": "b64", "compression": "lz4", "compress_threshold": 16}
    reader_options = {"lazy": False}


class TestJinxSharded(FormatTests):
    format_name = "jinx"
    writer_options = {"shard_size": 3000, "compression": "zst", "binary_threshold": 100}


# --- golden files ---------------------------------------------------------------------
GOLDEN = {**make_fixtures.CONFIGS, "hex_inline": make_fixtures.HEX_INLINE}


def _golden_path(name):
    opts, _ = GOLDEN[name]
    return FIXTURES / (name if "shard_size" in opts else f"{name}.jinx")


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("name", list(GOLDEN))
def test_golden_files(name, lazy):
    _, n = GOLDEN[name]
    expected = [S.to_jsonable(s) for s in S.make_samples(n, seed=len(name))]
    with hpcio.open(_golden_path(name), lazy=lazy) as ds:
        assert len(ds) == n
        assert [S.to_jsonable(s) for s in ds] == expected
        order = np.random.default_rng(1).permutation(n)
        assert [S.to_jsonable(ds[int(i)]) for i in order] == [expected[i] for i in order]


def test_golden_sharded_footer_links():
    footers = [jinx.inspect(p)["details"]["shards"][0]
               for p in sorted((FIXTURES / "sharded").glob("shard-*.jinx"))]
    assert [f["shard_id"] for f in footers] == [0, 1, 2]
    assert footers[1]["shard_prev"] == "sharded/shard-00000.jinx"
    assert footers[1]["shard_next"] == "sharded/shard-00002.jinx"
    assert "shard_next" not in footers[2] and "shard_prev" not in footers[0]
    assert {f["split"] for f in footers} == {"train"}
    assert len(hpcio.open(FIXTURES / "sharded", split="test")) == 0
    assert len(hpcio.open(FIXTURES / "sharded", split="train")) == 12


def test_golden_sidecar_index():
    info = jinx.inspect(FIXTURES / "bin_zst.jinx")
    assert info["details"]["shards"][0]["index"] == "index.npy.bin"
    assert info["fields"]["text"] in ("str.zst", "str.zst.bin", "str.bin", None)


# --- lazy samples ---------------------------------------------------------------------
@pytest.fixture
def zst_file(tmp_path):
    path = tmp_path / "z.jinx"
    with hpcio.open_writer(path, format="jinx", compression="zst", binary_threshold=64) as w:
        for s in S.make_samples(6):
            w.write(s)
    return path


def test_lazy_sample_decodes_only_what_is_accessed(zst_file, monkeypatch):
    calls = []
    real = jinx_shard.decompress

    def counting(ext, data, *a, **k):
        calls.append(ext)
        return real(ext, data, *a, **k)

    monkeypatch.setattr(jinx_shard, "decompress", counting)
    s = hpcio.open(zst_file)[3]
    assert isinstance(s, jinx.JinxSample)
    assert list(s) == list(S.make_samples(6)[3])  # file order, unlike mldataforge's LazyDict
    assert s["id"] == 3 and s["flag"] is False
    assert calls == []
    raw_before = dict(s.raw_items())
    assert S.to_jsonable(s["text"]) == S.to_jsonable(S.make_samples(6)[3]["text"])
    assert calls == ["zst"]
    s["text"]
    assert calls == ["zst"]  # cached
    assert dict(s.raw_items()) == raw_before  # the stored form is never mutated
    assert "text" in s and "nope" not in s and len(s) == len(raw_before)


def test_lazy_nested_values_are_the_parsed_ones_and_writers_keep_their_changes(tmp_path):
    path = tmp_path / "chat.jinx"
    sample = {"id": "a", "messages": [{"role": "user", "content": "x" * 300},
                                      {"role": "assistant", "content": "hi", "tags": [{"k": 1}]}],
              "plain": [{"role": "user", "content": "short"}]}
    with hpcio.open_writer(path, format="jinx", compression="zst", compress_threshold=64) as w:
        w.write(sample)
    s = hpcio.open(path)[0]
    assert not s._lent
    messages = s["messages"]
    # the long content was stored as content.str.zst: that object stays lazy, and the
    # list holding it is a copy; the other message is the parsed object itself
    assert isinstance(messages[0], jinx.JinxSample) and "content.str.zst" in dict(messages[0].raw_items())
    assert messages is not dict(s.raw_items())["messages"]
    assert messages[1] is dict(s.raw_items())["messages"][1]
    assert type(messages[1]) is dict and type(messages[1]["tags"][0]) is dict
    assert S.to_jsonable(messages) == S.to_jsonable(sample["messages"])
    assert s["messages"] is messages  # built once, then cached
    assert s["plain"] is dict(s.raw_items())["plain"]  # nothing to decode: no copy
    assert s._lent
    # a changed value is what a writer writes: the sample is encoded again, not copied
    messages[1]["tags"][0]["k"] = 2
    s["plain"].append({"role": "assistant", "content": "more"})
    out = tmp_path / "changed.jinx"
    with hpcio.open_writer(out, format="jinx", compression="zst", compress_threshold=64) as w:
        w.write(s)
    expected = dict(sample, plain=sample["plain"] + [{"role": "assistant", "content": "more"}])
    expected["messages"] = [sample["messages"][0], dict(sample["messages"][1], tags=[{"k": 2}])]
    assert S.to_jsonable(hpcio.open(out, lazy=False)[0]) == S.to_jsonable(expected)


def test_lazy_samples_whose_values_were_not_handed_out_are_copied_as_stored(tmp_path, monkeypatch):
    path = tmp_path / "chat.jinx"
    with hpcio.open_writer(path, format="jinx", compression="zst", compress_threshold=16) as w:
        w.write({"id": "a", "text": "y" * 100, "meta": {"n": 1}})
    s = hpcio.open(path)[0]
    assert s["id"] == "a" and s["text"] == "y" * 100 and not s._lent  # str values are immutable
    _no_decoding(monkeypatch)
    out = tmp_path / "copy.jinx"
    with hpcio.open_writer(out, format="jinx", compression="zst", compress_threshold=16) as w:
        w.write(s)  # passthrough: the compressed text is copied, not decoded
    monkeypatch.undo()
    assert out.read_bytes().split(b"\n")[0] == path.read_bytes().split(b"\n")[0]
    s["meta"]["n"] = 2
    assert s._lent


def test_lazy_keys_are_the_logical_keys_in_file_order(zst_file):
    s = hpcio.open(zst_file)[1]
    expected = list(S.make_samples(6)[1])
    assert list(s.keys()) == expected == list(s)
    assert len(s.keys()) == len(expected) and "text" in s.keys()


@pytest.mark.parametrize("lazy", [True, False])
def test_iterating_a_selection_reads_only_its_fields(zst_file, lazy):
    ds = hpcio.open(zst_file, lazy=lazy)
    got = list(ds.select(["text", "id"]))
    exp = S.make_samples(6)
    assert [list(g) for g in got] == [["text", "id"]] * 6
    assert [S.to_jsonable(dict(g)) for g in got] == [S.to_jsonable({"text": e["text"], "id": e["id"]}) for e in exp]
    assert all(isinstance(g, jinx.JinxSample) == lazy for g in got)
    batch = ds.select(["text", "id"]).get_batch([5, 0])
    assert [S.to_jsonable(dict(b)) for b in batch] == [S.to_jsonable(dict(got[i])) for i in (5, 0)]
    with pytest.raises(KeyError, match="nope"):
        list(ds.select(["id", "nope"]))


@pytest.mark.parametrize("order", ["storage", "shuffled", "parts"])
def test_iterating_lazy_samples_keeps_only_those_the_caller_keeps(zst_file, order):
    # A lazy sample keeps what it decodes; the reader must not hold the samples it has
    # already handed out until the end of its batch.
    ds = hpcio.open(zst_file)
    if order == "parts":  # a pipeline cache written in parts reads them one after the other
        from hpcio.pipeline.cache import _ConcatReader

        ds = hpcio.Dataset(_ConcatReader(zst_file, [jinx.Reader(zst_file), jinx.Reader(zst_file)]))
    view = ds.shuffle(seed=3) if order != "storage" else ds
    it = iter(view)
    first = next(it)
    first["blob"]
    held = sys.getrefcount(first)
    next(it)
    assert sys.getrefcount(first) == held - 1  # only `first` and getrefcount's argument
    assert held - 1 == 2


def test_lazy_sample_pickles_as_a_plain_dict(zst_file):
    s = hpcio.open(zst_file)[4]
    s["meta"]["tags"].append("new")  # pickled as the sample now reads
    s["arr"][0, 0] = 99
    back = pickle.loads(pickle.dumps(s))
    expected = S.make_samples(6)[4]
    expected["meta"]["tags"].append("new")
    expected["arr"][0, 0] = 99
    assert type(back) is dict and type(back["meta"]) is dict and type(back["items"][0]) is dict
    assert S.to_jsonable(back) == S.to_jsonable(expected)
    meta = hpcio.open(zst_file)[4]["meta"]
    assert isinstance(meta, jinx.JinxSample)  # a nested lazy object pickles the same way
    assert S.to_jsonable(pickle.loads(pickle.dumps(meta))) == S.to_jsonable(S.make_samples(6)[4]["meta"])


def _as_list(batch):
    return batch


@pytest.mark.parametrize("collate", ["default", "list"])
def test_dataloader_workers_send_lazy_samples_back(tmp_path, collate):
    torch = pytest.importorskip("torch")
    import hpcio.torch as ht

    path = tmp_path / "t.jinx"
    with hpcio.open_writer(path, format="jinx", compression="zst", binary_threshold=64) as w:
        for i in range(12):
            w.write({"id": i, "x": np.full(3, i, dtype=np.float32), "text": "t" * (40 + i), "meta": {"i": i}})
    ds = ht.MapDataset(hpcio.open(path), batch_size=4, shuffle=False)
    kwargs = {} if collate == "default" else {"collate_fn": _as_list}
    loader = ht.DataLoader(ds, num_workers=2, timeout=120, **kwargs)
    batches = list(loader)
    if collate == "default":
        assert [b["id"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        assert torch.equal(batches[1]["x"], torch.arange(4, 8, dtype=torch.float32)[:, None].expand(4, 3))
        assert batches[2]["text"] == ["t" * (40 + i) for i in range(8, 12)]
        assert batches[0]["meta"]["i"].tolist() == [0, 1, 2, 3]
    else:
        samples = [s for b in batches for s in b]
        assert all(type(s) is dict for s in samples)
        assert [s["id"] for s in samples] == list(range(12))
        assert [s["text"] for s in samples] == ["t" * (40 + i) for i in range(12)]
        assert all(np.array_equal(s["x"], np.full(3, s["id"], np.float32)) for s in samples)
        assert [s["meta"] for s in samples] == [{"i": i} for i in range(12)]


def test_eager_samples_are_plain_dicts(zst_file):
    s = hpcio.open(zst_file, lazy=False)[2]
    assert type(s) is dict and type(s["meta"]) is dict
    assert S.to_jsonable(s) == S.to_jsonable(S.make_samples(6)[2])


def test_read_field_and_read_many(zst_file):
    ds = hpcio.open(zst_file)
    exp = S.make_samples(6)
    assert ds.reader.read_field(np.array([5, 0, 3]), "text") == [exp[i]["text"] for i in (5, 0, 3)]
    got = ds.get_batch([4, -1, 0])
    assert [S.to_jsonable(g) for g in got] == [S.to_jsonable(exp[i]) for i in (4, 5, 0)]
    sorted_ids = [s["id"] for s in ds.sort("text")]
    assert sorted_ids == sorted(range(6), key=lambda i: exp[i]["text"])
    assert [dict(s) for s in ds.select(["id", "u64"])][1] == {"id": 1, "u64": np.uint64(2**63 + 1)}


def test_projection_of_missing_field_raises(zst_file):
    with pytest.raises(KeyError, match="nope"):
        hpcio.open(zst_file).select(["nope"])[0]


# --- writer rules ---------------------------------------------------------------------
HAZARD_MESSAGES = {
    "dotted": r"field 'dotted.key': key contains the suffix separator '\.'; mldataforge would read "
              r"it as a type suffix \(rename the key\) \(.*h\.jinx, sample 0\)",
    "float16": r"field 'x': numpy float16 scalars cannot be stored: mldataforge cannot read them "
               r"back; convert with \.item\(\) or store np\.asarray\(x\) \(an \.npy array\)",
    "bool_": r"field 'x': numpy bool scalars cannot be stored",
    "nan": r"field 'x': non-finite float nan \(JSON would store null\)",
}


@pytest.mark.parametrize("kind", S.HAZARDS)
def test_writer_refuses_what_mldataforge_misreads(tmp_path, kind):
    path = tmp_path / "h.jinx"
    with pytest.raises(UnsupportedValueError, match=HAZARD_MESSAGES[kind]):
        with hpcio.open_writer(path, format="jinx") as w:
            for s in S.hazard_samples(kind):
                w.write(s)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value, message", [
    (2**64, "integer 18446744073709551616 does not fit in 64 bits"),
    (np.array([object()]), "numpy arrays of Python objects cannot be stored"),
    ({1: 2}, "field 'v/1': keys must be str, got int"),
    ({"a": {"b.c": 1}}, r"field 'v/a/b.c': key contains the suffix separator"),
    (np.float32("inf"), "non-finite float32 inf"),
    ({1, 2}, "set values cannot be stored in JINX"),
])
def test_writer_refuses_other_values(tmp_path, value, message):
    with pytest.raises(UnsupportedValueError, match=re.escape(message) if "\\" not in message else message):
        with hpcio.open_writer(tmp_path / "x.jinx", format="jinx") as w:
            w.write({"v": value})


def test_lists_keep_long_strings_verbatim(tmp_path):
    """mldataforge would compress or side-car a long list item and lose its type."""
    long = "x" * 500
    path = tmp_path / "l.jinx"
    with hpcio.open_writer(path, format="jinx", compression="zst", binary_threshold=10) as w:
        w.write({"l": [long, {"b": b"\x00" * 50}], "t": (1, "a")})
    line = path.read_bytes().split(b"\n")[0]
    assert orjson.loads(line)["l"][0] == long
    s = hpcio.open(path)[0]
    assert s["l"][0] == long and bytes(s["l"][1]["b"]) == b"\x00" * 50 and s["t"] == [1, "a"]


def test_hex_encoding_warns_and_reads(tmp_path):
    path = tmp_path / "h.jinx"
    with pytest.warns(UserWarning, match=r"mldataforge cannot read the index of .*h\.jinx"):
        with hpcio.open_writer(path, format="jinx", encoding="hex") as w:
            w.write({"b": b"\xff\x00"})
    assert bytes(hpcio.open(path)[0]["b"]) == b"\xff\x00"


def test_bad_writer_options(tmp_path):
    with pytest.raises(ValueError, match="unknown JINX compression 'lz5'"):
        hpcio.open_writer(tmp_path / "a.jinx", format="jinx", compression="lz5")
    with pytest.raises(ValueError, match="unknown JINX encoding 'b32'"):
        hpcio.open_writer(tmp_path / "a.jinx", format="jinx", encoding="b32")


def test_compression_aliases_are_recorded_as_extensions(tmp_path):
    path = tmp_path / "a.jinx"
    with hpcio.open_writer(path, format="jinx", compression="zstd", index_compression="gzip",
                           compress_threshold=8) as w:
        w.write({"t": "abc" * 100})
    footer = jinx.inspect(path)["details"]["shards"][0]
    assert footer["compression"] == "zst" and footer["index_compression"] == "gz"
    assert "t.str.zst" in orjson.loads(path.read_bytes().split(b"\n")[0])


# --- passthrough: join and split ------------------------------------------------------
@pytest.fixture
def source(tmp_path):
    path = tmp_path / "src.jinx"
    with hpcio.open_writer(path, format="jinx", compression="zst", binary_threshold=100,
                           encoding="b64", compress_threshold=32) as w:
        for s in S.make_samples(8):
            w.write(s)
    return path


def _no_decoding(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("passthrough decoded a value")

    monkeypatch.setattr(jinx_shard, "decompress", refuse)
    monkeypatch.setattr(jinx_shard.Shard, "unserialize", refuse)


def test_join_copies_without_decoding(source, tmp_path, monkeypatch):
    _no_decoding(monkeypatch)
    out = tmp_path / "joined.jinx"
    assert jinx.join([source, source], out) == 16
    monkeypatch.undo()
    src_binx = source.with_suffix(".binx").read_bytes()
    # the values of both copies, then the joined file's index (136 bytes > threshold)
    assert out.with_suffix(".binx").read_bytes()[: 2 * len(src_binx)] == src_binx * 2
    src_lines = source.read_bytes().split(b"\n")[:8]
    out_lines = out.read_bytes().split(b"\n")[:8]
    assert [re.sub(rb'"offset":\d+', b"", x) for x in out_lines] == [
        re.sub(rb'"offset":\d+', b"", x) for x in src_lines]
    got = [S.to_jsonable(s) for s in hpcio.open(out)]
    assert got == [S.to_jsonable(s) for s in S.make_samples(8)] * 2


@pytest.mark.parametrize("options", [
    {"encoding": "a85"},
    {"encoding": "hex", "binary_threshold": 8},
    {"compression": "gz"},
    {"compression": None, "binary_threshold": None},
    {"binary_threshold": 10_000, "encoding": "a85"},
], ids=["a85", "hex-bin", "gz", "plain", "no-sidecar"])
def test_join_with_other_settings_re_encodes(source, tmp_path, options):
    out = tmp_path / "joined.jinx"
    hex_warning = pytest.warns(UserWarning, match="mldataforge cannot read the index")
    inline_hex = options.get("encoding") == "hex" and options.get("binary_threshold", 100) > 72
    with hex_warning if inline_hex else contextlib.nullcontext():
        jinx.join([source], out, **options)
    assert [S.to_jsonable(s) for s in hpcio.open(out)] == [S.to_jsonable(s) for s in S.make_samples(8)]
    footer = jinx.inspect(out)["details"]["shards"][0]
    for key, value in options.items():
        assert footer[key] == value
    if options.get("compression") is None and "compression" in options:
        assert b".zst" not in out.read_bytes()


def test_split_parts_and_size_hint(source, tmp_path):
    parts = jinx.split(source, tmp_path / "parts", parts=3)
    assert [os.path.basename(p) for p in parts] == ["part-0000.jinx", "part-0001.jinx", "part-0002.jinx"]
    assert [len(hpcio.open(p)) for p in parts] == [3, 3, 2]
    back = [S.to_jsonable(s) for p in parts for s in hpcio.open(p)]
    assert back == [S.to_jsonable(s) for s in S.make_samples(8)]
    by_size = jinx.split(source, tmp_path / "sized", size_hint=1500, prefix="p")
    assert len(by_size) > 1
    assert sum(len(hpcio.open(p)) for p in by_size) == 8


def test_writing_a_lazy_sample_into_a_dict_re_encodes(source, tmp_path):
    s = hpcio.open(source)[1]
    out = tmp_path / "o.jinx"
    with hpcio.open_writer(out, format="jinx") as w:
        w.write({"wrapped": s["meta"], "blob": s["blob"]})
    got = hpcio.open(out)[0]
    exp = S.make_samples(8)[1]
    assert S.to_jsonable(got) == S.to_jsonable({"wrapped": exp["meta"], "blob": exp["blob"]})


# --- bad input ------------------------------------------------------------------------
def _write(path, samples=None, **options):
    with hpcio.open_writer(path, format="jinx", **options) as w:
        for s in samples or [{"id": i, "b": bytes([i]) * 20} for i in range(3)]:
            w.write(s)
    return path


def _footer(path):
    lines = path.read_bytes().split(b"\n")
    return lines, orjson.loads(lines[-3])


def _rewrite(path, lines, footer):
    lines[-3] = orjson.dumps(footer)
    lines[-2] = str(sum(len(x) + 1 for x in lines[:-3])).encode()
    path.write_bytes(b"\n".join(lines))


def test_missing_offset_line(tmp_path):
    p = _write(tmp_path / "a.jinx")
    data = p.read_bytes()
    p.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1][:-1])
    with pytest.raises(CorruptShardError, match=r"missing JINX offset line: the file does not end "
                       r"with a newline \(.*a\.jinx, byte offset \d+\)"):
        hpcio.open(p, format="jinx")


def test_garbled_offset_line(tmp_path):
    p = _write(tmp_path / "a.jinx")
    data = p.read_bytes()
    p.write_bytes(data[:-3] + b"x\n")
    with pytest.raises(CorruptShardError, match=r"garbled JINX offset line '\d+x': expected a "
                       r"decimal byte offset \(.*a\.jinx, byte offset \d+\)"):
        hpcio.open(p, format="jinx")


def test_footer_offset_out_of_range(tmp_path):
    p = _write(tmp_path / "a.jinx")
    lines = p.read_bytes().split(b"\n")
    lines[-2] = b"999999"
    p.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptShardError, match=r"footer offset 999999 is not before the offset "
                       r"line at byte \d+"):
        hpcio.open(p, format="jinx")


def test_footer_offset_not_at_a_line(tmp_path):
    p = _write(tmp_path / "a.jinx")
    lines = p.read_bytes().split(b"\n")
    lines[-2] = b"5"
    p.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptShardError, match=r"footer offset 5 does not start a line"):
        hpcio.open(p, format="jinx")


def test_index_length_mismatch(tmp_path):
    p = _write(tmp_path / "a.jinx")
    lines, footer = _footer(p)
    footer["num_samples"] = 5
    _rewrite(p, lines, footer)
    with pytest.raises(CorruptShardError, match=r"JINX index holds 32 bytes, expected 48 "
                       r"\(8 x \(num_samples 5 \+ 1\)\) \(.*a\.jinx, byte offset \d+\)"):
        hpcio.open(p, format="jinx")


def test_index_not_increasing(tmp_path):
    p = _write(tmp_path / "a.jinx")
    lines, footer = _footer(p)
    idx = np.frombuffer(_jinx.a85decode(footer["index.npy"]), "<u8").copy()
    idx[2] = idx[1]
    footer["index.npy"] = _jinx.a85encode(idx.tobytes())
    _rewrite(p, lines, footer)
    with pytest.raises(CorruptShardError, match=r"JINX index entry 2 \(\d+\) does not follow entry 1"):
        hpcio.open(p, format="jinx")


def _assert_corrupt(path, message, capsys):
    """Opening ``path`` raises CorruptShardError(message); ``hpcio inspect`` prints it in one line."""
    from hpcio.cli.main import main

    with pytest.raises(CorruptShardError) as err:
        hpcio.open(path, format="jinx")
    assert str(err.value) == message
    assert main(["inspect", str(path)]) == 1
    assert capsys.readouterr().err == f"hpcio: error: {message}\n"


def test_truncated_footer(tmp_path, capsys):
    p = _write(tmp_path / "a.jinx")
    lines = p.read_bytes().split(b"\n")
    footer_offset = sum(len(x) + 1 for x in lines[:-3])
    lines[-3] = lines[-3][:20]
    p.write_bytes(b"\n".join(lines))
    _assert_corrupt(p, f"garbled JINX footer: unexpected end of data ({p}, byte offset {footer_offset + 20})",
                    capsys)


@pytest.mark.parametrize("field, value, message", [
    ("num_samples", "3", "garbled JINX footer: expected a JSON object with an integer num_samples"),
    ("num_samples", -1, "garbled JINX footer: num_samples -1 is not in 0..{fo} (the footer offset)"),
    ("num_samples", 2**40, "garbled JINX footer: num_samples 1099511627776 is not in 0..{fo} (the footer offset)"),
    ("ext_sep", 1, "garbled JINX footer: ext_sep must be a non-empty string, got 1"),
    ("ext_sep", "", "garbled JINX footer: ext_sep must be a non-empty string, got ''"),
    ("encoding", ["a85"], "unknown JINX encoding ['a85']; expected one of a85, b64, hex"),
    ("index.npy", 5, "JINX footer 'index.npy' is not a string"),
], ids=["num_samples-str", "num_samples-negative", "num_samples-huge", "ext_sep-int", "ext_sep-empty",
        "encoding-list", "index-int"])
def test_footer_with_wrong_types(tmp_path, capsys, field, value, message):
    p = _write(tmp_path / "a.jinx")
    lines, footer = _footer(p)
    footer[field] = value
    _rewrite(p, lines, footer)
    fo = sum(len(x) + 1 for x in lines[:-3])
    expected = f"{message.format(fo=fo)} ({p}, byte offset {fo})"
    _assert_corrupt(p, expected, capsys)
    report = jinx.verify(p)
    assert (report["ok"], report["samples"], report["errors"][0]["error"]) == (False, 0, expected)


def test_footer_settings_a_join_cannot_use(tmp_path):
    p = _write(tmp_path / "a.jinx")
    lines, footer = _footer(p)
    footer["compress_threshold"] = "64"
    _rewrite(p, lines, footer)
    assert len(hpcio.open(p)) == 3  # the reader needs no writer settings
    fo = sum(len(x) + 1 for x in lines[:-3])
    with pytest.raises(CorruptShardError, match=re.escape(
            "JINX footer settings cannot be written again: compress_threshold must be an integer >= 0, "
            f"got '64' ({p}, byte offset {fo})")):
        jinx.join([p], tmp_path / "out.jinx")
    assert jinx.join([p], tmp_path / "out.jinx", compress_threshold=64) == 3


def test_corrupt_npy_header(tmp_path):
    p = _write(tmp_path / "a.jinx", [{"a": np.arange(3.0)}], hashes=[])  # the value's own error, alone
    data = p.read_bytes()
    stored = orjson.loads(data.split(b"\n")[0])["a.npy"]
    npy = _jinx.a85decode(stored)
    broken = _jinx.a85encode(npy.replace(b"(3,), }", b"(3,    "))
    assert len(orjson.dumps(broken)) == len(orjson.dumps(stored))  # the index stays valid
    p.write_bytes(data.replace(orjson.dumps(stored), orjson.dumps(broken)))
    message = (f"value 'a.npy': cannot decode npy: garbled .npy header "
               f"\"{{'descr': '<f8', 'fortran_order': False, 'shape': (3,\" ({p}, byte offset 0, sample 0)")
    with pytest.raises(DecodeError) as err:
        hpcio.open(p)[0]["a"]
    assert str(err.value) == message
    assert jinx.verify(p)["errors"] == [
        {"path": str(p), "offset": 0, "sample": 0, "type": "DecodeError", "error": message}]


def test_corrupt_pt_value_is_reported_only_when_unpickled(tmp_path):
    torch = pytest.importorskip("torch")
    p = _write(tmp_path / "a.jinx", [{"w": torch.arange(4)}], hashes=[])  # no file hash to catch it
    data = p.read_bytes()
    stored = orjson.loads(data.split(b"\n")[0])["w.pt"]
    broken = _jinx.a85encode(b"\x01" * 4 + _jinx.a85decode(stored)[4:])
    assert len(orjson.dumps(broken)) == len(orjson.dumps(stored))
    p.write_bytes(data.replace(orjson.dumps(stored), orjson.dumps(broken)))
    assert jinx.verify(p)["ok"]
    report = jinx.verify(p, allow_pickle=True)
    assert report["errors"][0]["type"] == "DecodeError"
    assert report["errors"][0]["error"].startswith("value 'w.pt': cannot decode pt: not a torch.save value: ")


SIDECAR_SAMPLES = [{"id": i, "b": bytes([i]) * 50} for i in range(3)]


def test_truncated_sidecar(tmp_path):
    p = _write(tmp_path / "a.jinx", SIDECAR_SAMPLES, binary_threshold=40)
    binx = p.with_suffix(".binx")
    binx.write_bytes(binx.read_bytes()[:120])
    ds = hpcio.open(p)
    assert bytes(ds[1]["b"]) == b"\x01" * 50
    with pytest.raises(TruncatedShardError, match=r"value 'b\.raw\.bin': sidecar bytes \[100, 150\) "
                       r"lie beyond its end \(120 bytes\) \(.*a\.binx, byte offset 100, sample 2\)"):
        ds[2]["b"]


def test_missing_sidecar(tmp_path):
    p = _write(tmp_path / "a.jinx", SIDECAR_SAMPLES, binary_threshold=40)
    p.with_suffix(".binx").unlink()
    with pytest.raises(ShardNotFoundError, match=r"JINX sidecar not found"):
        hpcio.open(p)[0]["b"]


def test_corrupt_compressed_value(tmp_path):
    p = _write(tmp_path / "a.jinx", [{"t": "abc" * 50}], compression="zst")
    line = orjson.loads(p.read_bytes().split(b"\n")[0])
    frame = _jinx.a85decode(line["t.str.zst"])
    bad = _jinx.a85encode(frame[:-4] + b"\x00\x00\x00\x00")
    data = p.read_bytes().replace(orjson.dumps(line["t.str.zst"]), orjson.dumps(bad))
    p.write_bytes(data)
    with pytest.raises(DecodeError, match=r"\(.*a\.jinx, byte offset 0, sample 0\)"):
        hpcio.open(p)[0]["t"]


def test_invalid_base85(tmp_path):
    p = _write(tmp_path / "a.jinx")
    data = p.read_bytes()
    first = data.split(b"\n")[0]
    value = orjson.loads(first)["b.raw"]
    p.write_bytes(data.replace(first, first.replace(orjson.dumps(value), b'"~~~~~"'), 1))
    with pytest.raises(DecodeError, match=r"value 'b\.raw': invalid base85 character '~' \(at "
                       r"character 0 of 5\) \(.*a\.jinx, byte offset 0, sample 0\)"):
        hpcio.open(p)[0]["b"]


def test_garbled_sample_line(tmp_path):
    p = _write(tmp_path / "a.jinx")
    data = bytearray(p.read_bytes())
    data[0:1] = b"["
    p.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match=r"garbled JINX sample line: .*\(.*a\.jinx, byte "
                       r"offset 0, sample 0\)"):
        hpcio.open(p)[0]
    for access in (list, lambda ds: ds.get_batch([1, 0])):
        with pytest.raises(CorruptShardError, match=r"garbled JINX sample line: .*sample 0\)"):
            access(hpcio.open(p))


@pytest.mark.parametrize("lazy", [True, False])
def test_iteration_yields_every_sample_before_a_bad_line(tmp_path, lazy):
    p = _write(tmp_path / "a.jinx")
    data = p.read_bytes()
    lines = data.split(b"\n")
    bad = b"[" + b" " * (len(lines[2]) - 2) + b"]"  # same length: the index stays valid
    p.write_bytes(data.replace(lines[2], bad, 1))
    seen = []
    with pytest.raises(CorruptShardError, match=r"JINX sample line holds a list, expected an object "
                       rf"\(.*a\.jinx, byte offset {len(lines[0]) + len(lines[1]) + 2}, sample 2\)"):
        for s in hpcio.open(p, lazy=lazy):
            seen.append(s["id"])
    assert seen == [0, 1]
    with pytest.raises(KeyError, match="nope"):
        list(hpcio.open(p, lazy=lazy).select(["id", "nope"]))


def test_not_found():
    with pytest.raises(ShardNotFoundError, match="no such file or directory"):
        hpcio.open("/nonexistent/x.jinx")


def test_verify_reports_bad_values(tmp_path):
    p = _write(tmp_path / "a.jinx", SIDECAR_SAMPLES, binary_threshold=40, hashes=[])
    assert jinx.verify(p) == {"format": "jinx", "path": str(p), "ok": True, "samples": 3, "shards": 1,
                              "checked": 3, "hashes_checked": 0, "errors": []}
    binx = p.with_suffix(".binx")
    binx.write_bytes(binx.read_bytes()[:70])
    report = jinx.verify(p)
    assert not report["ok"] and report["samples"] == 3 and report["checked"] == 1
    assert [e["error"].split(":")[0] for e in report["errors"]] == ["value 'b.raw.bin'"] * 2


def test_inspect_report(tmp_path):
    p = _write(tmp_path / "a.jinx", SIDECAR_SAMPLES, binary_threshold=40)
    info = jinx.inspect(p)
    assert set(info) == set(InspectReport.__annotations__)
    assert (info["format"], info["path"], info["samples"], info["shards"]) == ("jinx", str(p), 3, 1)
    assert info["fields"] == {"id": None, "b": "raw.bin"}
    assert info["stored_bytes"] == p.stat().st_size + p.with_suffix(".binx").stat().st_size
    shard = info["details"]["shards"][0]
    assert (shard["index"], shard["num_samples"], shard["sidecar_bytes"]) == ("index.npy", 3, 150)


def test_verify_report_schema_and_max_errors(tmp_path):
    p = _write(tmp_path / "a.jinx", SIDECAR_SAMPLES, binary_threshold=40, hashes=[])
    binx = p.with_suffix(".binx")
    binx.write_bytes(binx.read_bytes()[:70])
    report = jinx.verify(p, max_errors=1)
    assert set(report) == set(VerifyReport.__annotations__)
    assert not report["ok"] and report["checked"] == 1
    assert report["errors"] == [{
        "path": str(binx), "offset": 50, "sample": 1, "type": "TruncatedShardError",
        "error": f"value 'b.raw.bin': sidecar bytes [50, 100) lie beyond its end (70 bytes) "
                 f"({binx}, byte offset 50, sample 1)",
    }]
    missing = jinx.verify(tmp_path / "nope")
    assert not missing["ok"] and missing["errors"][0]["type"] == "ShardNotFoundError"


def test_verify_unpickles_pt_values_only_when_allowed(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    p = _write(tmp_path / "t.jinx", [{"id": i, "w": torch.arange(i + 1)} for i in range(3)],
               compression="zst", compress_threshold=16)
    loads = []
    real = jinx_shard.load_torch
    monkeypatch.setattr(jinx_shard, "load_torch", lambda data: loads.append(len(data)) or real(data))
    report = jinx.verify(p)
    assert (report["ok"], report["checked"], loads) == (True, 3, [])
    report = jinx.verify(p, allow_pickle=True)
    assert (report["ok"], report["checked"], len(loads)) == (True, 3, 3)


def test_cli_verify_and_inspect(tmp_path, capsys):
    from hpcio.cli.main import main

    p = _write(tmp_path / "a.jinx", SIDECAR_SAMPLES, binary_threshold=40)
    assert main(["verify", str(p)]) == 0
    assert capsys.readouterr().out == "OK: 3 samples in 1 shards, 3 records decoded, 2 hashes checked\n"
    assert main(["verify", str(p), "--allow-pickle", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checked"] == 3
    assert main(["inspect", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fields"] == {"b": "raw.bin", "id": None}


def test_sniff(tmp_path):
    p = _write(tmp_path / "noext")
    assert hpcio.sniff_format(p).NAME == "jinx"
    (tmp_path / "x.jsonl").write_bytes(b'{"a": 1}\n{"a": 2}\n')
    assert not jinx.sniff(tmp_path / "x.jsonl")
    assert jinx.sniff(FIXTURES / "sharded")


def test_read_field_batches_sidecar_zstd(tmp_path):
    path = tmp_path / "b.jinx"
    rnd = np.random.default_rng(0)
    texts = ["".join(rnd.choice(list("abcdefghijklmnopqrstuvwxyz0123456789"), 150 + i)) for i in range(10)]
    # values (~120 compressed bytes) go to the sidecar, the 88-byte index stays inline
    with hpcio.open_writer(path, format="jinx", compression="zst", binary_threshold=100) as w:
        for i, t in enumerate(texts):
            w.write({"id": i, "text": t})
    ds = hpcio.open(path)
    assert all("text.str.zst.bin" in dict(s.raw_items()) for s in ds)
    assert ds.reader.read_field(np.array([9, 0, 4, 4]), "text") == [texts[i] for i in (9, 0, 4, 4)]
    assert [s["id"] for s in ds.sort("text", reverse=True)] == sorted(range(10), key=texts.__getitem__)[::-1]
    binx = path.with_suffix(".binx")
    binx.write_bytes(binx.read_bytes()[:-100])
    with pytest.raises(TruncatedShardError, match=r"value 'text\.str\.zst\.bin': sidecar bytes"):
        hpcio.open(path).reader.read_field(np.arange(10), "text")


def test_read_batches_count_the_sidecar(tmp_path):
    path = tmp_path / "d.jinx"
    blobs = [np.random.default_rng(i).bytes(200_000) for i in range(20)]
    with hpcio.open_writer(path, format="jinx", binary_threshold=64) as w:
        for i, b in enumerate(blobs):
            w.write({"id": i, "blob": b})
    ds = hpcio.open(path)
    sidecar = tmp_path / "d.binx"
    assert sidecar.stat().st_size > 20 * 200_000
    total = path.stat().st_size + sidecar.stat().st_size
    assert ds.reader.mean_sample_bytes() == total / 20
    assert ds.reader.batch_size == 20  # about 4 MiB of 200 KB samples, at least MIN_BATCH
    assert [s["blob"] for s in ds.shuffle(seed=1)] == [blobs[i] for i in GlobalOrder(20, seed=1)]


def test_sidecar_only_layout_round_trip(tmp_path):
    """encoding=None: every byte value and the index in .binx, the footer's encoding null."""
    import hpcio
    from hpcio.errors import DecodeError

    samples = [{"id": i, "b": bytes([i + 1]) * (i + 1), "t": f"text {i}", "tags": ["a", "b"]} for i in range(5)]
    path = tmp_path / "x.jinx"
    with hpcio.open_writer(path, format="jinx", encoding=None, binary_threshold=0) as w:
        for s in samples:
            w.write(s)
    lines = path.read_bytes().split(b"\n")
    assert b'"encoding":null' in lines[-3] and b'"index.npy.bin"' in lines[-3]
    assert [dict(s) for s in hpcio.open(path)] == samples
    # inline text in a file whose encoding is null cannot be decoded: say so
    first = lines[0].replace(b'"b.raw.bin":{"offset":0,"length":1}', b'"b.raw":"AA=="')
    path.write_bytes(path.read_bytes().replace(lines[0], first.ljust(len(lines[0]))))
    with pytest.raises(DecodeError, match=r"^value 'b.raw' is inline text, but the footer's encoding is null"):
        dict(hpcio.open(path)[0])


@pytest.mark.parametrize("kind", S.TYPED_LISTS)
def test_writer_keeps_typed_list_items(tmp_path, kind):
    """Lists mldataforge would read back untyped are stored under a 'list' suffix."""
    path = tmp_path / "t.jinx"
    with hpcio.open_writer(path, format="jinx") as w:
        for s in S.hazard_samples(kind):
            w.write(s)
    for lazy in (True, False):
        got = [S.to_jsonable(dict(s)) for s in hpcio.open(path, lazy=lazy)]
        assert got == [S.to_jsonable(s) for s in S.hazard_samples(kind)]
    assert jinx.inspect(path)["fields"] == {"items": "list"}
