"""The demo tour: generate a dataset, write it in each format, read it back and check it."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import tuning
from ..distributed.order import GlobalOrder
from ..errors import CapabilityError, SelfCheckError
from .jsonl import write_samples
from .samples import BYTES_FIELDS, _check_profile, generate

__all__ = ["TOUR_FORMATS", "DEFAULT_COUNTS", "FormatResult", "TourReport", "tour", "format_report"]

# Formats the tour writes, and the writer options it uses for each.
TOUR_FORMATS = ("mds", "jinx", "webdataset", "zarr", "hdf5")
TOUR_WRITE_OPTIONS = {"mds": {"compression": "sample::zstd"}}
DEFAULT_COUNTS = {"vlm": 500, "text": 5000}


@dataclass
class FormatResult:
    """What the tour measured for one format; rates are samples per second."""

    format: str
    status: str  # "ok", "unavailable" (not in this build / backend missing) or "failed"
    detail: str = ""
    write_rate: float | None = None
    size_bytes: int | None = None
    iterate_rate: float | None = None
    shuffle_rate: float | None = None
    sort_seconds: float | None = None
    split: str = ""


@dataclass
class TourReport:
    """The tour's results: generation speed, raw source size, and one row per format."""

    profile: str
    n: int
    seed: int
    out: str
    generate_rate: float = 0.0
    source_path: str = ""
    source_bytes: int = 0
    formats: list[FormatResult] = field(default_factory=list)
    tuned: list[str] = field(default_factory=list)  # the hpcio.tune switches the tour ran with

    @property
    def ok(self) -> bool:
        """At least one format worked and none failed."""
        return any(r.status == "ok" for r in self.formats) and not any(
            r.status == "failed" for r in self.formats
        )


