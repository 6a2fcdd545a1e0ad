"""The lazy JINX sample: a read-only Mapping that decodes a value when it is accessed."""

from __future__ import annotations

from collections.abc import Mapping

from ..._core import _jinx


class JinxSample(_jinx.LazySample, Mapping):
    """A lazy JINX sample: values are decoded when accessed, keys keep file order.

    Unlike mldataforge's ``LazyDict``, iteration gives the logical keys in the order
    they were written, and a decoded value is cached without changing the stored object,
    which :func:`join` copies without decoding.  Lists and objects with nothing to decode
    are returned as parsed, as a dict returns its values; once such a value (or a decoded
    array or JSON container) has been handed out, writers encode the sample as it now
    reads instead of copying it.  Item access, ``keys``, ``in``, iteration and ``len``
    are compiled (``hpcio._core._jinx.LazySample``); ``get``, ``items``, ``values`` and
    ``==`` are the Mapping ones.

    A sample pickles as a plain dict of its values as it now reads (nested lazy objects
    become dicts too): the mapped file it reads from cannot cross a process boundary, and
    a DataLoader worker must send decoded values back.
    """

    __slots__ = ()

    def raw_items(self):
        """``(stored key, stored value)`` pairs, still suffixed and encoded."""
        return self._raw.items()

    @property
    def sample_index(self) -> int:
        """The sample's position in its JINX file."""
        return self._sample

    def materialize(self) -> dict:
        """A plain dict with every value decoded (nested objects too)."""
        return self._shard.materialize(self._raw, self._sample)

    def __reduce__(self):
        return dict, (dict(self),)

    def __repr__(self):
        return f"JinxSample({self._raw!r})"
