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
         "images": [b"\\xff\\xd8...", ...]}             # 1-4 JPEGs, 30-150 KB each, raw bytes

    ``messages`` is the Hugging Face chat layout; turns alternate user/assistant,
    start with the user (whose first turn holds one ``<image>`` placeholder per image)
    and end with the assistant.  Images are 336-640 pixels a side, smooth colour fields with
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
``bytes`` values are ``data:image/jpeg;base64,...`` URLs (standard base64 with padding,
RFC 4648 section 4): the ``vlm`` profile's ``images`` is a list of them.  The JSON Lines
source of ``hpcio convert`` decodes media data URLs by default, so its images convert to
bytes with no option;
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

from .jsonl import read_jsonl, write_jsonl
from .samples import BYTES_FIELDS, IMAGES_PER_SAMPLE, JPEG_BYTES, PROFILES, TEXT_BYTES, generate, make_sample
from .tour import DEFAULT_COUNTS, TOUR_FORMATS, FormatResult, TourReport, format_report, tour

__all__ = [
    "PROFILES",
    "BYTES_FIELDS",
    "TEXT_BYTES",
    "JPEG_BYTES",
    "IMAGES_PER_SAMPLE",
    "generate",
    "make_sample",
    "write_jsonl",
    "read_jsonl",
    "TOUR_FORMATS",
    "DEFAULT_COUNTS",
    "FormatResult",
    "TourReport",
    "tour",
    "format_report",
]
