"""The demo data generators: determinism, layout, and the size ranges they promise."""

from __future__ import annotations

import hashlib
import io
import re
import sys

import numpy as np
import orjson
import pytest
from PIL import Image

from hpcio import demo
from hpcio.errors import InvalidArgumentError

# sha256 of demo data whose bytes depend only on numpy's generator streams (the JPEGs
# also depend on Pillow's libjpeg, so they are checked by size and decodability).
TEXT_20_JSONL_SHA256 = "b0ddb4e664382b4659a2a5ffa9175f173f1624405967b7a1cb311314e489b228"
VLM_5_NO_IMAGES_SHA256 = "31ed98c6c3d74ace41bea7f4649ecd2bba2cc7bb57526d025d6e28177e975485"


def sha256_file(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_text_bytes_are_pinned(tmp_path):
    path = tmp_path / "text.jsonl"
    demo.write_jsonl(path, "text", 20, seed=0)
    assert sha256_file(path) == TEXT_20_JSONL_SHA256


def test_vlm_chat_is_pinned():
    h = hashlib.sha256()
    for s in demo.generate("vlm", 5):
        h.update(orjson.dumps({k: v for k, v in s.items() if k != "images"}))
    assert h.hexdigest() == VLM_5_NO_IMAGES_SHA256


@pytest.mark.parametrize("profile", ["text", "vlm"])
def test_same_seed_same_samples(profile):
    assert list(demo.generate(profile, 4, seed=3)) == list(demo.generate(profile, 4, seed=3))


@pytest.mark.parametrize("profile", ["text", "vlm"])
def test_other_seed_other_samples(profile):
    a = list(demo.generate(profile, 3, seed=0))
    b = list(demo.generate(profile, 3, seed=1))
    assert all(x != y for x, y in zip(a, b))


@pytest.mark.parametrize("profile", ["text", "vlm"])
def test_a_slice_is_the_same_samples(profile, demo_samples):
    whole = demo_samples(profile, 6)
    assert list(demo.generate(profile, 2, start=4)) == whole[4:6]
    assert demo.make_sample(profile, 5) == whole[5]


def test_text_layout_and_sizes(demo_samples):
    samples = demo_samples("text", 300)
    lo, hi = demo.TEXT_BYTES
    assert (lo, hi) == (512, 4096)
    sizes = [len(s["text"].encode("utf-8")) for s in samples]
    assert lo <= min(sizes) and max(sizes) <= hi
    # the range is used, not a constant length
    assert min(sizes) < 1000 and max(sizes) > 3500
    for i, s in enumerate(samples):
        assert list(s) == ["id", "text", "meta"]
        assert s["id"] == i and type(s["id"]) is int
        meta = s["meta"]
        assert set(meta) == {"source", "lang", "score", "tags"}
        assert isinstance(meta["source"], str) and isinstance(meta["lang"], str)
        assert type(meta["score"]) is float and 0.0 <= meta["score"] < 1.0
        assert isinstance(meta["tags"], list) and all(isinstance(t, str) for t in meta["tags"])
    assert len({s["meta"]["source"] for s in samples}) > 3


def test_vlm_layout(demo_samples):
    samples = demo_samples("vlm", 40)
    assert len({s["id"] for s in samples}) == len(samples)
    turn_counts, image_counts = set(), set()
    for s in samples:
        assert list(s) == ["id", "messages", "images"]
        assert isinstance(s["id"], str)
        messages = s["messages"]
        turn_counts.add(len(messages))
        assert 2 <= len(messages) <= 8
        roles = [m["role"] for m in messages]
        assert roles == ["user", "assistant"] * (len(messages) // 2)
        assert all(set(m) == {"role", "content"} and isinstance(m["content"], str)
                   for m in messages)
        assert isinstance(s["images"], list) and 1 <= len(s["images"]) <= 4
        assert all(type(image) is bytes for image in s["images"])
        assert messages[0]["content"].count("<image>") == len(s["images"])
        assert all("<image>" not in m["content"] for m in messages[1:])
        image_counts.add(len(s["images"]))
    assert turn_counts == {2, 4, 6, 8}
    assert image_counts == {1, 2, 3, 4}
    assert demo.IMAGES_PER_SAMPLE == (1, 4)


def test_vlm_images_are_photo_sized_jpegs(demo_samples):
    samples = demo_samples("vlm", 40)
    lo, hi = demo.JPEG_BYTES
    assert (lo, hi) == (30_000, 150_000)
    sizes = []
    for data in (image for s in samples for image in s["images"]):
        sizes.append(len(data))
        with Image.open(io.BytesIO(data)) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            im.load()  # decodes the whole image: a truncated file raises here
            assert 336 <= min(im.size) and max(im.size) <= 640
    assert lo <= min(sizes) and max(sizes) <= hi
    assert np.std(sizes) > 10_000  # sizes vary like photos, not one constant size


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst", ".jsonl.gz"])
def test_jsonl_round_trip_and_determinism(tmp_path, suffix, demo_samples):
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    demo.write_jsonl(a, "vlm", 3, seed=0)
    demo.write_jsonl(b, "vlm", 3, seed=0)
    assert sha256_file(a) == sha256_file(b)
    assert list(demo.read_jsonl(a, "vlm")) == demo_samples("vlm", 3)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_jsonl_bytes_fields_are_base64_data_urls(tmp_path, demo_samples):
    import base64

    path = tmp_path / "v.jsonl"
    demo.write_jsonl(path, "vlm", 2)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2
    record = orjson.loads(lines[1])
    expected = demo_samples("vlm", 2)[1]
    assert record["images"] == ["data:image/jpeg;base64," + base64.b64encode(image).decode("ascii")
                                for image in expected["images"]]
    assert record["messages"] == expected["messages"] and record["id"] == expected["id"]


def test_unknown_profile():
    with pytest.raises(ValueError, match=r"^unknown demo profile 'audio'; choose one of vlm, text$"):
        next(demo.generate("audio", 1))


def test_missing_output_directory_is_created(tmp_path):
    demo.write_jsonl(tmp_path / "raw" / "sub" / "x.jsonl", "text", 2)
    assert len((tmp_path / "raw" / "sub" / "x.jsonl").read_text().splitlines()) == 2
    (tmp_path / "afile").write_text("")
    with pytest.raises(InvalidArgumentError, match=r"^the output directory is a file, or under one \(.*afile\)$"):
        demo.write_jsonl(tmp_path / "afile" / "x.jsonl", "text", 1)


def test_vlm_tour_round_trips_multi_image_samples_in_every_format(tmp_path):
    report = demo.tour(tmp_path, "vlm", n=12, log=lambda *_: None, tune=False)
    assert [(r.format, r.status) for r in report.formats] == [(f, "ok") for f in demo.TOUR_FORMATS]
    assert report.ok


def test_progress_is_a_bar_on_a_terminal_and_lines_only_when_asked(tmp_path, capsys, monkeypatch):
    demo.write_jsonl(tmp_path / "quiet.jsonl", "text", 3)  # stderr is not a terminal: nothing
    assert capsys.readouterr().err == ""
    demo.write_jsonl(tmp_path / "log.jsonl", "text", 3, progress=True)  # a log: a last line
    assert re.fullmatch(r"\[hpcio demo\] log\.jsonl: 3/3 samples \(100%\), [\d,]+ samples/s, done\n",
                        capsys.readouterr().err)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", Terminal())
    demo.write_jsonl(tmp_path / "bar.jsonl", "text", 3)
    assert "3/3" in sys.stderr.getvalue() and "[hpcio demo]" not in sys.stderr.getvalue()  # tqdm's bar
