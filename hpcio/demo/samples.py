"""The demo profiles' sample generators: sample ``i`` is a pure function of
``(profile, seed, i)`` (see :mod:`hpcio.demo`)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np

from ..errors import InvalidArgumentError, UsageError

__all__ = ["PROFILES", "BYTES_FIELDS", "TEXT_BYTES", "JPEG_BYTES", "IMAGES_PER_SAMPLE", "generate", "make_sample"]

PROFILES = {
    "vlm": "llava-instruct-like chat samples with 1-4 JPEGs of 30-150 KB each",
    "text": "pretraining documents of 0.5-4 KB text with a meta dict",
}
# Fields stored as base64 data: URLs in JSON Lines, per profile.
BYTES_FIELDS = {"vlm": ("images",), "text": ()}
# Inclusive size ranges the generators guarantee (UTF-8 bytes of `text`, JPEG bytes,
# images per vlm sample).
TEXT_BYTES = (512, 4096)
JPEG_BYTES = (30_000, 150_000)
IMAGES_PER_SAMPLE = (1, 4)

# Mixed into each sample's seed so the two profiles never share a random stream.
_PROFILE_KEY = {"vlm": 1, "text": 2}

_WORDS = (
    "the of and to a in is it you that he was for on are with as his they be at one have "
    "this from or had by hot word but what some we can out other were all there when up "
    "use your how said an each she which do their time if will way about many then them "
    "write would like so these her long make thing see him two has look more day could go "
    "come did number sound no most people my over know water than call first who may down "
    "side been now find any new work part take get place made live where after back little "
    "only round man year came show every good me give our under name very through just "
    "form sentence great think say help low line differ turn cause much mean before move "
    "right boy old too same tell does set three want air well also play small end put home "
    "read hand port large spell add even land here must big high such follow act why ask "
    "men change went light kind off need house picture try us again animal point mother "
    "world near build self earth father head stand own page should country found answer "
    "school grow study still learn plant cover food sun four between state keep eye never "
    "last let thought city tree cross farm hard start might story saw far sea draw left "
    "late run while press close night real life few north open seem together next white "
    "children begin got walk example ease paper group always music those both mark often "
    "letter until mile river car feet care second book carry took science eat room friend "
    "began idea fish mountain stop once base hear horse cut sure watch color face wood main "
    "enough plain girl usual young ready above ever red list though feel talk bird soon "
    "body dog family direct pose leave song measure door product black short numeral class "
    "wind question happen complete ship area half rock order fire south problem piece told "
    "knew pass since top whole king space heard best hour better true during hundred five "
    "remember step early hold west ground interest reach fast verb sing listen six table "
    "travel less morning ten simple several vowel toward war lay against pattern slow "
    "center love person money serve appear road map rain rule govern pull cold notice voice "
    "unit power town fine certain fly fall lead cry dark machine note wait plan figure star "
    "box noun field rest correct able pound done beauty drive stood contain front teach "
    "week final gave green oh quick develop ocean warm free minute strong special mind "
    "behind clear tail produce fact street inch multiply nothing course stay wheel full "
    "force blue object decide surface deep moon island foot system busy test record boat "
    "common gold possible plane stead dry wonder laugh thousand ago ran check game shape "
    "equate miss brought heat snow tire bring yes distant fill east paint language among"
).split()
# Zipf-like frequencies: rank r has weight 1/(r+2.7), close to natural-language counts.
_WORD_P = 1.0 / (np.arange(len(_WORDS)) + 2.7)
_WORD_P /= _WORD_P.sum()
_WORD_CDF = np.cumsum(_WORD_P)

_OBJECTS = (
    "dog cat bus train bicycle kite umbrella pizza clock bench giraffe zebra elephant "
    "surfboard laptop bowl vase sandwich horse boat truck skateboard teddy bear sheep"
).split()
_QUESTIONS = (
    "What is the {o} doing in the image?",
    "What color is the {o}?",
    "Describe the image in detail.",
    "How many {o}s can be seen in the picture?",
    "Where is the {o} located in the scene?",
    "What might be the reason for the {o} being there?",
    "Is there anything unusual about this image?",
    "What is the main subject of this photo?",
)
_FOLLOW_UPS = (
    "Can you tell me more about the {o}?",
    "What time of day does it seem to be?",
    "What else is near the {o}?",
    "Why do you think that is?",
    "Could this photo have been taken indoors?",
    "What is the weather like in the scene?",
)
_SOURCES = ("web", "books", "wiki", "news", "code", "forum", "papers")
_SOURCE_P = (0.45, 0.15, 0.12, 0.1, 0.08, 0.06, 0.04)
_LANGS = ("en", "fr", "de", "es", "it")
_LANG_P = (0.7, 0.12, 0.08, 0.06, 0.04)
_TAGS = ("qa", "dialogue", "list", "narrative", "technical", "short", "dedup", "filtered")

_IMAGE_SHAPES = (  # (height, width): common photo and vision-encoder sizes
    (480, 640), (640, 480), (427, 640), (640, 427), (512, 512),
    (375, 500), (500, 375), (448, 448), (336, 336), (480, 360),
)
_GRAIN_SIDE = 1024
_grain_cache: list[np.ndarray] = []


def _grain() -> np.ndarray:
    """A fixed film-grain tile shared by all images (one draw, not one per image)."""
    if not _grain_cache:
        rng = np.random.default_rng(0x6841_6E)
        tile = np.round(rng.standard_normal((_GRAIN_SIDE, _GRAIN_SIDE)) * 16)
        _grain_cache.append(tile.astype(np.int16))
    return _grain_cache[0]


def _resample(a: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Linear interpolation of ``a`` to ``n`` points along ``axis``.

    Element-wise float32 arithmetic only (no BLAS reductions), so the result is
    bit-identical on every machine.
    """
    g = a.shape[axis]
    pos = np.linspace(0, g - 1, n, dtype=np.float32)
    lo = pos.astype(np.intp)
    hi = np.minimum(lo + 1, g - 1)
    shape = [1] * a.ndim
    shape[axis] = n
    frac = (pos - lo).reshape(shape)
    return np.take(a, lo, axis) * (1 - frac) + np.take(a, hi, axis) * frac


