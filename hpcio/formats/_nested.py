"""Fields that take several members of a WebDataset-style tar: lists of bytes and
mappings holding bytes.

A tar member holds one value, so a sample's nested binaries are spread over members
whose names say where each one belongs, in the layout the ``webdataset`` library reads
as it is (each member is decoded by its last extension):

* a list of bytes ``images`` becomes ``KEY.images.0.jpg``, ``KEY.images.1.jpg``, ... (the
  extension sniffed from each item, ``bin`` when it is not an image); an empty list is
  the JSON member ``KEY.images.json`` holding ``[]``;
* a mapping ``meta`` holding bytes at its first level becomes ``KEY.meta.json`` (the
  mapping without its bytes) and one member ``KEY.meta.<key>.<ext>`` per bytes value.

Reading groups the members back: ``images.<i>`` fields holding bytes, numbered ``0..n-1``
with no ``images`` field beside them, become the list ``images``; a ``meta.<key>`` field
holding bytes next to a JSON object ``meta`` goes into it.  Writers refuse the bytes
fields whose names would be read back so (``x.0``, ``meta.key`` beside a mapping
``meta``), so a sample written comes back equal.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UnsupportedValueError
from . import _values

__all__ = ["split_fields", "group_fields"]

_BINARY = (bytes, bytearray, memoryview)


def _is_index(text: str) -> bool:
    return text.isdigit() and text.isascii() and text == str(int(text))


def _check_names(sample: Mapping, sample_index, path) -> None:
    """Refuse the bytes fields that reading would group into a list or a mapping."""
    mappings = {k for k, v in sample.items() if isinstance(v, Mapping)}
    for name, value in sample.items():
        if not isinstance(name, str) or "." not in name or not isinstance(value, _BINARY):
            continue
        root = name.partition(".")[0]
        head, _, last = name.rpartition(".")
        if root in mappings:
            raise UnsupportedValueError(
                f"field {name!r} would be read back inside the mapping field {root!r}; rename it",
                path=path, sample=sample_index)
        if _is_index(last):
            raise UnsupportedValueError(
                f"field {name!r} would be read back as item {last} of a list {head!r}; rename it",
                path=path, sample=sample_index)


def _mapping_members(field: str, value: Mapping, sample_index, path) -> list[tuple[str, object]]:
    rest, binaries = {}, []
    for key, item in value.items():
        if not isinstance(item, _BINARY):
            rest[key] = item
            continue
        if not isinstance(key, str) or not key or "." in key or "/" in key:
            raise UnsupportedValueError(
                f"field {field!r}: key {key!r} holds bytes, stored as a member of its own, so it "
                "must be a non-empty str without '.' or '/'", path=path, sample=sample_index)
        binaries.append((f"{field}.{key}", item))
    nested = _values.bytes_inside(rest, field)
    if nested:
        raise UnsupportedValueError(
            f"field {field!r}: {nested} is bytes inside a list or mapping; WebDataset stores "
            "the bytes of a mapping one level deep only", path=path, sample=sample_index)
    return [(field, rest), *binaries]


def split_fields(sample: Mapping, *, sample_index=None, path=None) -> list[tuple[str, object]]:
    """``(field, value)`` pairs, one per member, of ``sample``'s fields (``__key__``
    excluded), in field-name order with list items in list order."""
    _check_names(sample, sample_index, path)
    out = []
    for field in sorted(k for k in sample if k != "__key__"):
        value = sample[field]
        if _values.is_bytes_list(value):
            out.extend((f"{field}.{j}", item) for j, item in enumerate(value))
        elif isinstance(value, Mapping) and any(isinstance(v, _BINARY) for v in value.values()):
            out.extend(_mapping_members(field, value, sample_index, path))
        else:
            out.append((field, value))
    return out


def group_fields(sample: dict) -> dict:
    """The inverse of :func:`split_fields` on decoded member fields (see the module doc)."""
    if not any("." in k for k in sample):
        return sample
    out: dict = {}
    items: dict[str, dict[int, object]] = {}
    for name, value in sample.items():
        if "." in name and isinstance(value, _BINARY):
            root, _, key = name.partition(".")
            if isinstance(sample.get(root), dict):
                continue  # merged below, once the mapping itself is in place
            head, _, last = name.rpartition(".")
            if _is_index(last) and head not in sample:
                items.setdefault(head, {})[int(last)] = value
                continue
        out[name] = value
    for name, value in sample.items():
        root, dot, key = name.partition(".")
        if dot and isinstance(value, _BINARY) and isinstance(sample.get(root), dict):
            out[root] = {**out[root], key: value}
    for head, numbered in items.items():
        if sorted(numbered) == list(range(len(numbered))):
            out[head] = [numbered[j] for j in range(len(numbered))]
        else:  # not a list this layout wrote: the members keep their names
            out.update((f"{head}.{j}", v) for j, v in numbered.items())
    return out
