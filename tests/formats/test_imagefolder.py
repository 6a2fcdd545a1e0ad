"""Image folders: conformance, torchvision-style folders without an index, labels from
folder names, truncated files."""

import io
import os

import pytest
from PIL import Image

import hpcio
from hpcio.errors import TruncatedShardError
from hpcio.testing import FormatTests, assert_sample_equal, stored_bytes


def png(i):
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (i % 256, 7, 9)).save(buf, format="PNG")
    return buf.getvalue()


class TestImageFolderFormat(FormatTests):
    format_name = "imagefolder"

    def make_sample(self, i):
        sample = super().make_sample(i)
        # classes in blocks so folder order equals write order
        return {**sample, "image": png(i), "label": f"class{i // 20}"}

    expected_inspect = {"shards": 10, "fields": {"caption": "txt", "image": "png", "label": "str"},
                        "details": {"classes": 2, "indexed": True}}

    def make_report_sample(self, i):
        return {"image": png(i), "label": f"c{i // 3}", "caption": f"t{i}"}

    def report_stored_bytes(self, path):
        return stored_bytes(path) - os.path.getsize(os.path.join(path, "index.json"))


def test_plain_class_folders(tmp_path):
    for cls, n in (("dog", 2), ("cat", 3)):
        os.makedirs(tmp_path / cls)
        for k in range(n):
            (tmp_path / cls / f"{cls}_{k}.png").write_bytes(png(k))
    assert hpcio.sniff_format(tmp_path).NAME == "imagefolder"
    ds = hpcio.open(tmp_path)
    assert [s["label"] for s in ds] == ["cat"] * 3 + ["dog"] * 2
    assert ds[4] == {"image": png(1), "label": "dog"}
    assert [s["label"] for s in hpcio.open(tmp_path, labels="index")] == [0, 0, 0, 1, 1]


def test_truncated_image(tmp_path):
    with hpcio.open_writer(tmp_path / "f", format="imagefolder") as w:
        w.write({"image": png(1), "label": "a", "caption": "one"})
    victim = tmp_path / "f" / "a" / "000000000.png"
    victim.write_bytes(png(1)[:30])
    with pytest.raises(TruncatedShardError, match=(
            rf"^file holds 30 bytes, the index says {len(png(1))} \({victim}, sample 0\)$")):
        hpcio.open(tmp_path / "f")[0]
    assert_sample_equal(hpcio.open(tmp_path / "f").select(["caption"])[0], {"caption": "one"})


def test_verify_locates_a_truncated_image(tmp_path):
    path = TestImageFolderFormat().write_report_dataset(tmp_path)
    victim = os.path.join(path, "c1", "000000004.png")
    with open(victim, "r+b") as f:
        f.truncate(30)
    report = hpcio.get_format("imagefolder").verify(path)
    assert (report["ok"], report["samples"], report["checked"]) == (False, 5, 4)
    assert report["errors"] == [{
        "path": victim, "offset": None, "sample": 4, "type": "TruncatedShardError",
        "error": f"file holds 30 bytes, the index says {len(png(4))} ({victim}, sample 4)"}]

