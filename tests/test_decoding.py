"""Decoding images in samples: the named choices, backends, lists, fields, errors."""

from __future__ import annotations

import importlib.machinery
import io
import pickle
import sys
import types

import numpy as np
import pytest
from PIL import Image

from hpcio.decoding import IMAGE_SPECS, ImageDecoder, SampleDecoder, image_kind, sample_decoder
from hpcio.errors import DecodeError, MissingDependencyError

# torchvision 0.29 deprecates its decoders (for torchcodec) with a warning on every call.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision")

# A 5 x 3 image whose every pixel differs, so a transposed layout cannot pass.
PIXELS = (np.arange(5 * 3 * 3, dtype=np.uint8).reshape(3, 5, 3) * 5).astype(np.uint8)


def encode(fmt: str, pixels: np.ndarray = PIXELS, **options) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, fmt, **options)
    return buf.getvalue()


PNG = encode("PNG")
JPEG = encode("JPEG", quality=95)
BMP = encode("BMP")
BACKENDS = ["pillow"] + (["torchvision"] if importlib.util.find_spec("torchvision") else [])


@pytest.mark.parametrize("data, kind", [
    (JPEG, "jpeg"), (PNG, "png"), (encode("GIF"), "gif"), (encode("WEBP"), "webp"),
    (BMP, None), (b"", None), (b'{"a": 1}', None), (memoryview(PNG), "png"),
])
def test_image_kind_reads_the_signature(data, kind):
    assert image_kind(data) == kind


def expected_pixels(spec: str) -> np.ndarray:
    """What webdataset's autodecode gives for PIXELS: H x W x C (H x W for L) numpy."""
    mode = IMAGE_SPECS[spec][2]
    return np.array(Image.fromarray(PIXELS).convert(mode))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", sorted(s for s in IMAGE_SPECS if IMAGE_SPECS[s][0] == "numpy"))
def test_numpy_choices_give_hwc_arrays(spec, backend):
    got = ImageDecoder(spec, backend)(PNG)
    want = expected_pixels(spec)
    assert isinstance(got, np.ndarray) and got.shape == want.shape
    if IMAGE_SPECS[spec][1] == "float":
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want / np.float32(255), rtol=1e-6)
    else:
        assert got.dtype == np.uint8 and np.array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", sorted(s for s in IMAGE_SPECS if IMAGE_SPECS[s][0] == "torch"))
def test_torch_choices_give_chw_tensors(spec, backend):
    torch = pytest.importorskip("torch")
    got = ImageDecoder(spec, backend)(PNG)
    want = expected_pixels(spec)
    want = torch.from_numpy(want if want.ndim == 2 else want.transpose(2, 0, 1).copy())
    assert isinstance(got, torch.Tensor) and got.shape == want.shape
    if IMAGE_SPECS[spec][1] == "float":
        assert got.dtype == torch.float32
        assert torch.allclose(got, want.float() / 255)
    else:
        assert got.dtype == torch.uint8 and torch.equal(got, want)


