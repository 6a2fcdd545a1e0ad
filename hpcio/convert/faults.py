"""Bad samples: what is recorded about them, and the report written beside the output.

Without ``skip_bad`` the first sample that fails to parse, decode, map or encode stops
the conversion with a :class:`~hpcio.errors.BadSampleError` naming the source file, the
sample's index in it and the byte offset when the reader knows it.  With ``skip_bad`` the sample is left
out and recorded; the records of all shards are written, in shard order, to
``<output>.bad-samples.jsonl`` (one JSON object per line) and counted in the summary.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from ..errors import HpcioError, where

__all__ = ["BadSample", "bad_sample_from", "report_path", "write_report"]


@dataclass(frozen=True)
class BadSample:
    """One skipped sample.

    ``sample`` is the sample's 0-based index within ``source`` (for line formats such as
    JSONL and JINX, the line number minus one); ``offset`` is the byte offset in the
    file the reader named, when it knows it; ``stage`` says what failed: ``read``
    (parse/decode), ``map``, ``filter`` or ``write`` (the output format refused it).
    """

    source: str
    sample: int
    offset: int | None
    stage: str
    error_type: str
    error: str
    shard: int
    file: str | None = None

    def to_json(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        loc = where(self.file or self.source, self.offset, self.sample)
        if self.file and self.file != self.source:
            loc += f" of source {self.source}"
        return f"{self.stage} failed at {loc}: {self.error_type}: {self.error}"


def bad_sample_from(exc: BaseException, *, source: str, sample: int, stage: str, shard: int) -> BadSample:
    """The record of ``exc`` raised while handling ``sample`` of ``source``."""
    offset = getattr(exc, "offset", None) if isinstance(exc, HpcioError) else None
    file = getattr(exc, "path", None) if isinstance(exc, HpcioError) else None
    message = str(exc)
    if isinstance(exc, HpcioError) and exc.args:
        # HpcioError appends "(path, byte offset, sample)"; the record holds those apart.
        loc = where(exc.path, exc.offset, exc.sample)
        if loc and message.endswith(f" ({loc})"):
            message = message[: -len(loc) - 3]
    return BadSample(
        source=source,
        sample=int(sample),
        offset=None if offset is None else int(offset),
        stage=stage,
        error_type=type(exc).__name__,
        error=message,
        shard=int(shard),
        file=file,
    )


def report_path(output: str) -> str:
    """Where the bad-sample report of ``output`` goes: beside it, not inside it."""
    return os.path.abspath(output).rstrip(os.sep) + ".bad-samples.jsonl"


def write_report(output: str, records: list[dict]) -> str | None:
    """Write the report atomically; remove a stale one when there is nothing to report."""
    path = report_path(output)
    if not records:
        if os.path.exists(path):
            os.remove(path)
        return None
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path
