"""Image folders: ``root/<class>/<key>.<ext>``, the label taken from the folder name.

This is the layout of torchvision's ``ImageFolder`` (and of ImageNet's train split).
Other fields of a sample sit next to its image as ``<key>.<field>.<ext>`` files named
like WebDataset members (``.txt`` str, ``.json`` JSON, ``.cls`` int, ``.npy`` arrays,
``.bin`` bytes), so an image folder is an unpacked WebDataset grouped by class.

Samples are ordered by class name, then key.  The writer also records every file and
its size in ``index.json``: readers then neither walk the tree (slow with millions of
files on a parallel filesystem) nor miss a truncated file.  Folders without the index
are walked.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence

from .._paths import check_relative_name, resolve_inside
from ..errors import (
    InvalidArgumentError,
    OptionError,
    PathEscapeError,
    SchemaError,
    ShardNotFoundError,
    TruncatedShardError,
    UnsupportedValueError,
)
from ..registry import Capabilities
from .base import Reader as _Reader, Verification, Writer as _Writer, files_bytes, inspect_report, remove_files
from .reports import InspectReport, VerifyReport
from .webdataset import decode_member, member_field, member_suffix, split_name

__all__ = ["NAME", "CAPABILITIES", "sniff", "Reader", "Writer", "IMAGE_EXTS", "inspect", "verify"]

NAME = "imagefolder"
CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=False)
INDEX = "index.json"
IMAGE_EXTS = {"jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm"}
_MAGIC = {b"\xff\xd8\xff": "jpg", b"\x89PNG\r\n\x1a\n": "png", b"GIF8": "gif", b"BM": "bmp"}


def _image_ext(data) -> str | None:
    head = bytes(data[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    for magic, ext in _MAGIC.items():
        if head.startswith(magic):
            return ext
    return None


def sniff(path) -> bool:
    path = os.fspath(path)
    if not os.path.isdir(path):
        return False
    if os.path.isfile(os.path.join(path, INDEX)):
        with open(os.path.join(path, INDEX), "rb") as f:
            return b'"imagefolder"' in f.read(256)
    for entry in os.scandir(path):
        if entry.is_dir():
            for sub in os.scandir(entry.path):
                if sub.name.rsplit(".", 1)[-1].lower() in IMAGE_EXTS:
                    return True
            return False
    return False


def _walk(root: str) -> list:
    """[(class, key, [(file name, size), ...]), ...] in class then key order."""
    samples = []
    for cls in sorted(e.name for e in os.scandir(root) if e.is_dir()):
        groups: dict[str, list] = {}
        for entry in os.scandir(os.path.join(root, cls)):
            if not entry.is_file():
                continue
            key, _suffix = split_name(entry.name)
            if key is not None:
                groups.setdefault(key, []).append((entry.name, entry.stat().st_size))
        samples += [(cls, key, sorted(files)) for key, files in sorted(groups.items())]
    return samples


class Reader(_Reader):
    """Samples of an image folder: ``image`` (bytes as stored), ``label`` and extras.

    Parameters
    ----------
    labels
        ``"name"`` (default): ``label`` is the folder name; ``"index"``: its position in
        the sorted class list (torchvision's ``class_to_idx``).
    """

    def __init__(self, path, labels: str = "name", **options):
        super().__init__(path)
        if labels not in ("name", "index"):
            raise InvalidArgumentError(f"labels must be 'name' or 'index', not {labels!r}")
        if not os.path.isdir(self.path):
            raise ShardNotFoundError("no image folder", path=self.path)
        index = os.path.join(self.path, INDEX)
        if os.path.isfile(index):
            with open(index, "rb") as f:
                meta = json.load(f)
            self.samples = [tuple(s[:2]) + ([tuple(x) for x in s[2]],) for s in meta["samples"]]
            self.classes = meta["classes"]
            self.verify_sizes = True
            _check_index_names(self.path, index, self.samples)
        else:
            self.samples = _walk(self.path)
            self.classes = sorted({s[0] for s in self.samples})
            self.verify_sizes = False
        self.class_to_idx = {c: k for k, c in enumerate(self.classes)}
        self.labels = labels

    def __len__(self) -> int:
        return len(self.samples)

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        i = self.check_index(i)
        cls, key, files = self.samples[i]
        label = cls if self.labels == "name" else self.class_to_idx[cls]
        out = {}
        for name, size in files:
            suffix = name[len(key) + 1 :]
            head, dot, ext = suffix.rpartition(".")
            field = "image" if not dot and ext.lower() in IMAGE_EXTS else None
            if fields is not None and field is not None and field not in fields:
                continue
            path = os.path.join(self.path, cls, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                raise ShardNotFoundError("image folder file is missing", path=path, sample=i) from None
            if self.verify_sizes and len(data) != size:
                raise TruncatedShardError(f"file holds {len(data)} bytes, the index says {size}",
                                          path=path, sample=i)
            if field is None:
                field, value = decode_member(suffix, data, path=path, sample=i)
            else:
                value = data
            if fields is None or field in fields:
                out[field] = value
        if fields is None or "label" in fields:
            out["label"] = label
        if fields is not None:
            return {f: out[f] for f in fields}
        return out


def _check_index_names(root: str, index: str, samples: list) -> None:
    """Refuse class folders and file names of ``index.json`` that lead outside ``root``
    (each class folder resolved once, file names checked as names)."""
    for cls in {s[0] for s in samples}:
        resolve_inside(root, cls, what="image folder class", source=index)
    for i, (cls, _key, files) in enumerate(samples):
        for name, _size in files:
            if not isinstance(name, str) or "/" in name:
                raise PathEscapeError(f"image folder file {name!r} is not a plain file name",
                                      path=index, sample=i)
            check_relative_name(f"{cls}/{name}", what="image folder file", source=index, sample=i)


class Writer(_Writer):
    """Writes ``path/<label>/<key>.<ext>`` files and ``index.json``.

    Every sample needs a ``label`` (str, the folder name); ``image`` bytes are written
    as given with the extension their magic bytes say (``.jpg``, ``.png``, ...).
    """

    def __init__(self, path, **options):
        super().__init__(path)
        if options:
            raise OptionError(f"unknown image folder writer options: {', '.join(options)}")
        self.created_dir = not os.path.exists(self.path)
        os.makedirs(self.path, exist_ok=True)
        self.samples: list = []
        self.created: list[str] = []

    def write(self, sample: Mapping) -> None:
        index = self.count
        label = sample.get("label")
        if not isinstance(label, str) or not label or "/" in label or label.startswith("."):
            raise SchemaError(f"image folder samples need a str 'label' naming a folder, got {label!r}",
                              path=self.path, sample=index)
        key = f"{index:09d}"
        folder = os.path.join(self.path, label)
        if not os.path.isdir(folder):
            os.makedirs(folder)
            self.created.append(folder)
        files = []
        for field in sorted(sample):
            if field == "label":
                continue
            value = sample[field]
            ext = _image_ext(value) if field == "image" and isinstance(value, (bytes, bytearray, memoryview)) else None
            if ext:
                name, data = f"{key}.{ext}", bytes(value)
            else:
                suffix, data = member_suffix(field, value, sample=index, path=self.path)
                name = f"{key}.{suffix}"
                if "." not in suffix and suffix.lower() in IMAGE_EXTS:
                    raise UnsupportedValueError(
                        f"field {field!r} would be read back as the image; name it 'image'",
                        path=self.path, sample=index)
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
            files.append((name, len(data)))
        self.samples.append((label, key, sorted(files)))
        self.count += 1

    def close(self) -> None:
        classes = sorted({s[0] for s in self.samples})
        order = sorted(range(len(self.samples)), key=lambda k: (self.samples[k][0], self.samples[k][1]))
        meta = {"format": "imagefolder", "classes": classes,
                "samples": [list(self.samples[k]) for k in order]}
        with self.aborting():
            with open(self._index_tmp(), "w") as f:
                json.dump(meta, f, ensure_ascii=False)
            os.replace(self._index_tmp(), os.path.join(self.path, INDEX))

    def _index_tmp(self) -> str:
        return os.path.join(self.path, INDEX + f".tmp.{os.getpid()}")

    def abort(self) -> None:
        for folder in self.created:
            shutil.rmtree(folder, ignore_errors=True)
        remove_files([self._index_tmp()])
        if self.created_dir:
            shutil.rmtree(self.path, ignore_errors=True)


# --- inspect and verify -----------------------------------------------------------------
def inspect(path) -> InspectReport:
    """Samples and classes of an image folder; ``fields`` are those of the first sample
    with the extensions of their files (``label`` is the class folder's name)."""
    with Reader(path) as r:
        fields = {}
        if r.samples:
            _cls, key, files = r.samples[0]
            for name, _size in files:
                suffix = name[len(key) + 1:]
                ext = suffix.rpartition(".")[2].lower()
                field = "image" if "." not in suffix and ext in IMAGE_EXTS else member_field(suffix)[0]
                fields[field] = ext
            fields["label"] = "str"
        files = [os.path.join(r.path, c, n) for c, _k, group in r.samples for n, _s in group]
        return inspect_report(NAME, path, samples=len(r), shards=len(files), fields=fields,
                              stored_bytes=files_bytes(files),
                              details={"classes": len(r.classes), "indexed": r.verify_sizes})


def verify(path, *, allow_pickle: bool = False, max_errors: int = 1000) -> VerifyReport:
    """Read every file of every sample, comparing its size with the one ``index.json``
    records, and decode the fields that are not images."""
    check = Verification(NAME, path, max_errors=max_errors)

    def open_reader():
        reader = Reader(path)
        check.report["shards"] = sum(len(files) for _c, _k, files in reader.samples)
        return reader

    return check.decode_dataset(open_reader)
