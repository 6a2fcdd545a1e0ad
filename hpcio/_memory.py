"""How much memory this process may still fill: the page cache a read-ahead may use."""

from __future__ import annotations

import os

__all__ = ["available_bytes"]


def available_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo``, capped by the room left under this process's
    memory cgroup limit (v2 ``memory.max - memory.current``, v1 ``limit - usage``), whose
    page cache counts against the limit; None when neither can be read."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    room = _cgroup_room()
    if room is not None:
        available = room if available is None else min(available, room)
    return available


def _cgroup_room() -> int | None:
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and not controllers:  # v2, alone or beside v1 ("unified")
            root = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
            base, limit_name, used_name = root + path, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, limit_name, used_name = ("/sys/fs/cgroup/memory" + path, "memory.limit_in_bytes",
                                           "memory.usage_in_bytes")
        else:
            continue
        limit, used = _read_int(f"{base}/{limit_name}"), _read_int(f"{base}/{used_name}")
        if limit is not None and used is not None:
            return max(limit - used, 0)
    return None


def _read_int(path: str) -> int | None:
    """The integer in a cgroup file; None for "max", or when it cannot be read."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
