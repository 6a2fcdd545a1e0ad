# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""JINX kernels: Ascii85/base64/hex decoding, the footer locator and the plain values of
lazy samples (compiled).

Values arrive as ``str`` straight from ``orjson.loads``; an ASCII ``str`` exposes its
characters as UTF-8 without a copy, so decoding reads the string in place and writes
once into an exactly-sized ``bytes`` object.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport uint8_t, uint64_t

from ._chpcio cimport (
    HPCIO_OK, hpcio_a85_decode, hpcio_a85_decoded_size, hpcio_a85_encode,
    hpcio_a85_encoded_bound, hpcio_b64_decode, hpcio_b64_decoded_size, hpcio_error,
    hpcio_error_clear, hpcio_hex_decode, hpcio_jinx_footer, hpcio_status,
)
from ._utils cimport data_ptr, raise_error

from ..errors import DecodeError


ENCODINGS = {"a85": 0, "b64": 1, "hex": 2}
_SMALL = 4096  # values up to this size are decoded without releasing the GIL


cdef object _message(hpcio_error *err):
    return err.msg.decode("utf-8", "replace")


def decode(data, int encoding, *, path=None, long long offset=-1, long long sample=-1,
           what=None):
    """Decode one inline value: ``encoding`` is 0 (a85), 1 (b64) or 2 (hex).

    ``data`` is an ASCII ``str`` or a bytes-like object.  Invalid text raises
    DecodeError naming ``what`` (the key), the character position, and the
    path/offset/sample given."""
    cdef const uint8_t *src
    cdef Py_ssize_t n = 0
    cdef const unsigned char[::1] view
    cdef uint64_t size = 0, written = 0
    cdef hpcio_status st
    cdef hpcio_error err
    cdef bytes out
    cdef uint8_t *dst
    if isinstance(data, str):
        src = <const uint8_t *> PyUnicode_AsUTF8AndSize(data, &n)
    else:
        view = data
        n = view.shape[0]
        src = data_ptr(view)
    hpcio_error_clear(&err)
    if encoding == 0:
        st = hpcio_a85_decoded_size(src, <uint64_t> n, &size, &err)
    elif encoding == 1:
        st = hpcio_b64_decoded_size(src, <uint64_t> n, &size, &err)
    elif encoding == 2:
        size = <uint64_t> n // 2
        st = HPCIO_OK
    else:
        raise ValueError(f"unknown encoding code {encoding}")
    if st == HPCIO_OK:
        out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t> size)
        dst = <uint8_t *> PyBytes_AS_STRING(out)
        if n > _SMALL:
            with nogil:
                st = _run(encoding, src, n, dst, size, &written, &err)
        else:
            st = _run(encoding, src, n, dst, size, &written, &err)
        if st == HPCIO_OK:
            return out
    detail = _message(&err)
    prefix = f"value {what!r}: " if what is not None else ""
    raise DecodeError(f"{prefix}{detail} (at character {err.offset} of {n})",
                      path=path, offset=offset, sample=sample)


cdef hpcio_status _run(int encoding, const uint8_t *src, Py_ssize_t n, uint8_t *dst,
                       uint64_t size, uint64_t *written, hpcio_error *err) noexcept nogil:
    if encoding == 0:
        return hpcio_a85_decode(src, <uint64_t> n, dst, size, written, err)
    if encoding == 1:
        return hpcio_b64_decode(src, <uint64_t> n, dst, size, written, err)
    return hpcio_hex_decode(src, <uint64_t> n, dst, size, written, err)


def a85decode(data, **where):
    """Ascii85 text (Python ``base64.a85encode`` output, foldspaces accepted) to bytes."""
    return decode(data, 0, **where)


def b64decode(data, **where):
    """Standard padded base64 text to bytes (strict: no stray characters)."""
    return decode(data, 1, **where)


def hexdecode(data, **where):
    """Hex text (either case) to bytes."""
    return decode(data, 2, **where)


def a85encode(data):
    """``base64.a85encode(data).decode()``, in C: the JINX writer's default encoding."""
    cdef const unsigned char[::1] view = data
    cdef uint64_t n = view.shape[0]
    cdef uint64_t cap = hpcio_a85_encoded_bound(n), written = 0
    cdef hpcio_error err
    cdef hpcio_status st
    cdef bytearray out = bytearray(cap)
    cdef unsigned char[::1] dst = out
    if n == 0:
        return ""
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_a85_encode(data_ptr(view), n, &dst[0], cap, &written, &err)
    if st != HPCIO_OK:
        raise ValueError(_message(&err))
    return out[:written].decode("ascii")


def locate_footer(buf, *, path=None):
    """``(footer_offset, footer_end)`` of a whole JINX file held in ``buf``.

    The footer JSON is ``buf[footer_offset:footer_end]``.  Raises CorruptShardError
    (TruncatedShardError for an empty file) naming the byte offset."""
    cdef const unsigned char[::1] view = buf
    cdef uint64_t n = view.shape[0]
    cdef uint64_t fo = 0, fe = 0
    cdef hpcio_error err
    cdef hpcio_status st
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_jinx_footer(data_ptr(view), n, &fo, &fe, &err)
    if st != HPCIO_OK:
        raise_error(st, &err, path, err.offset, -1)
    return fo, fe


def plain_value(value, str sep, lazy, shard, long long sample):
    """A stored value without type suffix, as a lazy reader returns it.

    A JSON object with a suffixed key (one holding ``sep``) becomes
    ``lazy(object, shard, sample)``, decoded as accessed; any other object becomes a new
    dict and a list a new list, their nested values treated the same way; everything
    else is returned as it is.  Objects without suffixed keys have nothing to decode, and
    a plain dict costs a fraction of a lazy one to build and to read (chat messages)."""
    if type(value) is dict:
        return _plain_dict(<dict>value, sep, lazy, shard, sample)
    if type(value) is list:
        return _plain_list(<list>value, sep, lazy, shard, sample)
    return value


cdef object _plain_dict(dict d, str sep, lazy, shard, long long sample):
    cdef object k, v
    cdef dict out
    for k in d:
        if type(k) is not str or sep in <str>k:
            return lazy(d, shard, sample)
    out = d.copy()
    for k, v in d.items():
        if type(v) is dict:
            out[k] = _plain_dict(<dict>v, sep, lazy, shard, sample)
        elif type(v) is list:
            out[k] = _plain_list(<list>v, sep, lazy, shard, sample)
    return out


cdef list _plain_list(list items, str sep, lazy, shard, long long sample):
    cdef list out = list(items)
    cdef Py_ssize_t i
    cdef object v
    for i in range(len(items)):
        v = items[i]
        if type(v) is dict:
            out[i] = _plain_dict(<dict>v, sep, lazy, shard, sample)
        elif type(v) is list:
            out[i] = _plain_list(<list>v, sep, lazy, shard, sample)
    return out
