"""One progress display for the whole conversion, on rank 0.

Every rank counts the samples and bytes it has written; ranks other than 0 send their
running totals to rank 0 at most twice a second (non-blocking), and rank 0 shows the sum
(:class:`hpcio.progress.ProgressDisplay`): a tqdm bar on a terminal, or a plain line every
``HPCIO_PROGRESS_INTERVAL`` seconds (default 30) when stderr is not a terminal, as in a
Slurm log.
"""

from __future__ import annotations

import time

from ..distributed.comm import Comm
from ..progress import ProgressDisplay, interval_from_env
from ..units import format_bytes

__all__ = ["Progress", "format_rate"]

_SEND_INTERVAL = 0.5
_LINE_INTERVAL = 30.0


def format_rate(samples: int, nbytes: int, seconds: float) -> str:
    """``"1200 samples/s, 3.40 MB/s"``."""
    seconds = max(seconds, 1e-9)
    return f"{samples / seconds:.0f} samples/s, {format_bytes(nbytes / seconds)}/s"


class Progress:
    """Aggregated progress; every rank calls ``advance`` and, at the end, ``finish``."""

    def __init__(self, comm: Comm, total_samples: int, total_bytes: int, *, enabled: bool = True,
                 stream=None, description: str = "convert"):
        self.comm = comm
        self.total_samples = total_samples
        self.total_bytes = total_bytes
        self.samples = 0
        self.nbytes = 0
        self.start = time.monotonic()
        self._last_send = 0.0
        self._requests: list = []
        self._others: dict[int, tuple[int, int]] = {}
        self._done: set[int] = set()
        self._display = None
        if comm.rank == 0 and enabled:
            self._display = ProgressDisplay(total_samples, label=description, unit="sample", line=self._line,
                                            postfix=self._postfix, interval=interval_from_env(_LINE_INTERVAL),
                                            stream=stream)

    # --- totals ---------------------------------------------------------------------
    def _totals(self) -> tuple[int, int]:
        samples = self.samples + sum(s for s, _ in self._others.values())
        nbytes = self.nbytes + sum(b for _, b in self._others.values())
        return samples, nbytes

    def _absorb(self, messages) -> None:
        for rank, samples, nbytes, done in messages:
            self._others[rank] = (samples, nbytes)
            if done:
                self._done.add(rank)

    def _show(self) -> None:
        if self._display is not None:
            self._display.show(self._totals()[0])

    def _postfix(self, _samples: int, elapsed: float) -> str:
        nbytes = self._totals()[1]
        return f"{format_bytes(nbytes)}, {format_bytes(nbytes / max(elapsed, 1e-9))}/s"

    def _line(self, samples: int, elapsed: float, final: bool) -> str:
        nbytes = self._totals()[1]
        pct = 100.0 * samples / self.total_samples if self.total_samples else 100.0
        rate = samples / max(elapsed, 1e-9)
        left = (self.total_samples - samples) / rate if rate > 0 else float("nan")
        eta = "done" if final else (f"ETA {left:.0f}s" if left == left else "ETA ?")
        return (f"[hpcio convert] {samples}/{self.total_samples} samples ({pct:.1f}%), "
                f"{format_bytes(nbytes)}, {format_rate(samples, nbytes, elapsed)}, {eta}")

    # --- called by every rank ---------------------------------------------------------
    def advance(self, samples: int, nbytes: int) -> None:
        self.samples += samples
        self.nbytes += nbytes
        if self.comm.size == 1:
            self._show()
            return
        now = time.monotonic()
        if self.comm.rank == 0:
            self._absorb(self.comm.poll_progress())
            self._show()
        elif now - self._last_send >= _SEND_INTERVAL:
            self._last_send = now
            self._requests.append(
                self.comm.send_progress((self.comm.rank, self.samples, self.nbytes, False))
            )

    def finish(self) -> tuple[int, int, float]:
        """Collect every rank's last count; returns (samples, bytes, seconds) on rank 0."""
        if self.comm.size > 1:
            if self.comm.rank == 0:
                while len(self._done) < self.comm.size - 1:
                    self._absorb([self.comm.recv_progress()])
                    self._show()
            else:
                self._requests.append(
                    self.comm.send_progress((self.comm.rank, self.samples, self.nbytes, True))
                )
                self.comm.wait_all(self._requests)
                self._requests = []
        elapsed = time.monotonic() - self.start
        if self._display is not None:
            self._display.close(self._totals()[0])
        samples, nbytes = self._totals()
        return samples, nbytes, elapsed
