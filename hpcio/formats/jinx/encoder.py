"""Turning samples into the JSON objects of JINX lines, as mldataforge's writer would.

:class:`Encoder` encodes a sample's values by the writer's settings; :class:`Passthrough`
re-writes a lazy sample read from JINX, copying stored bytes wherever the destination
would store them the same way.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ...errors import UnsupportedValueError
from .sample import JinxSample
from .values import COMPRESSIONS, NUMPY_SCALARS, TYPE_EXTS, TYPED_LIST, canonical_compression, compress

if TYPE_CHECKING:
    from .writer import Options, ShardWriter

class Encoder:
    """Turns one sample into the JSON object mldataforge's writer would produce."""

    def __init__(self, opts: Options, shard: ShardWriter, sample: int):
        self.o = opts
        self.shard = shard
        self.index = sample

    def fail(self, key, message):
        raise UnsupportedValueError(f"field {key!r}: {message}", path=self.shard.path, sample=self.index)

    def sample(self, sample: Mapping) -> dict:
        return self.mapping(sample, "")

    def mapping(self, m: Mapping, prefix: str) -> dict:
        out = {}
        sep = self.o.ext_sep
        for key, val in m.items():
            if type(key) is not str:
                self.fail(prefix + str(key), f"keys must be str, got {type(key).__name__}")
            if sep in key:
                self.fail(prefix + key, f"key contains the suffix separator {sep!r}; mldataforge "
                          "would read it as a type suffix (rename the key)")
            stored, ext = self.value(val, prefix + key)
            out[f"{key}{sep}{ext}" if ext else key] = stored
        return out

    def value(self, v, key):
        t = type(v)
        if t is str:
            if len(v) < self.o.short_limit:
                return v, None
            return self.store(v.encode("utf-8"), "str")
        if t is int or t is bool or v is None:
            if t is int and not -(1 << 63) <= v < (1 << 64):
                self.fail(key, f"integer {v} does not fit in 64 bits (JSON readers reject it)")
            return v, None
        if isinstance(v, float):  # np.float64 included: mldataforge stores it as a plain float
            if not math.isfinite(v):
                self.fail(key, f"non-finite float {v} (JSON would store null)")
            return float(v), None
        if isinstance(v, (bytes, bytearray, memoryview)):
            return self.store(bytes(v), "raw")
        if isinstance(v, Mapping):
            return self.mapping(v, key + "/"), None
        if isinstance(v, (list, tuple)):
            if needs_typed_list(v):
                return self.typed_list(v, key), TYPED_LIST
            return self.sequence(v, key), None
        if isinstance(v, str):
            return self.value(str(v), key)
        if isinstance(v, int):
            return self.value(int(v), key)
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                self.fail(key, "numpy arrays of Python objects cannot be stored (.npy refuses pickles)")
            buf = io.BytesIO()
            np.save(buf, v, allow_pickle=False)
            return self.store(buf.getvalue(), "npy")
        if isinstance(v, np.generic):
            name = str(v.dtype)
            if name not in NUMPY_SCALARS:
                self.fail(key, f"numpy {name} scalars cannot be stored: mldataforge cannot read them "
                          "back; convert with .item() or store np.asarray(x) (an .npy array)")
            item = v.item()
            if isinstance(item, float) and not math.isfinite(item):
                self.fail(key, f"non-finite {name} {item} (JSON would store null)")
            return item, name
        if type(v).__module__.startswith("torch") and type(v).__name__ in ("Tensor", "Parameter"):
            import torch

            buf = io.BytesIO()
            torch.save(v, buf)
            return self.store(buf.getvalue(), "pt")
        self.fail(key, f"{type(v).__name__} values cannot be stored in JINX")

    def sequence(self, items, key) -> list:
        # mldataforge drops the type suffix of list items, so only values that need no
        # suffix may appear in a list; long strings are kept verbatim for the same reason
        out = []
        for j, v in enumerate(items):
            where = f"{key}[{j}]"
            t = type(v)
            if t is str or t is int or t is bool or v is None:
                if t is int and not -(1 << 63) <= v < (1 << 64):
                    self.fail(where, f"integer {v} does not fit in 64 bits")
                out.append(v)
            elif isinstance(v, float):
                if not math.isfinite(v):
                    self.fail(where, f"non-finite float {v} (JSON would store null)")
                out.append(float(v))
            elif isinstance(v, Mapping):
                out.append(self.mapping(v, where + "/"))
            elif isinstance(v, (list, tuple)):
                out.append(self.sequence(v, where))
            elif isinstance(v, str):
                out.append(str(v))
            elif isinstance(v, int) and not isinstance(v, np.generic):
                out.append(int(v))
            else:
                self.fail(where, f"{type(v).__name__} items cannot be stored in a list: "
                          "mldataforge reads list items back without their type (store them "
                          "under separate keys, or as one numpy array)")
        return out

    def typed_list(self, items, key) -> list:
        """A list holding values that need a type suffix (bytes, arrays, ...): each item
        stored as a one-key object ``{suffix: stored}`` (``""`` for a value with none),
        the list's key suffixed ``list``.  hpcio's extension: mldataforge drops the
        suffixes of list items and would read bytes back as their base85 text."""
        out = []
        for j, v in enumerate(items):
            stored, ext = self.value(v, f"{key}[{j}]")
            out.append({ext or "": stored})
        return out

    def store(self, data: bytes, ext: str):
        """Compress, then place in the sidecar or inline: the stored value and its suffix."""
        o = self.o
        comp = None
        if o.compression is not None and len(data) >= o.compress_threshold:
            c = compress(o.compression, data)
            if len(c) <= o.compress_ratio * len(data):
                data, comp = c, o.compression
        return self.place(data, ext, comp)

    def place(self, data, ext: str, comp):
        o = self.o
        exts = [ext, comp] if comp else [ext]
        if o.binary_threshold is not None and len(data) > o.binary_threshold:
            exts.append("bin")
            return self.shard.store_bin(data), o.ext_sep.join(exts)
        if exts == ["str"]:
            return str(data, "utf-8"), None
        if o.encoding is None:
            raise UnsupportedValueError(
                f"a {len(data)}-byte value is not above binary_threshold={o.binary_threshold}, "
                "so it would be stored inline, and encoding=None has no text encoding for it "
                "(lower binary_threshold, or choose an encoding)", path=self.shard.path,
                sample=self.index)
        return o.encode(data), o.ext_sep.join(exts)


