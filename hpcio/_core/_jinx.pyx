# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""JINX kernels: decoding of inline values (Ascii85 in C, base64 and hex by binascii),
the footer locator, and the hot part of lazy samples: the base class of ``JinxSample``,
reading runs of sample lines into lazy samples, and the plain values they return
(compiled).

Values arrive as ``str`` straight from ``orjson.loads``; an ASCII ``str`` exposes its
characters as UTF-8 without a copy, so Ascii85 decoding reads the string in place and
writes once into an exactly-sized ``bytes`` object.
"""

from cpython.buffer cimport PyBUF_READ
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport uint8_t, uint64_t

from ._chpcio cimport (
    HPCIO_OK, hpcio_a85_decode, hpcio_a85_decoded_size, hpcio_a85_encode,
    hpcio_a85_encoded_bound, hpcio_error, hpcio_error_clear, hpcio_jinx_footer,
    hpcio_json_wide_int, hpcio_status,
)
from ._utils cimport data_ptr, raise_error

import binascii

import orjson

from ..errors import DecodeError, IndexOutOfRangeError, InvalidArgumentError


ENCODINGS = {"a85": 0, "b64": 1, "hex": 2}
DEF _SMALL = 4096  # values up to this size are decoded without releasing the GIL


cdef object _message(hpcio_error *err):
    return err.msg.decode("utf-8", "replace")


def decode(data, int encoding, *, path=None, long long offset=-1, long long sample=-1,
           what=None):
    """Decode one inline value: ``encoding`` is 0 (a85), 1 (b64) or 2 (hex).

    ``data`` is an ASCII ``str`` or a bytes-like object.  Invalid text raises
    DecodeError naming ``what`` (the key), the character position (Ascii85) or what
    binascii found (base64, hex), and the path/offset/sample given."""
    prefix = f"value {what!r}: " if what is not None else ""
    if encoding == 0:
        return _a85(data, prefix, path, offset, sample)
    if encoding != 1 and encoding != 2:
        raise InvalidArgumentError(f"unknown encoding code {encoding}")
    try:
        return binascii.a2b_base64(data, strict_mode=True) if encoding == 1 else binascii.unhexlify(data)
    except ValueError as exc:  # binascii.Error, or a str that is not ASCII
        name = "base64" if encoding == 1 else "hex"
        raise DecodeError(f"{prefix}invalid {name}: {exc}", path=path, offset=offset, sample=sample) from None


cdef bytes _a85(data, prefix, path, long long offset, long long sample):
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
    st = hpcio_a85_decoded_size(src, <uint64_t> n, &size, &err)
    if st == HPCIO_OK:
        out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t> size)
        dst = <uint8_t *> PyBytes_AS_STRING(out)
        if n > _SMALL:
            with nogil:
                st = hpcio_a85_decode(src, <uint64_t> n, dst, size, &written, &err)
        else:
            st = hpcio_a85_decode(src, <uint64_t> n, dst, size, &written, &err)
        if st == HPCIO_OK:
            return out
    raise DecodeError(f"{prefix}{_message(&err)} (at character {err.offset} of {n})",
                      path=path, offset=offset, sample=sample)


def a85decode(data, **where):
    """Ascii85 text (Python ``base64.a85encode`` output, foldspaces accepted) to bytes."""
    return decode(data, 0, **where)


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
        raise InvalidArgumentError(_message(&err))
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
    ``lazy(object, shard, sample)``, decoded as accessed.  Lists and objects holding
    such an object are copied down to it; everything else is the stored value itself
    (a chat message is returned as parsed: there is nothing to decode, and a copy would
    cost more than the parse)."""
    return _plain(value, sep, lazy, shard, sample)


cdef inline object _plain(object v, str sep, lazy, shard, long long sample):
    if type(v) is dict:
        return _plain_dict(<dict>v, sep, lazy, shard, sample)
    if type(v) is list:
        return _plain_list(<list>v, sep, lazy, shard, sample)
    return v


cdef object _plain_dict(dict d, str sep, lazy, shard, long long sample):
    cdef object k, v, w
    cdef dict out = None
    for k in d:
        if type(k) is not str or sep in <str>k:
            return lazy(d, shard, sample)
    for k, v in d.items():
        w = _plain(v, sep, lazy, shard, sample)
        if w is not v:
            if out is None:
                out = d.copy()
            out[k] = w
    return d if out is None else out


cdef list _plain_list(list items, str sep, lazy, shard, long long sample):
    cdef list out = None
    cdef Py_ssize_t i
    cdef object v, w
    for i in range(len(items)):
        v = items[i]
        w = _plain(v, sep, lazy, shard, sample)
        if w is not v:
            if out is None:
                out = list(items)
            out[i] = w
    return items if out is None else out


# --- lazy samples -------------------------------------------------------------------------
cdef object _MISSING = object()
cdef object _loads = orjson.loads
cdef object _JSONDecodeError = orjson.JSONDecodeError


