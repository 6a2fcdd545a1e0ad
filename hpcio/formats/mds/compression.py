"""MDS compression names and the hashes ``index.json`` records for each file.

A ``compression`` value names a whole-shard codec (``zstd:7``: the shard file is
compressed, ``zip_data`` describes it) or, as mldataforge writes it, a per-record one
(``sample::zstd``: each record is compressed alone inside an uncompressed shard).
"""

from __future__ import annotations

import functools

from ... import codecs as _codec_table
from ..._struct import Struct
from ...errors import CorruptShardError, InvalidArgumentError

__all__ = ["Compression", "parse_compression", "DEFAULT_HASHES"]


class Compression(Struct):
    """A parsed MDS ``compression`` value.

    ``spec`` is the string written to ``index.json``; ``name`` the MDS family (``zstd``,
    ``gz``, ...; also the shard file extension); ``codec`` the :mod:`hpcio.codecs` name;
    ``per_sample`` is True for ``sample::<algo>`` (each record compressed on its own).
    """

    _fields = ("spec", "name", "codec", "level", "per_sample")
    __slots__ = _fields
    spec: str
    name: str
    codec: str
    level: int | None
    per_sample: bool

    def compress(self, data, *, checksum: bool = False) -> bytes:
        """``checksum``: end a zstd frame with the checksum of its content, which every
        zstd decoder verifies (other codecs have no such field and ignore it)."""
        options = {"checksum": True} if checksum and self.codec == "zstd" else {}
        return _codec_table.get_codec(self.codec).compress(data, self.level, **options)

    def decompress(self, data, limit: int, *, path=None, offset=None, sample=None) -> bytes:
        return _codec_table.get_codec(self.codec).decompress(
            data, limit, path=path, offset=offset, sample=sample
        )


# family -> (codec, allowed levels or None when the family takes no level)
_FAMILIES = {
    "zstd": ("zstd", range(1, 23)),
    "gz": ("gzip", range(0, 10)),
    "bz2": ("bz2", range(1, 10)),
    "br": ("brotli", range(0, 12)),
    "snappy": ("snappy-raw", None),
}
_SAMPLE_ONLY = {"blosc2": ("blosc2", range(0, 10))}
_ALIASES = {"gzip": "gz", "brotli": "br"}  # the spellings mldataforge's CLI accepts


def parse_compression(spec: str | None) -> Compression | None:
    """Parse an MDS compression value (``None``, ``"zstd:7"``, ``"sample::zstd"``, ...).

    >>> parse_compression("sample::zstd:7")
    Compression(spec='sample::zstd:7', name='zstd', codec='zstd', level=7, per_sample=True)
    >>> parse_compression("gzip").spec
    'gz'
    """
    if spec is None or spec == "":
        return None
    if not isinstance(spec, str):
        raise InvalidArgumentError(f"MDS compression {spec!r} is not a string")
    per_sample = spec.startswith("sample::")
    body = spec[len("sample::") :] if per_sample else spec
    name, sep, level_text = body.partition(":")
    name = _ALIASES.get(name, name)
    families = {**_FAMILIES, **_SAMPLE_ONLY} if per_sample else _FAMILIES
    if name not in families:
        known = ", ".join(sorted(_FAMILIES)) + ", sample::<any of these>, sample::blosc2"
        raise InvalidArgumentError(f"unknown MDS compression {spec!r}; known: {known}")
    codec, levels = families[name]
    level = None
    if sep:
        try:
            level = int(level_text)
        except ValueError:
            raise InvalidArgumentError(f"bad compression level in {spec!r}: expected an integer") from None
        if levels is None or level not in levels:
            allowed = "none" if levels is None else f"{levels.start}..{levels.stop - 1}"
            raise InvalidArgumentError(f"compression level {level} is not valid for {name} (levels: {allowed})")
    canonical = name + (f":{level}" if sep else "")
    return Compression(("sample::" if per_sample else "") + canonical, name, codec, level, per_sample)


@functools.cache
def _hash_functions() -> dict:
    """Hash constructors by algorithm name (imported on first use: opening a dataset
    without hash validation needs none)."""
    import hashlib

    import xxhash

    funcs = {
        algo: getattr(hashlib, algo)
        for algo in hashlib.algorithms_available
        if hasattr(hashlib, algo) and not algo.startswith("shake_")
    }
    for algo in xxhash.algorithms_available:
        funcs[algo] = getattr(xxhash, algo)
    return funcs


# What writers record for every file unless told otherwise: streaming's reader knows it
# (``validate_hash="xxh3_64"``), it hashes faster than the disk writes, and it is the
# digest parallel conversion already takes of every file it publishes.
DEFAULT_HASHES = ("xxh3_64",)

# Preferred order when the reader picks one hash to validate with: fastest first.
_FAST_HASHES = ("xxh3_64", "xxh64", "xxh3_128", "xxh128", "xxh32", "md5", "sha1")


def _digest(algo: str, data, path: str) -> str:
    """The ``algo`` digest of ``data``, read from ``path``, whose ``index.json`` names
    ``algo``: a name no library knows is a corrupt index, not a lookup error."""
    func = _hash_functions().get(algo)
    if func is None:
        raise CorruptShardError(f"index.json names an unknown hash {algo!r}", path=path)
    return func(data).hexdigest()

