"""The report schemas of ``inspect`` and ``verify``, the same for every format.

``hpcio inspect`` and ``hpcio verify`` print these dicts (as JSON with ``--json``), so a
script that checks a dataset never special-cases its format.  Keys a format cannot fill
hold ``None``; what only one format knows goes under ``details``.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["InspectReport", "VerifyProblem", "VerifyReport", "problem"]


class InspectReport(TypedDict):
    format: str                    # registered format name
    path: str                      # the dataset's root (directory or file)
    samples: int
    shards: int                    # files holding samples (1 for a single-file dataset)
    fields: dict[str, str | None]  # field -> stored type or encoding (None when untyped)
    stored_bytes: int | None       # bytes of the shard files as stored
    details: dict[str, Any]        # format-specific, JSON-able


class VerifyProblem(TypedDict):
    path: str | None
    offset: int | None
    sample: int | None
    type: str                      # the exception's class name
    error: str                     # its message


class VerifyReport(TypedDict):
    format: str
    path: str
    ok: bool
    samples: int
    shards: int
    checked: int                   # samples decoded in full
    hashes_checked: int            # shard or record checksums compared
    errors: list[VerifyProblem]    # at most ``max_errors`` of them; ok is False if any


def problem(exc: BaseException) -> VerifyProblem:
    """The report entry for ``exc``, with the location an HpcioError carries."""
    return {"path": getattr(exc, "path", None), "offset": getattr(exc, "offset", None),
            "sample": getattr(exc, "sample", None), "type": type(exc).__name__, "error": str(exc)}
