"""What makes one command line safe to resubmit: a graceful stop and a finished output.

A batch job is resubmitted (or requeued) with the very command it ran before, so
``--resume`` must handle every state the last run can have left:

* nothing yet: it starts;
* a partial output after a kill -9: the complete shards are kept (:mod:`.resume`);
* a partial output after a time limit: Slurm sends SIGTERM, waits ``KillWait`` seconds,
  then SIGKILL.  Under :func:`stop_on_signals` a SIGTERM (or SIGUSR1, which
  ``--signal=USR1@<seconds>`` sends ahead of the limit) asks the converter to stop at the
  next round boundary: every rank finishes the round it is writing, the ranks agree to
  stop, and :class:`ConversionInterrupted` says to resubmit.  A SIGKILL before that
  leaves the same resumable state as a kill -9;
* a finished output (a requeue of a job that had completed): :func:`finished_output`
  verifies it and the conversion returns without writing anything.

Signal handlers are process-wide state, so only a program (the CLI) installs them, by
entering :func:`stop_on_signals`; a library call of :func:`hpcio.convert` never does.
"""

from __future__ import annotations

import contextlib
import os
import signal

from ..errors import ConversionInterrupted, HpcioError

__all__ = [
    "INTERRUPTED_EXIT_CODE",
    "ConversionInterrupted",
    "stop_on_signals",
    "stop_requested",
    "raise_if_stopped",
    "finished_output",
]

#: Exit code of a conversion stopped by a signal at a round boundary (``EX_TEMPFAIL``:
#: a temporary failure, the same command will succeed when run again).
INTERRUPTED_EXIT_CODE = ConversionInterrupted.exit_code

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_received: list[int] = []  # signals caught by the handler, in order
_agreed: list[int] = []  # the signal every rank agreed to stop on, once they have


def _record(signum, frame) -> None:
    _received.append(signum)


@contextlib.contextmanager
def stop_on_signals(signals=STOP_SIGNALS):
    """Within this block, SIGTERM and SIGUSR1 ask a running conversion to stop at the next
    round boundary instead of killing the process; the previous handlers come back after."""
    _received.clear()
    _agreed.clear()
    previous = {s: signal.signal(s, _record) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def stop_requested(comm) -> bool:
    """Collective, at a round boundary: True on every rank when any rank caught a stop
    signal, so all ranks leave the same round together and none waits in a collective."""
    mine = _received[0] if _received else 0
    caught = [s for s in comm.allgather(mine) if s]
    if caught:
        _agreed[:] = caught[:1]
    return bool(caught)


def raise_if_stopped(staging: str, written: int, todo: int) -> None:
    """After the rounds: raise :class:`ConversionInterrupted` when they were cut short
    (``written`` of the ``todo`` shards this run had to write are in place)."""
    if not _agreed:
        return
    name = signal.Signals(_agreed[0]).name
    _agreed.clear()
    raise ConversionInterrupted(
        f"stopped by {name} at a round boundary with {written} of {todo} shards of this run written; "
        "the partial output is kept and resumable: resubmit the same command with --resume",
        path=staging,
    )


def _failure_file(staging: str) -> str:
    return os.path.join(staging, ".hpcio", "failed.json")


def record_failure(staging: str, exc: BaseException) -> None:
    """Note in the partial output that the run writing it failed on ``exc`` (a bad sample,
    a read or write error), unless it was interrupted: the same command run again then
    starts over instead of asking for a ``--resume`` that the fixed input would refuse."""
    if isinstance(exc, (KeyboardInterrupt, ConversionInterrupted)) or not os.path.isdir(os.path.dirname(
            _failure_file(staging))):
        return
    from .resume import write_json_atomic

    with contextlib.suppress(OSError):
        write_json_atomic(_failure_file(staging), {"error": " ".join(str(exc).split()) or type(exc).__name__,
                                                   "type": type(exc).__name__})


def recorded_failure(staging: str) -> str | None:
    """The error a failed run recorded in the partial output ``staging``, else None."""
    import json

    try:
        with open(_failure_file(staging), encoding="utf-8") as f:
            return str(json.load(f)["error"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def finished_output(comm, dst: str, staging: str, to: str) -> dict | None:
    """Collective: the summary of a finished conversion already at ``dst`` (no partial
    output beside it, and the dataset verifies), else None.  Rank 0 checks, every rank gets
    the answer."""
    summary = None
    if comm.rank == 0 and os.path.isdir(dst) and os.listdir(dst) and not os.path.exists(staging):
        summary = _verified_summary(dst, to)
    summary = comm.bcast(summary)
    if summary is not None:
        summary["ranks"] = comm.size
    return summary


def _verified_summary(dst: str, to: str) -> dict | None:
    from ..registry import get_format

    fmt = get_format(to)
    check = getattr(fmt, "verify", None)
    if check is None:
        return None
    try:
        report = check(dst)
    except (HpcioError, OSError, ValueError):
        return None
    if not report.get("ok"):
        return None
    return {
        "output": dst,
        "format": fmt.NAME,
        "already_complete": True,
        "num_shards": report.get("shards", 0),
        "samples_written": report.get("samples", 0),
        "shards_written": 0,
        "shards_kept": report.get("shards", 0),
    }
