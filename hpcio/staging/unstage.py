"""Removing a staged copy: only the regular files (and links) that ``stage`` put there.

The manifest names what to remove, but a manifest is data: a copied or planted one may
list ``../victim/x`` or a path under a directory that is now a link elsewhere.  Every
entry is resolved inside the staged directory before anything is removed, and only
regular files (or the links staging recorded, holding the recorded target) are
unlinked; a dry run lists exactly what a real run would remove.
"""

from __future__ import annotations

import os
import stat

from .._paths import resolve_inside
from ..errors import StagingError
from .manifest import MANIFEST_NAME, TMP_MARK, is_journal, read_manifest

__all__ = ["unstage"]


def unstage(path, *, dry_run: bool = False) -> list[str]:
    """Remove a staged copy made by :func:`hpcio.staging.stage`: the files and links its
    manifest lists, then the manifest, leftover journals and temporary files, and
    directories left empty.

    Files the manifest does not list are kept (with their directories), and so is any
    entry that is not a regular file (a directory, or a link where a file was staged).

    Returns
    -------
    list of str
        Paths removed (or that would be, with ``dry_run``).

    Raises
    ------
    StagingError
        ``path`` holds no staging manifest: it was not made by ``hpcio stage``.
    PathEscapeError
        A manifest entry leads outside ``path``; nothing is removed.
    """
    path = os.path.abspath(os.fspath(path))
    manifest = read_manifest(path) if os.path.isdir(path) else None
    if manifest is None:
        raise StagingError(f"refusing to remove a directory without a staging manifest ({MANIFEST_NAME})",
                           path=path)
    targets = _listed_targets(path, manifest) + _leftovers(path, manifest)
    targets.append(os.path.join(path, MANIFEST_NAME))
    if dry_run:
        return targets
    removed = []
    for target in targets:
        try:
            os.unlink(target)
            removed.append(target)
        except FileNotFoundError:
            pass
    for root, _dirs, _names in sorted(os.walk(path, topdown=False), key=lambda t: -len(t[0])):
        try:
            os.rmdir(root)
        except OSError:
            pass  # not empty: holds files the manifest does not list
    return removed


def _is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _listed_targets(path: str, manifest) -> list[str]:
    """The manifest's files that are regular files inside ``path``, and its links that
    still hold their recorded target; every entry is checked before any is kept."""
    source = os.path.join(path, MANIFEST_NAME)
    files = [resolve_inside(path, rec.path, what="manifest entry", source=source, follow_last=False)
             for rec in manifest.files]
    links = [(resolve_inside(path, rec.path, what="manifest link", source=source, follow_last=False), rec.target)
             for rec in manifest.links]
    targets = [p for p in sorted(set(files)) if _is_regular(p)]
    for link, target in sorted(set(links)):
        if os.path.islink(link) and os.readlink(link) == target:
            targets.append(link)
    return targets


def _leftovers(path: str, manifest) -> list[str]:
    """Temporary files of listed entries (or of the manifest) and journals, found by a
    walk that does not follow links."""
    listed = {rec.path for rec in manifest.files}
    found = []
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            head, mark, _ = rel.rpartition(TMP_MARK)
            ours = (mark and (head in listed or head == MANIFEST_NAME)) or (root == path and is_journal(name))
            if ours and _is_regular(full):
                found.append(full)
    return sorted(found)
