"""Quotas read from the filesystem's own tools, never assumed.

A tier's quota is what one of these says, and its source is named with every figure:

* the site's wrapper named by the site profile (``idr_quota_user`` on Jean Zay), whose
  output has one section per space (``HOME``, ``WORK``...);
* ``lfs quota -q -u $USER <mount>`` on Lustre;
* ``mmlsquota -u $USER -Y <device>`` on IBM Spectrum Scale (GPFS).

When none of them is present or answers, the tier has no known quota and only
``statvfs`` limits a staging plan.  A tool that fails or prints something unexpected
gives no quota rather than a guessed one.
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import os
import re
import shutil
import subprocess

from ..units import parse_bytes

__all__ = ["Quota", "mount_of", "parse_lfs_quota", "parse_mmlsquota", "parse_idr_quota_user", "read_quota"]

# Seconds a quota tool may take; a hung metadata server must not hang a staging plan.
_TOOL_TIMEOUT = 20.0


@dataclasses.dataclass(frozen=True)
class Quota:
    """Usage and limits of one user or project on one filesystem, and where they came from.

    ``None`` means unknown (or no limit); ``source`` names the tool (``lfs quota``...).
    """

    source: str
    used_bytes: int | None = None
    limit_bytes: int | None = None
    used_inodes: int | None = None
    limit_inodes: int | None = None


def mount_of(path) -> tuple[str, str, str] | None:
    """``(mount point, filesystem type, source)`` of the mount holding ``path``."""
    target = os.path.abspath(path)
    while not os.path.exists(target) and os.path.dirname(target) != target:
        target = os.path.dirname(target)
    target = os.path.realpath(target)
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.readlines()
    except OSError:
        return None
    best = None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 2:
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, rest[0], rest[1])
    return best


def _kib(token: str) -> int:
    return int(token.rstrip("*")) * 1024


def _limit(hard: int, soft: int) -> int | None:
    """The binding limit: the hard one, else the soft one; 0 means none."""
    return hard or soft or None


def parse_lfs_quota(text: str) -> Quota | None:
    """``lfs quota -q -u USER MOUNT`` output: the filesystem, then kbytes, quota, limit,
    grace, files, quota, limit, grace (a ``*`` marks a value over its quota; a long
    filesystem name puts the figures on the next line)."""
    tokens = text.split()
    start = next((i for i, t in enumerate(tokens) if t.startswith("/")), None)
    if start is None or len(tokens) < start + 9:
        return None
    kbytes, bsoft, bhard, _grace, files, isoft, ihard = tokens[start + 1 : start + 8]
    try:
        return Quota(
            source="lfs quota",
            used_bytes=_kib(kbytes),
            limit_bytes=_limit(_kib(bhard), _kib(bsoft)),
            used_inodes=int(files.rstrip("*")),
            limit_inodes=_limit(int(ihard.rstrip("*")), int(isoft.rstrip("*"))),
        )
    except ValueError:
        return None


def parse_mmlsquota(text: str, device: str | None = None) -> Quota | None:
    """``mmlsquota -u USER -Y`` output: a ``HEADER`` line naming the colon-separated
    fields, then one line per filesystem (block figures in KiB).  ``device`` picks the
    filesystem; without it the first user line is taken."""
    header, rows = None, []
    for line in text.splitlines():
        cells = line.strip().split(":")
        if len(cells) > 3 and cells[0] == "mmlsquota":
            if cells[2] == "HEADER":
                header = cells
            elif header is not None:
                rows.append(dict(zip(header, cells)))
    wanted = (device or "").removeprefix("/dev/")
    for row in rows:
        if row.get("quotaType") != "USR" or (wanted and row.get("filesystemName") != wanted):
            continue
        try:
            return Quota(
                source="mmlsquota",
                used_bytes=int(row["blockUsage"]) * 1024,
                limit_bytes=_limit(int(row["blockLimit"]) * 1024, int(row["blockQuota"]) * 1024),
                used_inodes=int(row["filesUsage"]),
                limit_inodes=_limit(int(row["filesLimit"]), int(row["filesQuota"])),
            )
        except (KeyError, ValueError):
            return None
    return None


_SECTION = re.compile(r"^\s*([A-Z][A-Z_]*)\s*:?\s*$")
# A count, maybe with thousands separators ("500 000"), not running into the percentage
# that follows it ("500 000 100.00%").
_COUNT = r"(\d{1,3}(?:[ ,]\d{3}(?![\d.,%]))+|\d+)"
_INODES = re.compile(rf"INODE.*?{_COUNT}\s*/\s*{_COUNT}")
_STORAGE = re.compile(r"STORAGE.*?([\d.,]+\s*[kKMGTP]?i?B?)\s*/\s*([\d.,]+\s*[kKMGTP]?i?B?)")


def _rounded_bytes(text: str) -> int:
    """``"2,98 GiB"`` as bytes: a rounded figure (decimal comma allowed) times its unit."""
    m = re.fullmatch(r"([\d.,]+)\s*(\S*)", text.strip())
    return round(float(m.group(1).replace(",", ".")) * parse_bytes("1" + m.group(2)))


def parse_idr_quota_user(text: str, section: str, source: str = "idr_quota_user") -> Quota | None:
    """The ``section`` (``HOME``, ``WORK``, ``STORE``...) of Jean Zay's ``idr_quota_user``:
    a line with the section's name, then ``INODE`` and ``STORAGE`` lines that each carry
    ``used/limit`` (bytes with a unit).  The tool's figures are refreshed once a day."""
    current, found = None, {}
    for line in text.splitlines():
        head = _SECTION.match(line)
        if head:
            current = head.group(1)
            continue
        if current != section:
            continue
        if m := _INODES.search(line):
            found["used_inodes"], found["limit_inodes"] = (int(re.sub(r"\D", "", g)) for g in m.groups())
        elif m := _STORAGE.search(line):
            try:
                found["used_bytes"], found["limit_bytes"] = (_rounded_bytes(g) for g in m.groups())
            except ValueError:
                return None
    return Quota(source=f"{source}, refreshed daily", **found) if found else None


@functools.lru_cache(maxsize=64)
def _output(argv: tuple[str, ...]) -> str | None:
    """What a quota tool prints, once per process; None when it fails."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def read_quota(path, *, site_command: str | None = None, section: str | None = None) -> Quota | None:
    """The quota of this user on the filesystem holding ``path``, from the first tool that
    answers: the site's wrapper (``site_command``, its ``section``), then ``lfs quota`` on
    Lustre or ``mmlsquota`` on GPFS.  None when no tool applies or answers."""
    if site_command and section and shutil.which(site_command):
        text = _output((site_command,))
        quota = parse_idr_quota_user(text, section, source=site_command) if text else None
        if quota is not None:
            return quota
    mount = mount_of(path)
    if mount is None:
        return None
    point, fstype, device = mount
    if fstype == "lustre" and shutil.which("lfs"):
        text = _output(("lfs", "quota", "-q", "-u", _user(), point))
        return parse_lfs_quota(text) if text else None
    if fstype == "gpfs" and shutil.which("mmlsquota"):
        text = _output(("mmlsquota", "-u", _user(), "-Y"))
        return parse_mmlsquota(text, device) if text else None
    return None