def _same(got, expected) -> bool:
    """Equality where bytes-like values (zero-copy views) count as their bytes."""
    if isinstance(expected, (bytes, bytearray)):
        return isinstance(got, (bytes, bytearray, memoryview)) and bytes(got) == expected
    if isinstance(expected, dict):
        return (
            isinstance(got, Mapping)
            and set(got) == set(expected)
            and all(_same(got[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(got, (list, tuple))
            and len(got) == len(expected)
            and all(_same(g, e) for g, e in zip(got, expected))
        )
    return type(got) is type(expected) and got == expected


def _check_by_id(got: list, by_id: dict, what: str) -> None:
    """Every generated sample exactly once, each equal byte for byte, in any order."""
    if len(got) != len(by_id):
        raise SelfCheckError(f"{what}: {len(got)} samples, expected {len(by_id)}")
    seen = set()
    for i, sample in enumerate(got):
        key = sample.get("id")
        if key not in by_id or key in seen:
            raise SelfCheckError(f"{what}: sample {i} has an unknown or repeated id {key!r}")
        seen.add(key)
        if not _same(sample, by_id[key]):
            raise SelfCheckError(f"{what}: sample {i} (id {key!r}) differs from the generated one")


def _disk_usage(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def _why_unavailable(exc: ImportError) -> str:
    missing = getattr(exc, "name", None) or ""
    if missing.startswith("hpcio.formats."):
        return f"not in this build ({missing} does not exist)"
    return " ".join(str(exc).split())


def _convert_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("hpcio.convert") is not None


def _write(name: str, samples: list, dst: str, source: str | None) -> str:
    """Write ``samples`` as format ``name`` at ``dst``; return how it was written.

    With a ``source`` dataset and :func:`hpcio.convert` in this build, the shards are
    converted from it (what users run); otherwise they are written sample by sample.
    """
    import hpcio

    options = TOUR_WRITE_OPTIONS.get(name, {})
    how = "open_writer"
    if source is not None and _convert_available():
        try:
            hpcio.convert(source, dst, to=name, progress=False, **options)
            return f"hpcio.convert from {os.path.basename(source)}"
        except CapabilityError as exc:  # a format the converter cannot write (yet)
            how = f"open_writer (hpcio.convert: {' '.join(str(exc).split())})"
            if os.path.isdir(dst):
                shutil.rmtree(dst)
    with hpcio.open_writer(dst, format=name, **options) as writer:
        for sample in samples:
            writer.write(sample)
    return how


def _tour_format(name: str, samples: list, out: str, source: str | None, log) -> FormatResult:
    import hpcio

    try:
        hpcio.get_format(name)
    except ImportError as exc:
        return FormatResult(name, "unavailable", _why_unavailable(exc))
    n = len(samples)
    by_id = {s["id"]: s for s in samples}
    dst = os.path.join(out, name)
    try:
        t0 = time.perf_counter()
        how = _write(name, samples, dst, source)
        result = FormatResult(name, "ok", how, write_rate=n / (time.perf_counter() - t0))
        result.size_bytes = _disk_usage(dst)
        sniffed = hpcio.sniff_format(dst).NAME
        if sniffed != name:
            raise SelfCheckError(f"hpcio.open would read {dst} as {sniffed}, not {name}")

        with hpcio.open(dst) as ds:
            t0 = time.perf_counter()
            stored = list(ds)
            result.iterate_rate = n / (time.perf_counter() - t0)
            _check_by_id(stored, by_id, "iteration")

            perm = GlobalOrder(n, seed=42).tolist()
            shuffled = ds.shuffle(seed=42)
            t0 = time.perf_counter()
            got = list(shuffled)
            result.shuffle_rate = n / (time.perf_counter() - t0)
            if [s["id"] for s in got] != [stored[int(i)]["id"] for i in perm]:
                raise SelfCheckError("shuffle(seed=42) is not GlobalOrder(n, seed=42)")
            _check_by_id(got, by_id, "shuffle(seed=42)")

            t0 = time.perf_counter()
            ordered = shuffled.sort("id")
            result.sort_seconds = time.perf_counter() - t0
            if [s["id"] for s in ordered.select(["id"])] != sorted(by_id):
                raise SelfCheckError("shuffle(42).sort('id') is not in id order")

            world = 4
            parts = [shuffled.split(rank, world).select(["id"]) for rank in range(world)]
            seen = [s["id"] for part in parts for s in part]
            if seen != [s["id"] for s in got[: world * (n // world)]]:
                raise SelfCheckError("split(rank, 4) parts do not tile the shuffled order")
            result.split = f"{world} x {n // world}"
        log(f"  {name}: ok ({how})")
        return result
    except ImportError as exc:  # an optional backend (zarr, h5py) is missing
        return FormatResult(name, "unavailable", _why_unavailable(exc))
    except Exception as exc:
        detail = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        log(f"  {name}: FAILED: {detail}")
        return FormatResult(name, "failed", detail)


def tour(
    out: str | os.PathLike,
    profile: str = "vlm",
    n: int | None = None,
    seed: int = 0,
    formats: Sequence[str] = TOUR_FORMATS,
    log=print,
    tune: bool = True,
    progress: bool | None = None,
) -> TourReport:
    """Generate a demo dataset, write it in each format, read it back and check it.

    The samples are written as generated (a vlm sample's ``images`` list of JPEG bytes
    included): the first available format with :func:`hpcio.open_writer`, the others with :func:`hpcio.convert` from it when this
    build has the converter.  Each dataset is opened with :func:`hpcio.open`, iterated,
    iterated as ``shuffle(seed=42)``, sorted by ``id`` and split across 4 ranks; every
    sample is checked byte for byte against the generated one.  Formats not in this
    build are reported as unavailable, never skipped silently.

    Parameters
    ----------
    out : path
        Directory for the raw JSON Lines source and one sub-directory per format.
    profile : {"vlm", "text"}
    n : int, optional
        Number of samples (default :data:`DEFAULT_COUNTS` of the profile).
    seed : int
        Dataset seed.
    formats : sequence of str
        Formats to try.
    log : callable
        Receives progress lines.
    tune : bool, default True
        Run with every :func:`hpcio.tune` switch on, as a program that owns its process
        (``hpcio demo``) may; the garbage collector and Arrow pool switches are put back
        after, the kept heap stays for the process (it cannot be undone).
    progress : bool, optional
        Progress of generating the samples, as :func:`hpcio.demo.write_jsonl` shows it
        (default: a bar on a terminal, nothing otherwise).
    """
    _check_profile(profile)
    n = DEFAULT_COUNTS[profile] if n is None else n
    out = os.fspath(out)
    os.makedirs(out, exist_ok=True)
    report = TourReport(profile, n, seed, out)

    report.source_path = os.path.join(out, f"{profile}.jsonl")
    log(f"generating {n} {profile} samples (seed {seed}) into the raw source {report.source_path}")
    # Each sample is made once, kept for the checks and written as it comes: a vlm
    # sample's JPEGs take tens of milliseconds, the bulk of the tour's time.
    samples: list[dict] = []
    seconds = 0.0

    def generated():
        nonlocal seconds
        stream = generate(profile, n, seed)
        while True:
            t0 = time.perf_counter()
            sample = next(stream, None)
            seconds += time.perf_counter() - t0
            if sample is None:
                return
            samples.append(sample)
            yield sample

    report.source_bytes = write_samples(report.source_path, profile, generated(), n, progress=progress)
    report.generate_rate = n / max(seconds, 1e-9)

    log("writing shards and reading them back:")
    with tuning.fully_tuned() if tune else contextlib.nullcontext(tuning.tune()) as switches:
        report.tuned = [name for name in tuning.SWITCHES if switches[name]]
        source = None
        for name in formats:
            result = _tour_format(name, samples, out, source, log)
            report.formats.append(result)
            if source is None and result.status == "ok":
                source = os.path.join(out, name)
    return report


def format_report(report: TourReport) -> str:
    """A :class:`TourReport` as a plain-text table."""

    def rate(v):
        return "-" if v is None else f"{v:,.0f}"

    lines = [
        f"demo: {report.n} {report.profile} samples, seed {report.seed}, in {report.out}",
        f"generated at {report.generate_rate:,.0f} samples/s; raw source "
        f"{report.source_bytes / 1e6:.1f} MB ({os.path.basename(report.source_path)}"
        + (f", {'/'.join(BYTES_FIELDS[report.profile])} as data: URLs)"
           if BYTES_FIELDS[report.profile] else ")"),
        "process tuning: " + (", ".join(report.tuned) + " (hpcio.tune: the demo owns its process)"
                              if report.tuned else "none"),
        "",
    ]
    header = ("format", "write/s", "MB", "iterate/s", "shuffled/s", "sort s", "split", "check",
              "written with")
    rows = [header]
    notes = []
    for r in report.formats:
        if r.status == "ok":
            rows.append((
                r.format,
                rate(r.write_rate),
                f"{r.size_bytes / 1e6:.1f}",
                rate(r.iterate_rate),
                rate(r.shuffle_rate),
                f"{r.sort_seconds:.3f}",
                r.split,
                "byte-exact",
                r.detail,
            ))
        else:
            rows.append((r.format, "-", "-", "-", "-", "-", "-", r.status.upper(), ""))
            notes.append(f"{r.format}: {r.status}: {r.detail}")
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    for row in rows:
        cells = (
            [row[0].ljust(widths[0])]
            + [v.rjust(w) for v, w in zip(row[1:-1], widths[1:-1])]
            + [row[-1]]
        )
        lines.append("  ".join(cells).rstrip())
    lines.extend(["", *notes] if notes else [])
    return "\n".join(lines)

