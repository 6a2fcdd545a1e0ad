"""Where a conversion's time and memory go: each rank's wall seconds in each phase of the
job, and its peak resident memory."""

from __future__ import annotations

import resource
import time

__all__ = ["PhaseClock", "peak_rss_bytes"]


def peak_rss_bytes() -> int:
    """This process's peak resident set: ``VmHWM``, which exec resets (``ru_maxrss``,
    the fallback, keeps the parent's figure from before the fork)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PhaseClock:
    """Wall seconds one rank spends in each phase of a conversion, from the job's start.

    ``measure``: sizing the sources; ``plan``: the plan and the shards left to write;
    ``read``: reading, mapping and filtering this rank's share; ``encode``: making the
    records of what it read, on more than one rank; ``exchange``: sending and receiving
    them (or only their lengths, where each rank places its records); ``write``: writing
    this rank's shards (or its records of every shard); ``publish``: making them durable
    and recording them;
    ``wait``: waiting for the slowest rank; ``merge``: the dataset index and the rename
    (rank 0).  Collective steps count their wait in their own phase (``encode`` agrees on
    the writers' options, ``exchange`` waits for every rank's parcels).
    """

    PHASES = ("measure", "plan", "read", "encode", "exchange", "write", "wait", "publish", "merge")
    # Half a millisecond, below what the printed figures resolve: shorter phases are left
    # out of them, and ranks closer than this are shown as one figure.
    SHOWN = 5e-4

    def __init__(self, start: float):
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self._at = start

    def lap(self, phase: str) -> None:
        """Count the time since the last lap as ``phase``."""
        now = time.monotonic()
        self.seconds[phase] += now - self._at
        self._at = now