@pytest.mark.parametrize("spec, mode", [("pil", "RGB"), ("pilrgb", "RGB"), ("pilrgba", "RGBA"), ("pill", "L")])
def test_pil_choices_give_images(spec, mode):
    got = ImageDecoder(spec)(JPEG)
    assert isinstance(got, Image.Image) and got.mode == mode and got.size == (5, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jpeg_decodes_close_to_its_pixels_with_every_backend(backend):
    got = ImageDecoder("rgb8", backend)(JPEG)
    assert got.shape == PIXELS.shape
    assert np.abs(got.astype(int) - PIXELS.astype(int)).mean() < 8  # lossy, quality 95


def test_images_in_lists_and_mappings_are_decoded_and_the_rest_kept():
    sample = {"id": 3, "text": "two images", "images": [JPEG, memoryview(PNG)],
              "meta": {"thumb": PNG, "note": b"not an image"}, "blob": b"\x00\x01", "score": 0.5}
    out = SampleDecoder("rgb8", backend="pillow")(sample)
    assert [img.shape for img in out["images"]] == [(3, 5, 3), (3, 5, 3)]
    assert out["meta"]["thumb"].shape == (3, 5, 3) and out["meta"]["note"] == b"not an image"
    assert (out["id"], out["text"], out["blob"], out["score"]) == (3, "two images", b"\x00\x01", 0.5)


def test_a_field_named_after_an_image_extension_is_decoded_without_a_signature():
    out = SampleDecoder("rgb8")({"cover.bmp": BMP, "jpg": [BMP], "blob": BMP})
    assert out["cover.bmp"].shape == (3, 5, 3) and out["jpg"][0].shape == (3, 5, 3)
    assert out["blob"] == BMP  # no signature, no image extension: left alone


def test_a_callable_decodes_every_image():
    seen = []

    def decode(data):
        seen.append(bytes(data[:3]))
        return "decoded"

    out = SampleDecoder(decode)({"images": [JPEG, PNG], "text": "t", "blob": b"xyz"})
    assert out == {"images": ["decoded", "decoded"], "text": "t", "blob": b"xyz"}
    assert seen == [JPEG[:3], PNG[:3]]


def test_a_mapping_decodes_only_its_fields_and_all_their_binaries():
    out = SampleDecoder({"audio": bytes.upper, "images": "l8"})(
        {"audio": [b"abc", b"de"], "images": [PNG], "thumb": PNG}
    )
    assert out["audio"] == [b"ABC", b"DE"]
    assert out["images"][0].shape == (3, 5)
    assert out["thumb"] == PNG  # not named: not decoded


def test_a_broken_image_names_its_field_position_and_sample():
    broken = JPEG[:40]
    with pytest.raises(DecodeError, match=r"cannot decode images\[1\] of sample 7 \(jpeg, 40 bytes\)"):
        SampleDecoder("rgb8")({"images": [PNG, broken]}, 7)
    with pytest.raises(DecodeError, match=r"cannot decode data of sample 2 \(unknown signature"):
        SampleDecoder({"data": "rgb8"})({"data": b"plain bytes"}, 2)


def test_a_list_of_samples_is_decoded_sample_by_sample():
    out = SampleDecoder("l8")([{"a": PNG}, {"a": JPEG}])
    assert [s["a"].shape for s in out] == [(3, 5), (3, 5)]


def test_bad_choices_say_what_is_accepted():
    with pytest.raises(ValueError, match="unknown image decoding 'rgb16'; choose one of l8, rgb8"):
        SampleDecoder("rgb16")
    with pytest.raises(ValueError, match="unknown decoding backend 'fast'"):
        ImageDecoder("rgb8", backend="fast")
    with pytest.raises(TypeError, match="decode= takes a name, a callable or a mapping"):
        SampleDecoder({"images": 3})
    with pytest.raises(TypeError, match="samples that are mappings"):
        SampleDecoder("rgb8")(b"bytes")


def test_a_missing_backend_is_named(monkeypatch):
    monkeypatch.setattr("hpcio.decoding._installed", lambda name: False)
    with pytest.raises(MissingDependencyError, match="backend='simplejpeg' needs simplejpeg"):
        ImageDecoder("rgb8", backend="simplejpeg")
    with pytest.raises(MissingDependencyError, match="decoding to 'torchrgb8' needs PyTorch"):
        ImageDecoder("torchrgb8", backend="pillow")


def test_simplejpeg_decodes_jpeg_and_pillow_the_rest(monkeypatch):
    calls = []

    def decode_jpeg(data, colorspace):
        calls.append(colorspace)
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))

    fake = types.ModuleType("simplejpeg")
    fake.__spec__ = importlib.machinery.ModuleSpec("simplejpeg", None)
    fake.decode_jpeg = decode_jpeg
    monkeypatch.setitem(sys.modules, "simplejpeg", fake)
    decode = ImageDecoder("rgb8", backend="simplejpeg")
    assert decode(JPEG).shape == (3, 5, 3) and calls == ["RGB"]
    assert np.array_equal(decode(PNG), PIXELS) and calls == ["RGB"]


def test_decoders_pickle_and_name_themselves():
    decode = SampleDecoder({"images": "torchrgb8"}, backend="pillow") if importlib.util.find_spec(
        "torch") else SampleDecoder({"images": "rgb8"}, backend="pillow")
    again = pickle.loads(pickle.dumps(decode))
    assert again.fingerprint() == decode.fingerprint()
    assert "ImageDecoder" in decode.fingerprint() and "backend=pillow" in decode.fingerprint()
    assert SampleDecoder("rgb8").fingerprint() != SampleDecoder("rgb").fingerprint()
    assert sample_decoder(None) is None and sample_decoder(decode) is decode
