"""Processes of this host that left a mark in a shared file (a lock's holder, a node
cache's consumer): whether they still run, so a dead one's mark can be taken over."""

from __future__ import annotations

import os

__all__ = ["alive"]


def alive(pid) -> bool:
    """Whether process ``pid`` of this host exists (one of another user counts: only the
    kernel's "no such process" says it is gone)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
