"""Pausing Python's cyclic garbage collector while many objects are built that all stay
alive (a conversion round, a read batch)."""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def cyclic_gc_paused():
    """Pause the cyclic collector for the block, and leave it as it was after.

    Every collection that runs while a batch of samples is built walks the samples built
    so far to free nothing, and promotes them so that the older generations fill up and
    are walked too.  Reference counting still frees everything acyclic meanwhile; cycles
    made in the block are collected by the next collection after it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
