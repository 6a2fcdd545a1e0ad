# Included by _records.pyx: the values of hpcio's MDS extension encodings, ``list[bytes]``
# (streaming's list layout: a u32 placeholder, the u32 count, each item's u32 size, the
# items) and ``dict[bytes]`` (that layout holding the mapping's JSON with null where its
# bytes were, the JSON array of their paths, then the bytes), built from the record bytes.

cdef list _bytes_list(const char *p, int64_t n):
    """The items of the list at ``p`` (``n`` bytes) as ``bytes``; DecodeError when the
    sizes do not add up to ``n``."""
    cdef uint32_t count, size
    cdef int64_t pos, end
    cdef Py_ssize_t j
    cdef object item
    if n < 8:
        raise DecodeError(f"a list needs 8 bytes, the value has {n}")
    memcpy(&count, p + 4, 4)
    pos = 8 + 4 * <int64_t>count
    if pos > n:
        raise DecodeError(f"{count} elements announced, only {n} bytes")
    end = pos
    for j in range(count):
        memcpy(&size, p + 8 + 4 * j, 4)
        end += size
    if end != n:
        raise DecodeError(f"elements end at byte {end} of a {n}-byte value")
    cdef list out = PyList_New(count)
    for j in range(count):
        memcpy(&size, p + 8 + 4 * j, 4)
        item = PyBytes_FromStringAndSize(p + pos, size)
        Py_INCREF(item)
        PyList_SET_ITEM(out, j, item)
        pos += size
    return out


cdef object _loads_text(bytes text, str what):
    """The JSON ``text`` as streaming's ``json.loads`` reads it (NaN, wide integers)."""
    try:
        return loads_exact(text)
    except ValueError:
        pass
    try:
        return _py_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"the {what} of a dict[bytes] value is not JSON: {exc}") from None


cdef dict _bytes_dict(const char *p, int64_t n):
    """The mapping at ``p`` (``n`` bytes): its JSON with each path's null replaced by the
    bytes item of the same rank; DecodeError when a path leads to no null placeholder."""
    cdef list items = _bytes_list(p, n)
    cdef Py_ssize_t j, depth, last
    if len(items) < 2:
        raise DecodeError(f"a dict[bytes] value holds {len(items)} items; at least 2")
    skeleton = _loads_text(items[0], "mapping")
    paths = _loads_text(items[1], "path list")
    if type(skeleton) is not dict or type(paths) is not list or len(paths) != len(items) - 2:
        raise DecodeError(f"a dict[bytes] value holds {len(items) - 2} bytes items for "
                          f"{len(paths) if type(paths) is list else 'no'} paths")
    for j in range(len(paths)):
        path = paths[j]
        if type(path) is not list or not path:
            raise DecodeError(f"bad path {path!r} in a dict[bytes] value")
        container = skeleton
        last = len(path) - 1
        for depth in range(last + 1):
            key = path[depth]
            if not (type(container) is dict and type(key) is str and key in container
                    or type(container) is list and type(key) is int and 0 <= key < len(container)):
                raise DecodeError(f"path {path!r} of a dict[bytes] value leads nowhere")
            if depth < last:
                container = container[key]
        if container[key] is not None:
            raise DecodeError(f"path {path!r} of a dict[bytes] value holds no placeholder")
        container[key] = items[j + 2]
    return skeleton


def bytes_list(buf) -> list:
    """The ``list[bytes]`` value in ``buf``; DecodeError naming the fault."""
    cdef const uint8_t[::1] view = byte_view(buf)
    return _bytes_list(<const char *>data_ptr(view), view.shape[0])


def bytes_dict(buf) -> dict:
    """The ``dict[bytes]`` value in ``buf``; DecodeError naming the fault."""
    cdef const uint8_t[::1] view = byte_view(buf)
    return _bytes_dict(<const char *>data_ptr(view), view.shape[0])


def values_of_kind(buf, const int64_t[::1] starts, const int64_t[::1] ends, int kind, json_loads):
    """The values of kind ``kind`` (not KIND_VIEW) at ``buf[starts[j]:ends[j]]``; raises
    the first value's error (DecodeError or the decoder's ValueError), and
    InvalidArgumentError for a span outside ``buf``."""
    cdef const uint8_t[::1] view = byte_view(buf)
    cdef const char *base = <const char *>data_ptr(view)
    cdef Py_ssize_t m = starts.shape[0], j
    if ends.shape[0] != m:
        raise InvalidArgumentError(f"values_of_kind: {m} starts and {ends.shape[0]} ends")
    cdef list out = PyList_New(m)
    for j in range(m):
        if not 0 <= starts[j] <= ends[j] <= view.shape[0]:
            raise InvalidArgumentError(f"values_of_kind: value {j} at [{starts[j]}, {ends[j]}) "
                                       f"outside the {view.shape[0]} bytes")
        value = _value(kind, base + starts[j], ends[j] - starts[j], json_loads)
        Py_INCREF(value)
        PyList_SET_ITEM(out, j, value)
    return out