def _jpeg(rng: np.random.Generator) -> bytes:
    """One photo-like JPEG of JPEG_BYTES size.

    Smooth multi-octave colour noise (sky, walls, out-of-focus backgrounds) plus a few
    hard-edged shapes (objects) plus grain (sensor noise and texture): the mix that
    makes real photos land at 30-150 KB at usual qualities.
    """
    from PIL import Image, ImageDraw

    h, w = _IMAGE_SHAPES[int(rng.integers(len(_IMAGE_SHAPES)))]
    colour_field = rng.standard_normal((3, 3, 3), dtype=np.float32) * np.float32(70)
    amp = np.float32(40)
    for g in (7, 15, 31, 63):  # each octave doubles the detail and halves the amplitude
        colour_field = _resample(_resample(colour_field, g, 0), g, 1)
        colour_field += rng.standard_normal((g, g, 3), dtype=np.float32) * amp
        amp *= np.float32(0.5)
    colour_field += rng.uniform(60, 190, 3).astype(np.float32)
    image = Image.fromarray(np.clip(colour_field, 0, 255).astype(np.uint8)).resize(
        (w, h), Image.Resampling.BICUBIC
    )
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(2, 7))):
        x0, x1 = sorted(int(v) for v in rng.integers(0, w, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, h, 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1 + 8, y1 + 8), fill=colour)
        else:
            draw.rectangle((x0, y0, x1 + 8, y1 + 8), fill=colour)
    oy = int(rng.integers(0, _GRAIN_SIDE - h))
    ox = int(rng.integers(0, _GRAIN_SIDE - w))
    strength = int(rng.integers(2, 11))
    grain = (_grain()[oy : oy + h, ox : ox + w] * strength) >> 4
    pixels = np.clip(np.asarray(image, dtype=np.int16) + grain[:, :, None], 0, 255)
    image = Image.fromarray(pixels.astype(np.uint8))
    quality = int(rng.integers(80, 93))
    lo, hi = JPEG_BYTES
    # Re-encode at another quality in the rare cases the content lands outside the
    # range; the steps are a deterministic function of the content, so bytes still are.
    for _ in range(8):
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=quality)
        size = buf.tell()
        if size < lo and quality < 98:
            quality = min(98, quality + 6)
        elif size > hi and quality > 30:
            quality -= 10
        else:
            break
    if not lo <= size <= hi:  # pragma: no cover - would mean a very different libjpeg
        raise UsageError(f"demo JPEG of {size} bytes is outside {lo}-{hi}")
    return buf.getvalue()


def _words(rng: np.random.Generator, count: int) -> list[str]:
    picks = np.searchsorted(_WORD_CDF, rng.random(count), side="right")
    return [_WORDS[min(int(k), len(_WORDS) - 1)] for k in picks]


