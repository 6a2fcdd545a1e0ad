"""Decoding binary sample values: images into PIL images, numpy arrays or torch tensors.

hpcio returns stored bytes untouched, so a round trip is byte-exact; decoding is a
step the user asks for, with the names webdataset's ``decode()`` uses:

===============  ==========================  ====================================
choice           result                      layout
===============  ==========================  ====================================
``pil``          ``PIL.Image`` (RGB)         also ``pilrgb``, ``pilrgba``, ``pill``
``rgb8``         numpy uint8                 H x W x 3 (``l8``: H x W, ``rgba8``: x 4)
``rgb``          numpy float32 in [0, 1]     as above (``l``, ``rgba``)
``numpy``        same as ``rgb8``            hpcio's alias
``torchrgb8``    torch uint8                 3 x H x W (``torchl8``: H x W, ``torchrgba8``)
``torchrgb``     torch float32 in [0, 1]     as above (``torchl``, ``torchrgba``); ``torch``
===============  ==========================  ====================================

A value is an image when its first bytes are a JPEG, PNG, GIF or WebP signature, or
when its field is named after an image extension (``jpg``, ``cover.png``); values
inside lists and mappings are decoded too, so ``{"images": [jpeg, jpeg]}`` becomes a
list of decoded images.  Other values are returned as they are.

The decoder is chosen per image: torchvision's (libjpeg-turbo, straight into a
tensor) when torchvision is installed, else simplejpeg for JPEG when installed, else
Pillow; ``PIL`` results always come from Pillow.  torchvision 0.29 deprecates its
image decoders in favour of torchcodec and says so in a ``DeprecationWarning``, which
Python's default filters do not show; pass ``backend="pillow"``, or a callable such
as ``torchcodec.decoders.decode_image``, to avoid them.

>>> import io
>>> from PIL import Image
>>> buf = io.BytesIO(); Image.new("RGB", (4, 2), (255, 0, 0)).save(buf, "PNG")
>>> decode = SampleDecoder("rgb8", backend="pillow")
>>> out = decode({"id": 7, "images": [buf.getvalue()], "text": "a red image"})
>>> out["images"][0].shape, out["images"][0][0, 0].tolist(), out["id"], out["text"]
((2, 4, 3), [255, 0, 0], 7, 'a red image')
"""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Callable, Mapping

import numpy as np

from .errors import DecodeError, InvalidArgumentError, MissingDependencyError, WrongTypeError

__all__ = ["IMAGE_SPECS", "IMAGE_EXTENSIONS", "BACKENDS", "image_kind", "ImageDecoder", "SampleDecoder",
           "sample_decoder"]

# name -> (container, dtype, Pillow mode), as webdataset's autodecode names them.
IMAGE_SPECS = {
    "l8": ("numpy", "uint8", "L"),
    "rgb8": ("numpy", "uint8", "RGB"),
    "rgba8": ("numpy", "uint8", "RGBA"),
    "l": ("numpy", "float", "L"),
    "rgb": ("numpy", "float", "RGB"),
    "rgba": ("numpy", "float", "RGBA"),
    "numpy": ("numpy", "uint8", "RGB"),
    "torchl8": ("torch", "uint8", "L"),
    "torchrgb8": ("torch", "uint8", "RGB"),
    "torchrgba8": ("torch", "uint8", "RGBA"),
    "torchl": ("torch", "float", "L"),
    "torchrgb": ("torch", "float", "RGB"),
    "torchrgba": ("torch", "float", "RGBA"),
    "torch": ("torch", "float", "RGB"),
    "pill": ("pil", None, "L"),
    "pil": ("pil", None, "RGB"),
    "pilrgb": ("pil", None, "RGB"),
    "pilrgba": ("pil", None, "RGBA"),
}
IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm", "pbm"})
BACKENDS = ("auto", "torchvision", "simplejpeg", "pillow")
_BYTES_LIKE = (bytes, bytearray, memoryview)
# torchvision decodes these into one 3-D tensor (a GIF may hold several frames); it has
# no RGBA output for JPEG, which Pillow then gives.
_TORCHVISION_KINDS = frozenset({"jpeg", "png", "webp"})


