"""One progress display for the whole conversion, on rank 0.

Every rank counts the samples and bytes it has written; ranks other than 0 send their
running totals to rank 0 at most twice a second (non-blocking), and rank 0 shows the sum:
a tqdm bar on a terminal, or a plain line every ``HPCIO_PROGRESS_INTERVAL`` seconds
(default 30) when stderr is not a terminal, as in a Slurm log.
"""

from __future__ import annotations

import os
import sys
import time

from ._comm import Comm

__all__ = ["Progress", "format_rate"]

_SEND_INTERVAL = 0.5


def format_rate(samples: int, nbytes: int, seconds: float) -> str:
    """``"1200 samples/s, 3.4 MB/s"``."""
    seconds = max(seconds, 1e-9)
    return f"{samples / seconds:.0f} samples/s, {nbytes / seconds / 1e6:.1f} MB/s"


class Progress:
    """Aggregated progress; every rank calls ``advance`` and, at the end, ``finish``."""

    def __init__(self, comm: Comm, total_samples: int, total_bytes: int, *, enabled: bool = True,
                 stream=None, description: str = "convert"):
        self.comm = comm
        self.total_samples = total_samples
        self.total_bytes = total_bytes
        self.enabled = enabled
        self.samples = 0
        self.nbytes = 0
        self.start = time.monotonic()
        self._last_send = 0.0
        self._requests: list = []
        self._stream = sys.stderr if stream is None else stream
        self._others: dict[int, tuple[int, int]] = {}
        self._done: set[int] = set()
        self._bar = None
        self._last_line = self.start
        self._interval = float(os.environ.get("HPCIO_PROGRESS_INTERVAL", "30"))
        if comm.rank == 0 and enabled:
            if self._stream.isatty():
                from tqdm import tqdm

                self._bar = tqdm(total=total_samples, unit="sample", desc=description,
                                 file=self._stream, dynamic_ncols=True, smoothing=0.1)

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

    def _show(self, final: bool = False) -> None:
        if not self.enabled:
            return
        samples, nbytes = self._totals()
        elapsed = time.monotonic() - self.start
        if self._bar is not None:
            self._bar.n = samples
            self._bar.set_postfix_str(f"{nbytes / 1e6:.1f} MB, {nbytes / max(elapsed, 1e-9) / 1e6:.1f} MB/s",
                                      refresh=False)
            self._bar.refresh()
            return
        now = time.monotonic()
        if not final and now - self._last_line < self._interval:
            return
        self._last_line = now
        pct = 100.0 * samples / self.total_samples if self.total_samples else 100.0
        rate = samples / max(elapsed, 1e-9)
        left = (self.total_samples - samples) / rate if rate > 0 else float("nan")
        eta = "done" if final else (f"ETA {left:.0f}s" if left == left else "ETA ?")
        print(
            f"[hpcio convert] {samples}/{self.total_samples} samples ({pct:.1f}%), "
            f"{nbytes / 1e6:.1f} MB, {format_rate(samples, nbytes, elapsed)}, {eta}",
            file=self._stream,
            flush=True,
        )

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
        if self.comm.rank == 0:
            self._show(final=True)
            if self._bar is not None:
                self._bar.close()
        samples, nbytes = self._totals()
        return samples, nbytes, elapsed
