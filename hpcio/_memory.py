"""How much memory this process may still fill: the page cache a read-ahead may use."""

from __future__ import annotations

import os

__all__ = ["available_bytes"]


def available_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo``, capped by the room left under this process's
    memory cgroup limit (v2 ``memory.max - memory.current``, v1 ``limit - usage``), whose
    page cache counts against the limit; None when neither can be read.  As
    ``MemAvailable`` does, the room counts the cgroup's file pages (``active_file`` and
    ``inactive_file`` of ``memory.stat``) as available: the kernel reclaims them for new
    ones, and after an epoch they fill the cgroup."""
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
            return min(limit, max(limit - used, 0) + _file_pages(f"{base}/memory.stat"))
    return None


def _file_pages(stat_path: str) -> int:
    """Bytes of the cgroup's page cache on its file LRU lists (v1 ``total_*``, counting
    its children, else v2's hierarchical figures); 0 when they cannot be read."""
    stats = {}
    try:
        with open(stat_path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                stats[key] = value
    except OSError:
        return 0
    total = 0
    for name in ("active_file", "inactive_file"):
        value = stats.get("total_" + name, stats.get(name))
        try:
            total += int(value) if value is not None else 0
        except ValueError:
            pass
    return total


def _read_int(path: str) -> int | None:
    """The integer in a cgroup file; None for "max", or when it cannot be read."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
