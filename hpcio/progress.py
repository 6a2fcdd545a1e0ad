"""The one progress display: a tqdm bar on a terminal, plain lines in a log.

Conversion and staging report progress the same way.  On a terminal the display is a
tqdm bar; otherwise (a Slurm log, a pipe) it prints a line at most every ``interval``
seconds and one last line when the work ends, so a log holds a readable history rather
than a bar's carriage returns.  The caller says what a line reads.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["ProgressDisplay", "INTERVAL_ENV", "interval_from_env"]

# Seconds between two plain lines, for the displays that let the environment choose.
INTERVAL_ENV = "HPCIO_PROGRESS_INTERVAL"


def interval_from_env(default: float) -> float:
    """``$HPCIO_PROGRESS_INTERVAL`` seconds, else ``default``."""
    return float(os.environ.get(INTERVAL_ENV, default))


class ProgressDisplay:
    """Progress towards ``total`` units of work.

    ``line(done, elapsed, final)`` returns the text of a plain line; ``postfix(done,
    elapsed)``, if given, the text shown after the bar.  ``advance`` may be called from
    several threads at once.
    """

    def __init__(self, total: int, *, label: str, unit: str, line: Callable[[int, float, bool], str],
                 interval: float, stream=None, unit_scale: bool = False,
                 postfix: Callable[[int, float], str] | None = None):
        self.total = total
        self.done = 0
        self._line = line
        self._postfix = postfix
        self._stream = sys.stderr if stream is None else stream
        self._interval = interval
        self._lock = threading.Lock()
        self._start = self._last = time.monotonic()
        self._bar = None
        if getattr(self._stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit=unit, unit_scale=unit_scale, desc=label, file=self._stream,
                             dynamic_ncols=True, smoothing=0.1)

    def advance(self, n: int) -> None:
        """Count ``n`` more units done."""
        with self._lock:
            self._show(self.done + n, final=False)

    def show(self, done: int) -> None:
        """Count ``done`` units done in all."""
        with self._lock:
            self._show(done, final=False)

    def close(self, done: int | None = None) -> None:
        """Show the final count (``done`` in all, if given): the bar's last state, or a
        last line."""
        with self._lock:
            self._show(self.done if done is None else done, final=True)
            if self._bar is not None:
                self._bar.close()

    def _show(self, done: int, final: bool) -> None:
        self.done = done
        now = time.monotonic()
        if self._bar is not None:
            if self._postfix is not None:
                self._bar.set_postfix_str(self._postfix(done, now - self._start), refresh=False)
            self._bar.update(done - self._bar.n)
            return
        if not final and now - self._last < self._interval:
            return
        self._last = now
        print(self._line(done, now - self._start, final), file=self._stream, flush=True)