cdef class LazySample:
    """The compiled core of :class:`hpcio.formats.jinx.JinxSample`: the stored object,
    its shard and position, and the decoded values already asked for.

    ``shard`` is the reader's ``_Shard``: it decodes suffixed values (``decode``), maps
    logical keys to stored ones (``keymap``, cached in ``keymaps`` per key layout) and
    names the key separator (``ext_sep``).

    ``_lent`` is set once a mutable value (list, object, array) has been handed out: the
    caller may have changed it, so writers re-encode the sample instead of copying its stored form.
    """

    cdef readonly dict _raw
    cdef readonly object _shard
    cdef readonly Py_ssize_t _sample
    cdef readonly bint _lent
    cdef dict _cache

    def __init__(self, dict raw, shard, Py_ssize_t sample):
        self._raw = raw
        self._shard = shard
        self._sample = sample

    def __getitem__(self, key):
        cdef object v = self._raw.get(key, _MISSING)
        cdef object value
        cdef dict cache = self._cache
        if v is not _MISSING and type(v) is not dict and type(v) is not list:
            return v  # plain JSON value: the common metadata case, nothing to decode
        if cache is not None:
            value = cache.get(key, _MISSING)
            if value is not _MISSING:
                return value
        shard = self._shard
        if v is _MISSING:
            rk = _keymap(self).get(key)
            if rk is None:
                raise KeyError(key)
            value = shard.decode(rk, self._raw[rk], self._sample)
            t = type(value)
            if not (t is bytes or t is str or t is int or t is float or t is bool or value is None):
                self._lent = True  # a decoded array or JSON container the caller may change
        else:
            value = _plain(v, shard.ext_sep, type(self), shard, self._sample)
            self._lent = True
            if value is v:
                return v  # no copy, nothing to cache
        if cache is None:
            cache = self._cache = {}
        cache[key] = value
        return value

    def __contains__(self, key):
        return key in self._raw or key in _keymap(self)

    def __iter__(self):
        return iter(_keymap(self))

    def keys(self):
        """The logical keys in file order (a view of the shard's cached key map)."""
        return _keymap(self).keys()

    def __len__(self):
        return len(self._raw)


cdef dict _keymap(LazySample s):
    """Logical key -> stored key for the sample's key layout, from the shard's cache."""
    cdef dict cached = s._shard.keymaps
    km = cached.get(tuple(s._raw))
    if km is None:
        km = s._shard.keymap(s._raw)  # builds and caches the layout's map
    return km


def project(dict raw, shard, fields):
    """The stored items of ``raw`` that hold ``fields`` (KeyError for a missing one)."""
    cdef dict sub = {}
    cdef dict km = None
    cdef object v
    for f in fields:
        v = raw.get(f, _MISSING)
        if v is not _MISSING:
            sub[f] = v
            continue
        if km is None:
            km = shard.keymap(raw)
        rk = km.get(f)
        if rk is None:
            raise KeyError(f)
        sub[rk] = raw[rk]
    return sub


cdef inline LazySample _lazy_sample(object cls, shard, const char *base, const uint64_t[::1] off,
                                    Py_ssize_t j, fields):
    """Line ``j`` parsed into a lazy ``cls`` sample; a line that is not a JSON object is
    read again by ``shard.raw``, which raises the error naming file, offset and sample."""
    cdef LazySample s
    if hpcio_json_wide_int(<const uint8_t *>base + off[j], off[j + 1] - off[j]):
        raw = None  # an integer orjson would read as a float: shard.raw reads it exactly
    else:
        try:
            raw = _loads(PyMemoryView_FromMemory(<char *>base + off[j], <Py_ssize_t>(off[j + 1] - off[j]),
                                                 PyBUF_READ))
        except _JSONDecodeError:
            raw = None
    if type(raw) is not dict:
        raw = shard.raw(j)
    if fields is not None:
        raw = project(raw, shard, fields)
    s = LazySample.__new__(cls)
    s._raw = raw
    s._shard = shard
    s._sample = j
    return s


def lazy_run(shard, cls, Py_ssize_t a, Py_ssize_t b, fields=None):
    """Samples ``a..b-1`` of one mapped shard as lazy ``cls`` instances (holding only
    ``fields`` when given): the per-sample cost is one orjson parse of the line.

    A line that fails ends the run early: the samples before it are returned, and the
    next run, starting at that line, raises its error.  ``shard.buf`` is the mapped file
    and ``shard.offsets`` its validated line offsets (strictly increasing, within the
    file)."""
    cdef const unsigned char[::1] buf = shard.buf
    cdef const uint64_t[::1] off = shard.offsets
    cdef Py_ssize_t j
    if a < 0 or b > off.shape[0] - 1 or a > b:
        raise IndexOutOfRangeError(f"samples {a}..{b} out of range for {off.shape[0] - 1} in {shard.path}")
    cdef list out = [None] * (b - a)
    for j in range(a, b):
        try:
            out[j - a] = _lazy_sample(cls, shard, <const char *>&buf[0], off, j, fields)
        except Exception:
            if j == a:
                raise
            return out[: j - a]
    return out


def lazy_gather(shard, cls, indices, fields=None):
    """Samples ``indices`` (a list of ints) of one shard, as :func:`lazy_run`."""
    cdef const unsigned char[::1] buf = shard.buf
    cdef const uint64_t[::1] off = shard.offsets
    cdef Py_ssize_t n = off.shape[0] - 1, i, j
    cdef list out = [None] * len(indices)
    for i in range(len(indices)):
        j = indices[i]
        if j < 0 or j >= n:
            raise IndexOutOfRangeError(f"sample {j} out of range for {n} in {shard.path}")
        out[i] = _lazy_sample(cls, shard, <const char *>&buf[0], off, j, fields)
    return out
