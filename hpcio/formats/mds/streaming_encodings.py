"""The MDS column encodings hpcio adds to mosaicml-streaming's, as streaming encodings.

``list[bytes]`` (:class:`BytesList`) is streaming's list layout over values stored as
given.  :func:`register` adds it to streaming's encoding table, so ``StreamingDataset``
(and mldataforge, which decodes through the same table) reads it and ``MDSWriter``
writes it.  This module imports streaming and nothing of hpcio, so an interpreter
without hpcio's compiled core (a peer's environment) can load it from its file.
"""

from __future__ import annotations

from streaming.base.format.mds import encodings as _encodings

__all__ = ["BytesList", "register"]


class BytesList(_encodings.List):
    """``list[bytes]``: a u32 placeholder, the u32 count, each value's u32 size, then
    the values back to back; decodes to a list of ``bytes``."""

    def underlying_encoder(self):
        return _encodings.Bytes()

    def decode(self, data: bytes) -> list:
        return [bytes(v) for v in super().decode(data)]


def register() -> None:
    """Add hpcio's encodings to streaming's table (``_encodings``)."""
    _encodings._encodings["list[bytes]"] = BytesList
