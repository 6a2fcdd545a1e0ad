"""Joining and splitting JINX files, copying stored values without decoding them."""

from __future__ import annotations

import os

import numpy as np

from ...errors import CorruptShardError, InvalidArgumentError
from .reader import Reader
from .writer import Options, Writer


def _footer_options(footer: dict) -> dict:
    return {
        "compression": footer.get("compression"),
        "index_compression": footer.get("index_compression"),
        "compress_threshold": footer.get("compress_threshold", 64),
        "compress_ratio": footer.get("compress_ratio", 1.0),
        "encoding": footer.get("encoding", "a85"),
        "binary_threshold": footer.get("binary_threshold"),
        "ext_sep": footer.get("ext_sep", "."),
    }


def _writer_options(readers: list[Reader], overrides: dict) -> dict:
    """The first input's footer settings, ``overrides`` replacing them.

    Settings taken from a footer are checked here, so a damaged footer is reported as
    the corrupt file it is rather than as a bad writer option."""
    first = next((r.shards[0] for r in readers if r.shards), None)
    inherited = {k: v for k, v in _footer_options(first.footer if first else {}).items() if k not in overrides}
    try:
        Options(**{**_footer_options({}), **inherited})
    except ValueError as exc:
        raise CorruptShardError(f"JINX footer settings cannot be written again: {exc}",
                                path=first.path, offset=first.footer_offset) from None
    return {**inherited, **overrides}


def _open_inputs(inputs) -> list[Reader]:
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    return [Reader(p, lazy=True) for p in inputs]


def join(inputs, output, **writer_options) -> int:
    """Write the samples of JINX ``inputs`` (files or shard directories) into ``output``.

    Writer options default to the first input's footer settings, so stored values
    and sidecar blobs are copied without decoding; options that differ make the
    affected values be re-encoded.  Returns the number of samples written.
    """
    readers = _open_inputs(inputs)
    try:
        opts = _writer_options(readers, writer_options)
        with Writer(output, **opts) as w:
            for r in readers:
                for s in r.iter_range():
                    w.write(s)
            return w.count
    finally:
        for r in readers:
            r.close()


def split(inputs, output_dir, *, parts: int | None = None, size_hint: int | None = None,
          prefix: str = "part-", **writer_options) -> list[str]:
    """Split JINX ``inputs`` into files ``{output_dir}/{prefix}{part:04d}.jinx``.

    Give ``parts`` (equal sample counts, the first ones one larger) or ``size_hint``
    (start a new part once a part's sample lines reach this many bytes, as mldataforge
    does).  Values are copied without decoding when the settings agree (see
    :func:`join`).  Returns the paths written.
    """
    if (parts is None) == (size_hint is None):
        raise InvalidArgumentError("give exactly one of parts= or size_hint=")
    readers = _open_inputs(inputs)
    try:
        n = sum(len(r) for r in readers)
        opts = _writer_options(readers, writer_options)
        os.makedirs(output_dir, exist_ok=True)
        paths: list[str] = []
        w = None
        bounds = None
        if parts is not None:
            if parts < 1:
                raise InvalidArgumentError(f"parts must be >= 1, got {parts}")
            per, extra = divmod(n, parts)
            bounds = np.cumsum([per + (k < extra) for k in range(parts)]).tolist()
        done = 0

        def open_part():
            p = os.path.join(output_dir, f"{prefix}{len(paths):04d}.jinx")
            paths.append(p)
            return Writer(p, **opts)

        try:
            for r in readers:
                for s in r.iter_range():
                    if w is None:
                        w = open_part()
                    w.write(s)
                    done += 1
                    full = (done >= bounds[len(paths) - 1]) if bounds else w._cur.current >= size_hint
                    if full:
                        w.close()
                        w = None
            if bounds:
                while len(paths) < parts:  # more parts than samples: empty parts
                    open_part().close()
            elif w is None and not paths:
                w = open_part()
            if w is not None:
                w.close()
        except BaseException:
            if w is not None:
                w.abort()
            raise
        return paths
    finally:
        for r in readers:
            r.close()
