"""Whole-buffer codecs, one place for every format.

Formats name their compressions differently (MDS says ``zstd``/``gz``/``br`` and means
raw snappy by ``snappy``; JINX says ``zst``/``gz``/``br`` and means the snappy *framing*
format), so each format module keeps its own name table and maps it onto the codecs
here.  zstd and blosc2 go through the compiled kernels; the others through the standard
library or their optional packages, imported on first use with an error saying what to
install.  Every ``decompress`` takes a ``limit`` so a hostile value cannot exhaust memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ._struct import Struct
from .errors import (
    DecodeError,
    DecompressionLimitError,
    HpcioError,
    InvalidArgumentError,
    MissingDependencyError,
    OutOfMemoryError,
)
from .units import parse_bytes

__all__ = ["Codec", "get_codec", "codec_names", "split_level", "DEFAULT_LIMIT", "MAX_DECODED_ENV",
           "max_decoded_bytes"]

DEFAULT_LIMIT = 1 << 30  # 1 GiB per read: larger than any sane sample, small enough to fail safely
MAX_DECODED_ENV = "HPCIO_MAX_DECODED_BYTES"


def max_decoded_bytes(value=None) -> int:
    """The most bytes one read may decompress: one value, or all the values of one batch
    together, checked against the sizes the data declares before allocating.

    ``value`` is the readers' ``max_decoded_bytes`` option (a byte size such as ``"4GiB"``);
    None takes ``$HPCIO_MAX_DECODED_BYTES``, else :data:`DEFAULT_LIMIT`.
    """
    if value is not None:
        return parse_bytes(value, what="max_decoded_bytes")
    env = os.environ.get(MAX_DECODED_ENV)
    return DEFAULT_LIMIT if env is None else parse_bytes(env, what=MAX_DECODED_ENV)


class Codec(Struct):
    """A named codec: ``compress(data, level)`` and ``decompress(data, limit, **where)``;
    the codecs whole files are compressed with (zstd, gzip) also ``decompress_file``."""

    _fields = ("name", "default_level", "_compress", "_decompress", "_decompress_file")
    _defaults = {"_decompress_file": None}
    __slots__ = _fields
    name: str
    default_level: int | None
    _compress: Callable
    _decompress: Callable
    _decompress_file: Callable | None

    def compress(self, data, level: int | None = None, **options) -> bytes:
        """``options`` are codec-specific: zstd takes ``content_size=False`` to leave the
        size out of the frame header, as streaming compressors (and JINX files) do, and
        ``checksum=True`` to end the frame with a checksum its decoders verify."""
        return self._compress(data, self.default_level if level is None else level, **options)

    def decompress(self, data, limit: int = DEFAULT_LIMIT, *, path=None, offset=None, sample=None) -> bytes:
        try:
            out = self._decompress(data, limit)
        except (DecodeError, MissingDependencyError, OutOfMemoryError) as exc:
            if exc.path is None and (path is not None or sample is not None):
                raise type(exc)(str(exc), path=path, offset=offset, sample=sample) from exc
            raise
        except MemoryError as exc:  # the process's memory, not the data, is at fault
            raise OutOfMemoryError(
                f"out of memory decompressing a {self.name} value of {len(data)} bytes "
                f"(decompressed size limit {limit} bytes)", path=path, offset=offset, sample=sample
            ) from exc
        except Exception as exc:  # each library raises its own error type
            raise DecodeError(
                f"{self.name} decompression failed: {exc}", path=path, offset=offset, sample=sample
            ) from exc
        return out

    def decompress_file(self, src, dst, limit: int = DEFAULT_LIMIT, *, path=None) -> int:
        """Decompress the rest of the file ``src`` into the file ``dst`` (both opened in
        binary mode, ``dst`` with nothing buffered), a few MiB at a time, so a file
        larger than memory decompresses; returns the bytes written.  Errors are those of
        :meth:`decompress`, located at ``path``."""
        if self._decompress_file is None:
            raise InvalidArgumentError(f"{self.name} files cannot be decompressed a part at a time; "
                                       "zstd and gzip can")
        try:
            return self._decompress_file(src, dst, limit, path)
        except HpcioError as exc:
            if exc.path is None and path is not None:
                raise type(exc)(str(exc), path=path) from exc
            raise
        except OSError:
            raise
        except Exception as exc:  # zlib.error and the like
            raise DecodeError(f"{self.name} decompression failed: {exc}", path=path) from exc


def _over(name: str, limit: int) -> DecompressionLimitError:
    return DecompressionLimitError(f"{name} value decompresses to more than the limit of {limit} bytes")


def _optional(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"this compression needs the {package!r} package: pip install {package} "
            "(or pip install 'hpcio[codecs]')"
        ) from exc


# --- zstd and blosc2: compiled kernels ------------------------------------------------
def _zstd_compress(data, level, content_size=True, checksum=False):
    from ._core import _codecs

    return _codecs.zstd_compress(data, level, content_size, checksum)


def _zstd_decompress(data, limit):
    from ._core import _codecs

    return _codecs.zstd_decompress(data, limit)


def _zstd_decompress_file(src, dst, limit, path):
    from ._core import _codecs

    return _codecs.zstd_decompress_file(src.fileno(), dst.fileno(), limit, path=path)


def _blosc2_compress(data, level):
    from ._core import _codecs

    return _codecs.blosc2_compress(data, "zstd", level, 1, 1)


def _blosc2_decompress(data, limit):
    from ._core import _codecs

    return _codecs.blosc2_decompress(data, limit)


# --- stdlib streams, bounded with max_length --------------------------------------------
def _bounded(decompressor, data, limit, name):
    out = decompressor.decompress(bytes(data), limit + 1)
    if len(out) > limit:
        raise _over(name, limit)
    if not decompressor.eof:
        raise DecodeError(f"{name} stream is truncated")
    return out


def _gzip_compress(data, level):
    # mtime=0 and no file name keep output deterministic (equal input, equal bytes).
    import gzip

    return gzip.compress(bytes(data), compresslevel=level, mtime=0)


# Output of one step of a decompression a part at a time.
_PIECE_BYTES = 4 << 20


# zlib, bz2 and lzma are imported where used: most datasets need none of them, and
# opening one should not pay for loading them.
def _gzip_pieces(read, limit):
    """The decompressed bytes of the gzip members that ``read(n)`` returns (``b""`` at the
    end), in pieces of at most 4 MiB; members written one after the other (``cat a.gz
    b.gz``, bgzip) decompress one after the other, as gzip(1) does."""
    import zlib

    member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    total, data = 0, read(_PIECE_BYTES)
    while data:
        out = member.decompress(data, _PIECE_BYTES)
        total += len(out)
        if total > limit:
            raise _over("gzip", limit)
        if out:
            yield out
        if member.eof:
            # The next member, if any (with max_length, unconsumed_tail repeats unused_data).
            data = member.unused_data or read(_PIECE_BYTES)
            if data:
                member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        else:
            data = member.unconsumed_tail or read(_PIECE_BYTES)
    if not member.eof:
        raise DecodeError("gzip stream is truncated")


def _gzip_decompress(data, limit):
    import io

    return b"".join(_gzip_pieces(io.BytesIO(bytes(data)).read, limit))


def _gzip_decompress_file(src, dst, limit, path):
    written = 0
    for piece in _gzip_pieces(src.read, limit):
        dst.write(piece)
        written += len(piece)
    return written


def _bz2_compress(data, level):
    import bz2

    return bz2.compress(bytes(data), level)


def _bz2_decompress(data, limit):
    import bz2

    return _bounded(bz2.BZ2Decompressor(), data, limit, "bz2")


def _xz_compress(data, level):
    import lzma

    return lzma.compress(bytes(data), preset=level)


def _xz_decompress(data, limit):
    import lzma

    return _bounded(lzma.LZMADecompressor(), data, limit, "xz")


# --- optional packages ------------------------------------------------------------------
def _brotli_compress(data, level):
    return _optional("brotli", "brotli").compress(bytes(data), quality=level)


def _brotli_decompress(data, limit):
    brotli = _optional("brotli", "brotli")
    dec = brotli.Decompressor()
    try:  # brotli >= 1.1 can bound each call's output
        out = dec.process(bytes(data), output_buffer_limit=limit + 1)
    except TypeError:
        out = dec.process(bytes(data))
    if len(out) > limit:
        raise _over("brotli", limit)
    if not dec.is_finished():
        raise DecodeError("brotli stream is truncated")
    return out


def _snappy_raw_compress(data, level):
    return _optional("snappy", "python-snappy").compress(bytes(data))


def _snappy_raw_decompress(data, limit):
    snappy = _optional("snappy", "python-snappy")
    # The raw format starts with the uncompressed length as a varint: check it first.
    n = shift = 0
    for byte in bytes(data[:10]):
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    if n > limit:
        raise _over("snappy", limit)
    return snappy.decompress(bytes(data))


def _snappy_framed_compress(data, level):
    snappy = _optional("snappy", "python-snappy")
    return snappy.StreamCompressor().compress(bytes(data))


def _snappy_framed_decompress(data, limit):
    snappy = _optional("snappy", "python-snappy")
    # The decompressor keeps an incomplete last chunk for a next call and returns what it
    # has: a value whose chunks do not end exactly at its end is truncated, not shorter.
    data, at = bytes(data), 0
    while at + 4 <= len(data):
        at += 4 + int.from_bytes(data[at + 1:at + 4], "little")
    if at != len(data):
        raise DecodeError("snappy stream is truncated")
    out = snappy.StreamDecompressor().decompress(data)
    if len(out) > limit:
        raise _over("snappy", limit)
    return out


def _lz4_compress(data, level):
    frame = _optional("lz4.frame", "lz4")
    return frame.compress(bytes(data), compression_level=level, store_size=True)


def _lz4_decompress(data, limit):
    frame = _optional("lz4.frame", "lz4")
    info = frame.get_frame_info(bytes(data[:32]))
    if info.get("content_size", 0) > limit:
        raise _over("lz4", limit)
    dec = frame.LZ4FrameDecompressor()
    out = dec.decompress(bytes(data), max_length=limit + 1)
    if len(out) > limit:
        raise _over("lz4", limit)
    if not dec.eof:
        raise DecodeError("lz4 stream is truncated")
    return out


_CODECS = {
    c.name: c
    for c in (
        Codec("zstd", 3, _zstd_compress, _zstd_decompress, _zstd_decompress_file),
        Codec("blosc2", 5, _blosc2_compress, _blosc2_decompress),
        Codec("gzip", 9, _gzip_compress, _gzip_decompress, _gzip_decompress_file),
        Codec("bz2", 9, _bz2_compress, _bz2_decompress),
        Codec("xz", None, _xz_compress, _xz_decompress),
        Codec("brotli", 11, _brotli_compress, _brotli_decompress),
        Codec("snappy-raw", None, _snappy_raw_compress, _snappy_raw_decompress),
        Codec("snappy-framed", None, _snappy_framed_compress, _snappy_framed_decompress),
        Codec("lz4-frame", 0, _lz4_compress, _lz4_decompress),
    )
}


def codec_names() -> list[str]:
    return list(_CODECS)


def get_codec(name: str) -> Codec:
    """The codec called ``name`` (a name from :func:`codec_names`)."""
    try:
        return _CODECS[name]
    except KeyError:
        raise DecodeError(f"unknown codec {name!r}; known: {', '.join(_CODECS)}") from None


def split_level(spec: str) -> tuple[str, int | None]:
    """``"zstd:7"`` -> ``("zstd", 7)``; ``"zstd"`` -> ``("zstd", None)``.

    >>> split_level("zstd:7"), split_level("gz")
    (('zstd', 7), ('gz', None))
    """
    name, sep, level = spec.partition(":")
    if not sep:
        return name, None
    try:
        return name, int(level)
    except ValueError:
        raise InvalidArgumentError(f"bad compression level in {spec!r}: expected an integer after ':'") from None

