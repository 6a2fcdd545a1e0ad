"""Deterministic demo datasets: vision-language SFT samples and pretraining text.

The tests, the README's main command and the benchmarks all use these generators, so
the same seed must give the same bytes on every machine and every run.  Sample ``i`` is
a pure function of ``(profile, seed, i)`` (its random stream is
``numpy.random.default_rng([seed, PROFILE_KEY, i])``), so any slice of a dataset can be
generated on its own, e.g. one part per MPI rank.  The JPEG bytes also depend on the
Pillow build (its libjpeg), nothing else.

Profiles
--------
``vlm``
    llava-instruct-like supervised fine-tuning samples::

        {"id": "vlm-0-00000000",                      # str
         "messages": [{"role": "user", "content": "<image>\\nWhat ..."},
                      {"role": "assistant", "content": "..."}, ...],   # 2-8 turns
         "images": [b"\\xff\\xd8..."]}                  # one 30-150 KB JPEG, raw bytes

    ``messages`` is the Hugging Face chat layout; turns alternate user/assistant,
    start with the user (whose first turn holds the ``<image>`` placeholder) and end
    with the assistant.  Images are 336-640 pixels a side, smooth colour fields with
    shapes and film grain, so they compress like photos rather than like noise or flat
    colour.
``text``
    pretraining documents::

        {"id": 0,                                     # int, the sample index
         "text": "The ...",                           # 512-4096 UTF-8 bytes
         "meta": {"source": "web", "lang": "en", "score": 0.73, "tags": ["qa"]}}

JSON Lines layout
-----------------
:func:`write_jsonl` writes one JSON object per line, fields as above, except that
``bytes`` values are standard base64 strings with padding (RFC 4648 section 4): the
``vlm`` profile's ``images`` is a list of base64 strings.  This is the layout the JSONL
source of ``hpcio-convert`` reads with ``images`` named as a base64 field;
:func:`read_jsonl` decodes it back to samples equal to :func:`generate`'s.  A path
ending in ``.zst`` is zstd-compressed (needs ``zstandard``), in ``.gz`` gzip-compressed
(with a zero timestamp, so the bytes stay deterministic).

>>> from hpcio import demo
>>> s = next(demo.generate("text", 1, seed=7))
>>> sorted(s), sorted(s["meta"])
(['id', 'meta', 'text'], ['lang', 'score', 'source', 'tags'])
>>> 512 <= len(s["text"].encode()) <= 4096
True
>>> s == next(demo.generate("text", 1, seed=7))
True
>>> v = next(demo.generate("vlm", 1))
>>> v["images"][0][:3], v["messages"][0]["role"], "<image>" in v["messages"][0]["content"]
(b'\\xff\\xd8\\xff', 'user', True)
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import CapabilityError, MissingDependencyError, ShardNotFoundError

__all__ = [
    "PROFILES",
    "BYTES_FIELDS",
    "TEXT_BYTES",
    "JPEG_BYTES",
    "generate",
    "make_sample",
    "write_jsonl",
    "read_jsonl",
    "TOUR_FORMATS",
    "FormatResult",
    "TourReport",
    "shard_layout",
    "tour",
    "format_report",
]

PROFILES = {
    "vlm": "llava-instruct-like chat samples with one 30-150 KB JPEG each",
    "text": "pretraining documents of 0.5-4 KB text with a meta dict",
}
# Fields stored as base64 strings in JSON Lines, per profile.
BYTES_FIELDS = {"vlm": ("images",), "text": ()}
# Inclusive size ranges the generators guarantee (UTF-8 bytes of `text`, JPEG bytes).
TEXT_BYTES = (512, 4096)
JPEG_BYTES = (30_000, 150_000)

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
        raise RuntimeError(f"demo JPEG of {size} bytes is outside {lo}-{hi}")
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
    return {"id": f"vlm-{seed}-{index:08d}", "messages": messages, "images": [_jpeg(rng)]}


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
        raise ValueError(f"unknown demo profile {profile!r}; choose one of {', '.join(PROFILES)}")


def make_sample(profile: str, index: int, seed: int = 0) -> dict:
    """Sample ``index`` of the ``profile`` dataset for ``seed`` (see the module doc)."""
    _check_profile(profile)
    if index < 0 or seed < 0:
        raise ValueError(f"index and seed must be >= 0, got index={index}, seed={seed}")
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
        raise ValueError(f"n must be >= 0, got {n}")
    for index in range(start, start + n):
        yield make_sample(profile, index, seed)


def _to_json(sample: dict, profile: str) -> dict:
    record = dict(sample)
    for name in BYTES_FIELDS[profile]:
        value = record[name]
        if isinstance(value, list):
            record[name] = [base64.b64encode(v).decode("ascii") for v in value]
        else:
            record[name] = base64.b64encode(value).decode("ascii")
    return record


def _from_json(record: dict, profile: str) -> dict:
    for name in BYTES_FIELDS[profile]:
        value = record[name]
        if isinstance(value, list):
            record[name] = [base64.b64decode(v, validate=True) for v in value]
        else:
            record[name] = base64.b64decode(value, validate=True)
    return record


@contextlib.contextmanager
def _open_compressed(path: str, mode: str, name: str | None = None):
    """``path`` opened through the codec that ``name``'s suffix (default path's) names."""
    name = path if name is None else name
    with contextlib.ExitStack() as stack:
        if name.endswith(".zst"):
            try:
                import zstandard
            except ImportError as exc:
                raise MissingDependencyError(
                    "writing or reading .zst needs zstandard: pip install 'hpcio[codecs]'",
                    path=name,
                ) from exc
            raw = stack.enter_context(open(path, mode))
            if "w" in mode:
                codec = zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False)
            else:
                codec = io.BufferedReader(
                    zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
                )
            yield stack.enter_context(codec)
        elif name.endswith(".gz"):
            raw = stack.enter_context(open(path, mode))
            # mtime=0 and no file name in the header keep the bytes deterministic.
            yield stack.enter_context(gzip.GzipFile(filename="", mode=mode, fileobj=raw, mtime=0))
        else:
            yield stack.enter_context(open(path, mode))


def write_jsonl(
    path: str | os.PathLike, profile: str, n: int, seed: int = 0, start: int = 0
) -> int:
    """Write samples ``start .. start+n-1`` as JSON Lines; return the bytes written.

    ``bytes`` fields become base64 strings (see the module documentation); a ``.zst``
    or ``.gz`` suffix compresses the file.  The output is written to a temporary name
    and renamed, so a reader never sees a partial file.
    """
    import orjson

    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ShardNotFoundError("the output directory does not exist", path=parent)
    tmp = f"{path}.tmp-{os.getpid()}"
    written = 0
    try:
        with _open_compressed(tmp, "wb", name=path) as out:
            for sample in generate(profile, n, seed, start):
                line = orjson.dumps(_to_json(sample, profile)) + b"\n"
                out.write(line)
                written += len(line)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return written


def read_jsonl(path: str | os.PathLike, profile: str) -> Iterator[dict]:
    """The samples of a file written by :func:`write_jsonl`, base64 fields decoded."""
    import orjson

    _check_profile(profile)
    path = os.fspath(path)
    with _open_compressed(path, "rb") as f:
        for line in f:
            if line.strip():
                yield _from_json(orjson.loads(line), profile)


# --- the demo tour: generate, write shards, read them back --------------------------

# Formats the tour writes, and the writer options it uses for each.
TOUR_FORMATS = ("mds", "jinx", "webdataset", "zarr", "hdf5")
TOUR_WRITE_OPTIONS = {"mds": {"compression": "sample::zstd"}}
DEFAULT_COUNTS = {"vlm": 500, "text": 5000}


@dataclass
class FormatResult:
    """What the tour measured for one format; rates are samples per second."""

    format: str
    status: str  # "ok", "unavailable" (not in this build / backend missing) or "failed"
    detail: str = ""
    write_rate: float | None = None
    size_bytes: int | None = None
    iterate_rate: float | None = None
    shuffle_rate: float | None = None
    sort_seconds: float | None = None
    split: str = ""


@dataclass
class TourReport:
    """The tour's results: generation speed, raw source size, and one row per format."""

    profile: str
    n: int
    seed: int
    out: str
    generate_rate: float = 0.0
    source_path: str = ""
    source_bytes: int = 0
    formats: list[FormatResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """At least one format worked and none failed."""
        return any(r.status == "ok" for r in self.formats) and not any(
            r.status == "failed" for r in self.formats
        )


def _same(got, expected) -> bool:
    """Equality where bytes-like values (zero-copy views) count as their bytes."""
    if isinstance(expected, (bytes, bytearray)):
        return isinstance(got, (bytes, bytearray, memoryview)) and bytes(got) == expected
    if isinstance(expected, dict):
        return (
            isinstance(got, Mapping)
            and set(got) == set(expected)
            and all(_same(got[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(got, (list, tuple))
            and len(got) == len(expected)
            and all(_same(g, e) for g, e in zip(got, expected))
        )
    return type(got) is type(expected) and got == expected


def shard_layout(sample: dict) -> dict:
    """``sample`` in the layout the tour writes to shards.

    A ``vlm`` sample's one-image ``images`` list becomes an ``image`` bytes field:
    neither an MDS column (``json``) nor a JINX value (list items lose their type in
    mldataforge) can keep bytes inside a list, while a bytes field is stored verbatim
    by every format.  Other samples are returned unchanged.

    >>> s = shard_layout(make_sample("vlm", 0))
    >>> sorted(s), s["image"][:2]
    (['id', 'image', 'messages'], b'\\xff\\xd8')
    """
    images = sample.get("images")
    if isinstance(images, list) and len(images) == 1:
        out = {k: v for k, v in sample.items() if k != "images"}
        out["image"] = images[0]
        return out
    return sample


def _check_by_id(got: list, by_id: dict, what: str) -> None:
    """Every generated sample exactly once, each equal byte for byte, in any order."""
    if len(got) != len(by_id):
        raise AssertionError(f"{what}: {len(got)} samples, expected {len(by_id)}")
    seen = set()
    for i, sample in enumerate(got):
        key = sample.get("id")
        if key not in by_id or key in seen:
            raise AssertionError(f"{what}: sample {i} has an unknown or repeated id {key!r}")
        seen.add(key)
        if not _same(sample, by_id[key]):
            raise AssertionError(f"{what}: sample {i} (id {key!r}) differs from the generated one")


def _disk_usage(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def _why_unavailable(exc: ImportError) -> str:
    missing = getattr(exc, "name", None) or ""
    if missing.startswith("hpcio.formats."):
        return f"not in this build ({missing} does not exist)"
    return " ".join(str(exc).split())


def _convert_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("hpcio.convert") is not None


def _write(name: str, samples: list, dst: str, source: str | None) -> str:
    """Write ``samples`` as format ``name`` at ``dst``; return how it was written.

    With a ``source`` dataset and :func:`hpcio.convert` in this build, the shards are
    converted from it (what users run); otherwise they are written sample by sample.
    """
    import hpcio

    options = TOUR_WRITE_OPTIONS.get(name, {})
    how = "open_writer"
    if source is not None and _convert_available():
        try:
            hpcio.convert(source, dst, to=name, progress=False, **options)
            return f"hpcio.convert from {os.path.basename(source)}"
        except CapabilityError as exc:  # a format the converter cannot write (yet)
            how = f"open_writer (hpcio.convert: {' '.join(str(exc).split())})"
            if os.path.isdir(dst):
                shutil.rmtree(dst)
    with hpcio.open_writer(dst, format=name, **options) as writer:
        for sample in samples:
            writer.write(sample)
    return how


def _tour_format(name: str, samples: list, out: str, source: str | None, log) -> FormatResult:
    import hpcio

    try:
        hpcio.get_format(name)
    except ImportError as exc:
        return FormatResult(name, "unavailable", _why_unavailable(exc))
    n = len(samples)
    by_id = {s["id"]: s for s in samples}
    dst = os.path.join(out, name)
    try:
        t0 = time.perf_counter()
        how = _write(name, samples, dst, source)
        result = FormatResult(name, "ok", how, write_rate=n / (time.perf_counter() - t0))
        result.size_bytes = _disk_usage(dst)
        sniffed = hpcio.sniff_format(dst).NAME
        if sniffed != name:
            raise AssertionError(f"hpcio.open would read {dst} as {sniffed}, not {name}")

        with hpcio.open(dst) as ds:
            t0 = time.perf_counter()
            stored = list(ds)
            result.iterate_rate = n / (time.perf_counter() - t0)
            _check_by_id(stored, by_id, "iteration")

            perm = np.random.default_rng(42).permutation(n)
            shuffled = ds.shuffle(seed=42)
            t0 = time.perf_counter()
            got = list(shuffled)
            result.shuffle_rate = n / (time.perf_counter() - t0)
            if [s["id"] for s in got] != [stored[int(i)]["id"] for i in perm]:
                raise AssertionError("shuffle(seed=42) is not default_rng(42).permutation(n)")
            _check_by_id(got, by_id, "shuffle(seed=42)")

            t0 = time.perf_counter()
            ordered = shuffled.sort("id")
            result.sort_seconds = time.perf_counter() - t0
            if [s["id"] for s in ordered.select(["id"])] != sorted(by_id):
                raise AssertionError("shuffle(42).sort('id') is not in id order")

            world = 4
            parts = [shuffled.split(rank, world).select(["id"]) for rank in range(world)]
            seen = [s["id"] for part in parts for s in part]
            if seen != [s["id"] for s in got[: world * (n // world)]]:
                raise AssertionError("split(rank, 4) parts do not tile the shuffled order")
            result.split = f"{world} x {n // world}"
        log(f"  {name}: ok ({how})")
        return result
    except ImportError as exc:  # an optional backend (zarr, h5py) is missing
        return FormatResult(name, "unavailable", _why_unavailable(exc))
    except Exception as exc:
        detail = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        log(f"  {name}: FAILED: {detail}")
        return FormatResult(name, "failed", detail)


def tour(
    out: str | os.PathLike,
    profile: str = "vlm",
    n: int | None = None,
    seed: int = 0,
    formats: Sequence[str] = TOUR_FORMATS,
    log=print,
) -> TourReport:
    """Generate a demo dataset, write it in each format, read it back and check it.

    The samples are written in :func:`shard_layout`: the first available format with
    :func:`hpcio.open_writer`, the others with :func:`hpcio.convert` from it when this
    build has the converter.  Each dataset is opened with :func:`hpcio.open`, iterated,
    iterated as ``shuffle(seed=42)``, sorted by ``id`` and split across 4 ranks; every
    sample is checked byte for byte against the generated one.  Formats not in this
    build are reported as unavailable, never skipped silently.

    Parameters
    ----------
    out : path
        Directory for the raw JSON Lines source and one sub-directory per format.
    profile : {"vlm", "text"}
    n : int, optional
        Number of samples (default :data:`DEFAULT_COUNTS` of the profile).
    seed : int
        Dataset seed.
    formats : sequence of str
        Formats to try.
    log : callable
        Receives progress lines.
    """
    _check_profile(profile)
    n = DEFAULT_COUNTS[profile] if n is None else n
    out = os.fspath(out)
    os.makedirs(out, exist_ok=True)
    report = TourReport(profile, n, seed, out)

    log(f"generating {n} {profile} samples (seed {seed})")
    t0 = time.perf_counter()
    samples = [shard_layout(s) for s in generate(profile, n, seed)]
    report.generate_rate = n / max(time.perf_counter() - t0, 1e-9)

    report.source_path = os.path.join(out, f"{profile}.jsonl")
    log(f"writing the raw source {report.source_path}")
    report.source_bytes = write_jsonl(report.source_path, profile, n, seed)

    log("writing shards and reading them back:")
    source = None
    for name in formats:
        result = _tour_format(name, samples, out, source, log)
        report.formats.append(result)
        if source is None and result.status == "ok":
            source = os.path.join(out, name)
    return report


def format_report(report: TourReport) -> str:
    """A :class:`TourReport` as a plain-text table."""

    def rate(v):
        return "-" if v is None else f"{v:,.0f}"

    lines = [
        f"demo: {report.n} {report.profile} samples, seed {report.seed}, in {report.out}",
        f"generated at {report.generate_rate:,.0f} samples/s; raw source "
        f"{report.source_bytes / 1e6:.1f} MB ({os.path.basename(report.source_path)}"
        + (f", {'/'.join(BYTES_FIELDS[report.profile])} as base64)"
           if BYTES_FIELDS[report.profile] else ")"),
        "",
    ]
    header = ("format", "write/s", "MB", "iterate/s", "shuffled/s", "sort s", "split", "check",
              "written with")
    rows = [header]
    notes = []
    for r in report.formats:
        if r.status == "ok":
            rows.append((
                r.format,
                rate(r.write_rate),
                f"{r.size_bytes / 1e6:.1f}",
                rate(r.iterate_rate),
                rate(r.shuffle_rate),
                f"{r.sort_seconds:.3f}",
                r.split,
                "byte-exact",
                r.detail,
            ))
        else:
            rows.append((r.format, "-", "-", "-", "-", "-", "-", r.status.upper(), ""))
            notes.append(f"{r.format}: {r.status}: {r.detail}")
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    for row in rows:
        cells = (
            [row[0].ljust(widths[0])]
            + [v.rjust(w) for v, w in zip(row[1:-1], widths[1:-1])]
            + [row[-1]]
        )
        lines.append("  ".join(cells).rstrip())
    lines.extend(["", *notes] if notes else [])
    return "\n".join(lines)
