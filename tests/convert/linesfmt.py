"""A small real format used to test the converter independently of the shipped ones.

``lines``: a source is one file of JSON objects, one per line; a dataset written by the
converter is a directory of ``part-NNNNN.lines`` files plus ``index.json``.  A field
whose name ends in ``.b64`` holds base64 and is decoded on read (so a bad base64 value
is a decode error, like a corrupt binary field in JINX).  It implements the
sharded-writing hook of :mod:`hpcio.formats.base` (``Writer(shard_id=...)``,
``index_part``, ``merge_index``) and ``Reader.sample_nbytes``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import sys

import numpy as np

from hpcio.errors import DecodeError
from hpcio.formats.base import Reader as BaseReader, Writer as BaseWriter
from hpcio.registry import Capabilities, register_format

NAME = "lines"
CAPABILITIES = Capabilities(random_access=True)


def sniff(path) -> bool:
    path = os.fspath(path)
    if os.path.isdir(path):
        return os.path.exists(os.path.join(path, "index.json")) and any(
            n.endswith(".lines") for n in os.listdir(path)
        )
    return path.endswith(".lines")


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        with open(os.path.join(path, "index.json")) as f:
            return [os.path.join(path, s["file"]) for s in json.load(f)["shards"]]
    return [path]


class Reader(BaseReader):
    def __init__(self, path, **options):
        super().__init__(path)
        self._blobs = []
        self._starts = []  # (file index, start, end) per sample
        for fi, name in enumerate(_files(self.path)):
            with open(name, "rb") as f:
                data = f.read()
            self._blobs.append((name, data))
            pos = 0
            while pos < len(data):
                end = data.find(b"\n", pos)
                end = len(data) if end < 0 else end + 1
                self._starts.append((fi, pos, end))
                pos = end

    def __len__(self):
        return len(self._starts)

    def sample_nbytes(self, start=0, stop=None):
        return np.array([e - s for _, s, e in self._starts[start:stop]], dtype=np.int64)

    def read(self, i, fields=None):
        i = self.check_index(i)
        fi, start, end = self._starts[i]
        name, data = self._blobs[fi]
        try:
            obj = json.loads(data[start:end])
        except ValueError as exc:
            raise DecodeError(f"bad JSON: {exc.args[0]}", path=name, offset=start, sample=i) from exc
        out = {}
        for key, value in obj.items():
            if key.endswith(".b64"):
                try:
                    value = base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError) as exc:
                    raise DecodeError(f"bad base64 in field {key!r}: {exc}", path=name, offset=start, sample=i) from exc
                key = key[:-4]
            out[key] = value
        if fields is not None:
            out = {f: out[f] for f in fields}
        return out


def _encode(sample) -> bytes:
    obj = {}
    for key, value in sample.items():
        if isinstance(value, (bytes, bytearray, memoryview)):
            obj[key + ".b64"] = base64.b64encode(bytes(value)).decode()
        else:
            obj[key] = value
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n"


class Writer(BaseWriter):
    def __init__(self, path, shard_id=None, num_shards=None, compression=None, **options):
        super().__init__(path)
        if compression is not None:
            raise ValueError(f"the lines format has no compression {compression!r}")
        os.makedirs(self.path, exist_ok=True)
        self.shard_id = 0 if shard_id is None else shard_id
        self.standalone = shard_id is None
        self.name = f"part-{self.shard_id:05d}.lines"
        self._file = open(os.path.join(self.path, self.name), "wb")

    def write(self, sample):
        self._file.write(_encode(sample))  # encodes fully before writing: all or nothing
        self.count += 1

    def close(self):
        if self._file.closed:
            return
        self._file.close()
        if self.standalone:
            merge_index(self.path, [self.index_part()])

    def abort(self):
        self._file.close()
        os.remove(os.path.join(self.path, self.name))

    def index_part(self):
        return {"file": self.name, "samples": self.count}


def merge_index(directory, parts, **options):
    tmp = os.path.join(directory, "index.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"shards": list(parts)}, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, "index.json"))


register_format(sys.modules[__name__])