def needs_typed_list(items) -> bool:
    """Whether a list holds a value (at any depth of nested lists) that a plain JSON
    array cannot keep: what :meth:`Encoder.sequence` refuses."""
    for v in items:
        t = type(v)
        if t is str or t is int or t is bool or v is None or isinstance(v, (float, Mapping)):
            continue
        if isinstance(v, (list, tuple)):
            if needs_typed_list(v):
                return True
            continue
        if isinstance(v, (str, int)) and not isinstance(v, np.generic):
            continue
        return True
    return False


class Passthrough(Encoder):
    """Re-writes a lazy sample, copying stored bytes without decoding where valid.

    A stored value is copied (its compressed bytes, or its base text when the
    encodings agree, or its sidecar blob) when the destination would compress it the
    same way; otherwise it is decoded and encoded again with the destination rules.
    Placement (inline or sidecar) is always decided again from the stored size, and
    inline text is re-encoded when the encodings differ (mldataforge copies it
    verbatim and corrupts the values).
    """

    def __init__(self, opts: Options, shard: ShardWriter, source: JinxSample, index: int):
        super().__init__(opts, shard, index)
        self.src = source._shard
        self.src_index = source._sample
        self.same_settings = _compression_settings(self.src.footer) == opts.settings()

    def sample(self, raw: Mapping) -> dict:
        return self.raw_mapping(raw)

    def raw_mapping(self, raw: Mapping) -> dict:
        out = {}
        src, sep = self.src, self.o.ext_sep
        for rk, v in raw.items():
            logical, exts = src.plan(rk)
            if not exts:
                if type(v) is dict:
                    out[logical] = self.raw_mapping(v)
                elif type(v) is list:
                    out[logical] = self.raw_list(v)
                else:
                    stored, ext = self.value(v, logical)
                    out[f"{logical}{sep}{ext}" if ext else logical] = stored
                continue
            stored, ext = self.copy(rk, v, exts)
            out[f"{logical}{sep}{ext}" if ext else logical] = stored
        return out

    def raw_list(self, items):
        return [
            self.raw_mapping(v) if type(v) is dict else self.raw_list(v) if type(v) is list else v
            for v in items
        ]

    def copy(self, rk, v, exts):
        src = self.src
        last = exts[-1]
        if last in NUMPY_SCALARS:
            src.decode(rk, v, self.src_index)  # a value out of its type's range cannot be written
            return v, self.o.ext_sep.join(exts)
        in_bin = last == "bin"
        body = exts[:-1] if in_bin else exts
        comp = body[-1] if body and body[-1] in COMPRESSIONS else None
        kind = body[0] if body else None
        if kind not in TYPE_EXTS or len(body) > 2 or (len(body) == 2 and comp is None):
            return self.value(src.decode(rk, v, self.src_index), rk)
        if comp is not None:
            # lzma and xz name the same XZ container
            ok = COMPRESSIONS[comp] == COMPRESSIONS.get(self.o.compression)
        else:
            ok = self.o.compression is None or self.same_settings
        if not ok:
            return self.value(src.decode(rk, v, self.src_index), rk)
        o = self.o
        if in_bin:
            data = src.sidecar_view(v, rk, self.src_index, src.offsets[self.src_index])
        elif (isinstance(v, str) and o.encoding == src.encoding and o.binary_threshold is None
              and not (kind == "str" and comp is None)):
            return v, o.ext_sep.join(body)  # same text, same place: copy verbatim
        elif isinstance(v, str):
            data = src.decode_inline(v, rk, self.src_index, src.offsets[self.src_index])
        else:
            return self.value(src.decode(rk, v, self.src_index), rk)
        if kind == "str" and comp is None:
            text = src.unserialize(rk, data, body, self.src_index, src.offsets[self.src_index])
            return self.value(text, rk)
        return self.place(data, kind, comp)


def _compression_settings(footer: dict) -> tuple | None:
    """A source footer's ``(compression, threshold, ratio)``; None when it names no codec
    hpcio knows (a damaged footer: nothing is then copied on the strength of it)."""
    try:
        compression = canonical_compression(footer.get("compression"))
    except ValueError:
        return None
    return compression, footer.get("compress_threshold"), footer.get("compress_ratio")
