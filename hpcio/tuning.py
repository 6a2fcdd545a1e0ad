"""Process-wide tuning that hpcio applies only on request: allocator, garbage collector,
Arrow's memory pool.

A library is a guest in its host's process, so by default hpcio changes none of these.
A program that owns its process (a conversion job, a benchmark, the demo) opts in with
:func:`tune` or the ``HPCIO_TUNE`` environment variable (``all``, ``none`` or a comma
list of switch names).  Forked workers inherit the switches; spawned ones read
``HPCIO_TUNE`` again.  docs/performance.md says what each switch buys.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator

from .errors import TuningError

__all__ = ["SWITCHES", "ENVIRONMENT_VARIABLE", "tune", "fully_tuned", "enabled", "apply_freed_heap",
           "gc_paused", "switch_arrow_pool"]

SWITCHES = ("keep_freed_heap", "pause_gc", "arrow_jemalloc")
ENVIRONMENT_VARIABLE = "HPCIO_TUNE"

_settings: dict[str, bool] | None = None  # read from HPCIO_TUNE on first use


def _from_environment() -> dict[str, bool]:
    names = {name.strip() for name in os.environ.get(ENVIRONMENT_VARIABLE, "").split(",")} - {""}
    unknown = sorted(names - set(SWITCHES) - {"all", "none"})
    if unknown:
        raise TuningError(
            f"{ENVIRONMENT_VARIABLE}={os.environ[ENVIRONMENT_VARIABLE]!r}: unknown switch {', '.join(unknown)}; "
            f"expected all, none or a comma list of {', '.join(SWITCHES)}"
        )
    everything = "all" in names
    return {name: everything or name in names for name in SWITCHES}


def _current() -> dict[str, bool]:
    global _settings
    if _settings is None:
        _settings = _from_environment()
    return _settings


def tune(*, keep_freed_heap: bool | None = None, pause_gc: bool | None = None,
         arrow_jemalloc: bool | None = None) -> dict[str, bool]:
    """Opt in to (or out of) process-wide tuning for fast reading; returns the switches.

    All are off unless ``HPCIO_TUNE`` or an earlier call turned them on; an argument left
    ``None`` keeps its switch as it is.

    ``keep_freed_heap``
        glibc keeps up to 32 MiB of freed heap for the next allocations instead of giving
        it back at once (``hpcio._core._io.keep_freed_heap``), so samples freed a batch at
        a time are not faulted in again.  Applied now, once per process; it cannot be undone.
    ``pause_gc``
        Python's cyclic garbage collector is paused while a batch is built
        (``Dataset.get_batch``, ``get_columns``, a conversion round): every collection
        meanwhile walks samples that all stay alive.
    ``arrow_jemalloc``
        jemalloc is Arrow's default memory pool while Parquet row groups are decoded (a
        whole conversion, under ``hpcio convert``): it touches less fresh memory than
        mimalloc's per-thread segments.  A pool chosen by ``ARROW_DEFAULT_MEMORY_POOL``
        is kept.

    >>> import hpcio
    >>> sorted(hpcio.tune())  # every switch, off unless asked for
    ['arrow_jemalloc', 'keep_freed_heap', 'pause_gc']
    >>> hpcio.tune(pause_gc=True)["pause_gc"], hpcio.tune(pause_gc=False)["pause_gc"]
    (True, False)
    """
    current = _current()
    for name, value in (("keep_freed_heap", keep_freed_heap), ("pause_gc", pause_gc),
                        ("arrow_jemalloc", arrow_jemalloc)):
        if value is not None:
            current[name] = bool(value)
    apply_freed_heap()
    return dict(current)


@contextlib.contextmanager
def fully_tuned() -> Iterator[dict[str, bool]]:
    """Every switch on for the block, for programs that own their process (the demo tour,
    ``hpcio-convert``).  The garbage-collector and Arrow switches are put back after; the kept
    heap stays, as it cannot be undone."""
    before = tune()
    try:
        yield tune(**dict.fromkeys(SWITCHES, True))
    finally:
        tune(pause_gc=before["pause_gc"], arrow_jemalloc=before["arrow_jemalloc"])


def enabled(name: str) -> bool:
    """Whether switch ``name`` (one of :data:`SWITCHES`) is on."""
    return _current()[name]


def apply_freed_heap() -> None:
    """Keep freed heap for the next allocations if ``keep_freed_heap`` is on (once per process)."""
    if _current()["keep_freed_heap"]:
        from ._core import _io

        _io.keep_freed_heap()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block if ``pause_gc`` is on, and leave it as it
    was after.  Reference counting still frees everything acyclic meanwhile; cycles made
    in the block are collected by the next collection after it."""
    if not _current()["pause_gc"] or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _nothing() -> None:
    pass


def switch_arrow_pool() -> Callable[[], None]:
    """Make jemalloc Arrow's default memory pool if ``arrow_jemalloc`` is on
    (:func:`hpcio.formats.parquet.use_jemalloc`); returns the function that puts the
    previous pool back."""
    if not _current()["arrow_jemalloc"]:
        return _nothing
    from .formats.parquet import use_jemalloc

    return use_jemalloc()