def _sentences(rng: np.random.Generator, count: int) -> str:
    """``count`` sentences of 5-19 Zipf-distributed words, capitalised and punctuated."""
    lengths = rng.integers(5, 20, count)
    words = _words(rng, int(lengths.sum()))
    ends = rng.choice([".", ".", ".", "?", "!"], count)
    out = []
    pos = 0
    for n, end in zip(lengths.tolist(), ends.tolist()):
        chunk = words[pos : pos + n]
        pos += n
        if n > 8:  # a comma in longer sentences
            chunk[n // 2] += ","
        out.append(" ".join(chunk).capitalize() + end)
    return " ".join(out)


def _text(rng: np.random.Generator) -> str:
    """A document of TEXT_BYTES size, cut at a sentence or word boundary."""
    lo, hi = TEXT_BYTES
    target = int(rng.integers(lo, hi + 1))
    paragraphs = []
    size = 0
    while size < target:
        para = _sentences(rng, int(rng.integers(2, 9)))
        paragraphs.append(para)
        size += len(para) + 2
    text = "\n\n".join(paragraphs)
    if len(text) > target:
        cut = text.rfind(". ", lo, target)
        if cut < 0:
            cut = text.rfind(" ", lo, target)
        text = text[: cut + 1] if cut >= 0 else text[:target]
    return text


def _vlm(rng: np.random.Generator, seed: int, index: int) -> dict:
    obj = _OBJECTS[int(rng.integers(len(_OBJECTS)))]
    question = _QUESTIONS[int(rng.integers(len(_QUESTIONS)))].format(o=obj)
    first = f"<image>\n{question}" if rng.random() < 0.5 else f"{question}\n<image>"
    messages = [{"role": "user", "content": first}]
    pairs = int(rng.integers(1, 5))  # 2, 4, 6 or 8 turns
    for turn in range(pairs):
        if turn:
            follow = _FOLLOW_UPS[int(rng.integers(len(_FOLLOW_UPS)))].format(o=obj)
            messages.append({"role": "user", "content": follow})
        answer = _sentences(rng, int(rng.integers(1, 6)))
        messages.append({"role": "assistant", "content": answer})
    # One <image> placeholder per image, in the first turn, as multi-image SFT data has it.
    count = int(rng.integers(IMAGES_PER_SAMPLE[0], IMAGES_PER_SAMPLE[1] + 1))
    messages[0]["content"] = first.replace("<image>", "\n".join(["<image>"] * count))
    return {"id": f"vlm-{seed}-{index:08d}", "messages": messages, "images": [_jpeg(rng) for _ in range(count)]}


def _text_sample(rng: np.random.Generator, index: int) -> dict:
    source = _SOURCES[int(np.searchsorted(np.cumsum(_SOURCE_P), rng.random() * 0.999999))]
    lang = _LANGS[int(np.searchsorted(np.cumsum(_LANG_P), rng.random() * 0.999999))]
    ntags = int(rng.integers(0, 4))
    tags = [_TAGS[int(k)] for k in np.sort(rng.choice(len(_TAGS), ntags, replace=False))]
    meta = {
        "source": source,
        "lang": lang,
        "score": round(float(rng.random()), 6),
        "tags": tags,
    }
    return {"id": index, "text": _text(rng), "meta": meta}


def _check_profile(profile: str) -> None:
    if profile not in PROFILES:
        raise InvalidArgumentError(f"unknown demo profile {profile!r}; choose one of {', '.join(PROFILES)}")


def make_sample(profile: str, index: int, seed: int = 0) -> dict:
    """Sample ``index`` of the ``profile`` dataset for ``seed`` (see the module doc)."""
    _check_profile(profile)
    if index < 0 or seed < 0:
        raise InvalidArgumentError(f"index and seed must be >= 0, got index={index}, seed={seed}")
    rng = np.random.default_rng([seed, _PROFILE_KEY[profile], index])
    if profile == "vlm":
        return _vlm(rng, seed, index)
    return _text_sample(rng, index)


def generate(profile: str, n: int, seed: int = 0, start: int = 0) -> Iterator[dict]:
    """Samples ``start .. start+n-1`` of the ``profile`` demo dataset for ``seed``.

    Parameters
    ----------
    profile : {"vlm", "text"}
        Which dataset (see :data:`PROFILES` and the module documentation).
    n : int
        Number of samples.
    seed : int, default 0
        Dataset seed; the same seed gives the same samples, byte for byte.
    start : int, default 0
        Index of the first sample, to generate a slice (e.g. one part per rank).

    Yields
    ------
    dict
        One sample.
    """
    _check_profile(profile)
    if n < 0:
        raise InvalidArgumentError(f"n must be >= 0, got {n}")
    for index in range(start, start + n):
        yield make_sample(profile, index, seed)

