"""The demo datasets as JSON Lines, ``bytes`` fields as base64 ``data:`` URLs (see
:mod:`hpcio.demo`)."""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import InvalidArgumentError, MissingDependencyError
from ..progress import ProgressDisplay, interval_from_env
from .samples import BYTES_FIELDS, _check_profile, generate

__all__ = ["write_jsonl", "write_samples", "read_jsonl"]


# The media type of each bytes field: a data URL carries it, and the converter decodes
# media data URLs of JSON Lines by default, so the bytes come back as bytes.
MEDIA_TYPES = {"images": "image/jpeg"}


def _url(field: str, value: bytes) -> str:
    return f"data:{MEDIA_TYPES[field]};base64," + base64.b64encode(value).decode("ascii")


def _bytes(field: str, url: str) -> bytes:
    prefix = f"data:{MEDIA_TYPES[field]};base64,"
    if not url.startswith(prefix):
        raise InvalidArgumentError(f"field {field!r} is not a {prefix}... URL: {url[:40]!r}")
    return base64.b64decode(url[len(prefix):], validate=True)


def _to_json(sample: dict, profile: str) -> dict:
    record = dict(sample)
    for name in BYTES_FIELDS[profile]:
        value = record[name]
        record[name] = [_url(name, v) for v in value] if isinstance(value, list) else _url(name, value)
    return record


def _from_json(record: dict, profile: str) -> dict:
    for name in BYTES_FIELDS[profile]:
        value = record[name]
        record[name] = [_bytes(name, v) for v in value] if isinstance(value, list) else _bytes(name, value)
    return record


@contextlib.contextmanager
def _open_compressed(path: str, mode: str, name: str | None = None):
    """``path`` opened through the codec that ``name``'s suffix (default path's) names."""
    name = path if name is None else name
    with contextlib.ExitStack() as stack:
        if name.endswith(".zst"):
            try:
                import zstandard
            except ImportError as exc:
                raise MissingDependencyError(
                    "writing or reading .zst needs zstandard: pip install 'hpcio[codecs]'",
                    path=name,
                ) from exc
            raw = stack.enter_context(open(path, mode))
            codec: Any
            if "w" in mode:
                codec = zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False)
            else:
                codec = io.BufferedReader(
                    zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
                )
            yield stack.enter_context(codec)
        elif name.endswith(".gz"):
            raw = stack.enter_context(open(path, mode))
            # mtime=0 and no file name in the header keep the bytes deterministic.
            yield stack.enter_context(gzip.GzipFile(filename="", mode=mode, fileobj=raw, mtime=0))
        else:
            yield stack.enter_context(open(path, mode))


def write_jsonl(
    path: str | os.PathLike, profile: str, n: int, seed: int = 0, start: int = 0, *,
    progress: bool | None = None,
) -> int:
    """Write samples ``start .. start+n-1`` as JSON Lines; return the bytes written.

    ``bytes`` fields become base64 ``data:`` URLs (see the module documentation); a ``.zst``
    or ``.gz`` suffix compresses the file.  The output is written to a temporary name
    and renamed, so a reader never sees a partial file.  ``progress``: None (default)
    shows a bar when standard error is a terminal and nothing otherwise; True also
    prints a line every ``$HPCIO_PROGRESS_INTERVAL`` seconds (default 30) and a last one
    when it is not (a log); False shows nothing.  A ``vlm`` sample takes tens of
    milliseconds to make (its JPEGs), so thousands take minutes.
    """
    _check_profile(profile)
    return write_samples(path, profile, generate(profile, n, seed, start), n, progress=progress)


def _progress_display(path: str, n: int, progress: bool | None) -> ProgressDisplay | None:
    """Samples written: a bar on a terminal; plain lines in a log only when asked."""
    stream = sys.stderr
    on_terminal = getattr(stream, "isatty", lambda: False)()
    if n <= 0 or progress is False or (progress is None and not on_terminal):
        return None
    name = os.path.basename(path)

    def line(done: int, elapsed: float, final: bool) -> str:
        rate = done / max(elapsed, 1e-9)
        left = f"ETA {(n - done) / rate:.0f}s" if rate > 0 else "ETA ?"
        return (f"[hpcio demo] {name}: {done}/{n} samples ({100.0 * done / n:.0f}%), "
                f"{rate:,.0f} samples/s, {'done' if final else left}")

    return ProgressDisplay(n, label=name, unit="sample", line=line, interval=interval_from_env(30.0),
                           stream=stream)


def write_samples(path: str | os.PathLike, profile: str, samples: Iterable[dict], n: int, *,
                  progress: bool | None = None) -> int:
    """Write ``samples`` (``n`` of them, for the progress display) as :func:`write_jsonl`
    does; return the bytes written."""
    import orjson

    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)  # as `hpcio convert` creates its output
    except (FileExistsError, NotADirectoryError):
        raise InvalidArgumentError("the output directory is a file, or under one", path=parent) from None
    tmp = f"{path}.tmp-{os.getpid()}"
    written = count = 0
    display = _progress_display(path, n, progress)
    try:
        with _open_compressed(tmp, "wb", name=path) as out:
            for sample in samples:
                line = orjson.dumps(_to_json(sample, profile)) + b"\n"
                out.write(line)
                written += len(line)
                count += 1
                if display is not None:
                    display.show(count)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        if display is not None:
            display.close(count)
    return written


def read_jsonl(path: str | os.PathLike, profile: str) -> Iterator[dict]:
    """The samples of a file written by :func:`write_jsonl`, base64 fields decoded."""
    import orjson

    _check_profile(profile)
    path = os.fspath(path)
    with _open_compressed(path, "rb") as f:
        for line in f:
            if line.strip():
                yield _from_json(orjson.loads(line), profile)