def image_kind(data) -> str | None:
    """``"jpeg"``, ``"png"``, ``"gif"`` or ``"webp"`` from the signature at the start of
    ``data``, else None.

    >>> image_kind(b"\\xff\\xd8\\xff\\xe0..."), image_kind(b"GIF89a..."), image_kind(b"{}")
    ('jpeg', 'gif', None)
    """
    head = bytes(data[:12])
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return None


def _named_image(field) -> bool:
    """A field named ``jpg``, ``png``, ``cover.jpg`` ... holds images (webdataset's rule)."""
    return isinstance(field, str) and field.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class ImageDecoder:
    """Decode one image (bytes-like) into the type named by ``spec`` (see the module doc).

    ``backend`` is ``"auto"`` (the fastest installed decoder for each image),
    ``"torchvision"`` (JPEG, PNG and WebP), ``"simplejpeg"`` (JPEG) or ``"pillow"``;
    Pillow decodes what the chosen library cannot.
    Instances are picklable, so they cross into DataLoader workers.
    """

    def __init__(self, spec: str = "torchrgb8", backend: str = "auto"):
        if spec not in IMAGE_SPECS:
            raise InvalidArgumentError(f"unknown image decoding {spec!r}; choose one of {', '.join(IMAGE_SPECS)}")
        if backend not in BACKENDS:
            raise InvalidArgumentError(f"unknown decoding backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.spec, self.backend = spec, backend
        self.container, self.dtype, self.mode = IMAGE_SPECS[spec]
        if self.container == "torch" and not _installed("torch"):
            raise MissingDependencyError(f"decoding to {spec!r} needs PyTorch: pip install torch")
        if backend in ("torchvision", "simplejpeg") and not _installed(backend):
            raise MissingDependencyError(f"backend={backend!r} needs {backend}: pip install {backend}")
        self._use_torchvision = backend == "torchvision" or (backend == "auto" and _installed("torchvision"))
        self._use_simplejpeg = backend == "simplejpeg" or (backend == "auto" and _installed("simplejpeg"))
        # Imported here, once: DataLoader workers forked later inherit the modules.
        if self._use_torchvision and self.container != "pil":
            import torchvision.io  # noqa: F401

    def fingerprint(self) -> str:
        return f"{self.spec}, backend={self.backend}"

    def __repr__(self) -> str:
        return f"ImageDecoder({self.spec!r}, backend={self.backend!r})"

    def __call__(self, data):
        kind = image_kind(data)
        if self.container == "pil":
            return _pillow(data).convert(self.mode)
        if self._use_torchvision and kind in _TORCHVISION_KINDS and (kind, self.mode) != ("jpeg", "RGBA"):
            return self._finish_chw(_torchvision(data, self.mode))
        if self._use_simplejpeg and kind == "jpeg":
            return self._finish_hwc(_simplejpeg(data, self.mode))
        return self._finish_hwc(np.array(_pillow(data).convert(self.mode)))

    def _finish_chw(self, pixels):
        """A C x H x W uint8 tensor into this spec's container, dtype and layout."""
        if self.mode == "L":
            pixels = pixels[0]
        if self.container == "numpy":
            pixels = pixels.numpy() if self.mode == "L" else np.ascontiguousarray(pixels.permute(1, 2, 0).numpy())
            return pixels.astype(np.float32) / np.float32(255) if self.dtype == "float" else pixels
        return pixels.float().div_(255) if self.dtype == "float" else pixels

    def _finish_hwc(self, pixels: np.ndarray):
        """An H x W (x C) uint8 array into this spec's container, dtype and layout."""
        if self.dtype == "float":
            pixels = pixels.astype(np.float32) / np.float32(255)
        if self.container == "numpy":
            return pixels
        import torch

        tensor = torch.from_numpy(pixels)
        return tensor if tensor.ndim == 2 else tensor.permute(2, 0, 1).contiguous()


def _pillow(data):
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _torchvision(data, mode: str):
    import torch
    from torchvision.io import ImageReadMode, decode_image

    read_mode = {"L": ImageReadMode.GRAY, "RGB": ImageReadMode.RGB, "RGBA": ImageReadMode.RGB_ALPHA}[mode]
    # A copy: torch warns about tensors over read-only buffers, and stored bytes are.
    encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return decode_image(encoded, mode=read_mode)


def _simplejpeg(data, mode: str) -> np.ndarray:
    import simplejpeg

    colorspace = {"L": "GRAY", "RGB": "RGB", "RGBA": "RGBA"}[mode]
    pixels = simplejpeg.decode_jpeg(bytes(data), colorspace=colorspace)
    return pixels[:, :, 0] if mode == "L" else pixels


class SampleDecoder:
    """Decode the binary values of a sample (or of every sample of a list).

    ``decode`` is one of:

    - a name from :data:`IMAGE_SPECS` (``"torchrgb8"``, ``"pil"``, ...) or an
      :class:`ImageDecoder`: every image value is decoded, in every field, inside
      lists and mappings too;
    - a callable: called as ``decode(data)`` on every image value instead;
    - a mapping ``{field: name or callable}``: only those fields are decoded, and every
      binary value in them is handed to the decoder (so a callable can decode audio or
      arrays as well); a name asserts that the field holds images.

    Returns plain dicts.  A value that cannot be decoded raises :class:`DecodeError`
    naming the field, its position and the sample.
    """

    def __init__(self, decode, backend: str = "auto"):
        self.backend = backend
        if isinstance(decode, Mapping):
            self.fields = {str(k): self._decoder(v) for k, v in decode.items()}
            self.everywhere = None
        else:
            self.fields = {}
            self.everywhere = self._decoder(decode)

    def _decoder(self, choice) -> Callable:
        if isinstance(choice, str):
            return ImageDecoder(choice, self.backend)
        if not callable(choice):
            raise WrongTypeError(f"decode= takes a name, a callable or a mapping of them, got {type(choice).__name__}")
        return choice

    def fingerprint(self) -> str:
        """Names the decoders, for pipeline cache keys."""
        from .pipeline.stages import fingerprint_callable

        rules = {None: self.everywhere} if self.everywhere is not None else self.fields
        return repr({k: fingerprint_callable(v) for k, v in rules.items()})

    def __call__(self, sample, index: int | None = None):
        if isinstance(sample, (list, tuple)):
            return [self(s) for s in sample]
        if not isinstance(sample, Mapping):
            raise WrongTypeError(f"decoding needs samples that are mappings, got {type(sample).__name__}")
        out = {}
        for field in sample:
            value = sample[field]
            if self.everywhere is not None:
                out[field] = self._walk(value, field, self.everywhere, _named_image(field), index)
            elif field in self.fields:
                out[field] = self._walk(value, field, self.fields[field], True, index)
            else:
                out[field] = value
        return out

    def _walk(self, value, where: str, decoder, forced: bool, index):
        """``value`` with its binary leaves decoded: images, or every leaf when ``forced``."""
        if isinstance(value, _BYTES_LIKE):
            if not (forced or image_kind(value) is not None):
                return value
            try:
                return decoder(value)
            except Exception as exc:
                at = f" of sample {index}" if index is not None else ""
                kind = image_kind(value) or "unknown signature"
                raise DecodeError(f"cannot decode {where}{at} ({kind}, {len(value)} bytes): {exc}") from exc
        if isinstance(value, (list, tuple)):
            return [self._walk(v, f"{where}[{i}]", decoder, forced, index) for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            return {k: self._walk(v, f"{where}.{k}", decoder, forced or _named_image(k), index)
                    for k, v in value.items()}
        return value


def sample_decoder(decode, backend: str = "auto") -> SampleDecoder | None:
    """``decode`` as a :class:`SampleDecoder` (None stays None, a decoder stays itself)."""
    if decode is None or isinstance(decode, SampleDecoder):
        return decode
    return SampleDecoder(decode, backend)
