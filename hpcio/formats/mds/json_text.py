"""The text of MDS ``json`` column values: ``json.dumps`` with its default options, as
streaming's MDSWriter writes them, from one C encoder per thread."""

from __future__ import annotations

import json
import threading
from json.encoder import JSONEncoder, c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]

__all__ = ["_json_dumps"]

_json_state = threading.local()


def _json_dumps(value) -> str:
    """``json.dumps(value)`` with its default options, as streaming's MDSWriter writes
    a json column, from one C encoder per thread.

    ``json.dumps`` builds a new encoder for every call, about half its cost on a small
    object, paid for every sample of a conversion.  The encoder's circular-reference
    markers are emptied again after an error, as a fresh encoder would start.
    """
    encode = getattr(_json_state, "encode", None)
    if encode is None:
        if c_make_encoder is None:  # an interpreter without the C accelerator
            return json.dumps(value)
        markers: dict = {}
        default = JSONEncoder().default
        encode = c_make_encoder(markers, default, encode_basestring_ascii, None, ": ", ", ",
                                False, False, True)
        _json_state.encode, _json_state.markers = encode, markers
    try:
        return "".join(encode(value, 0))
    except BaseException:
        _json_state.markers.clear()
        raise
