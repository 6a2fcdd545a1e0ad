"""What a staging source holds and what its destination already has, with the rules
for symbolic links on both sides.

In the source, a link is copied as a link (``symlinks="copy"``, the default) when its
target lies inside the source: the copy holds the same relative target, so it stays
inside the destination.  A link leading outside the source is refused, because a
dataset that is staged must not carry, or expose, files its owner did not put in it.
``"follow"`` copies what links point to, each target checked to lie inside the source;
``"follow-outside"`` lifts that check on the user's explicit request; ``"refuse"``
refuses every link.

In the destination, staging never writes through a link: a link where a directory is
needed, or above a planned file, is refused; a link where a file is planned is not
trusted as that file and is replaced by the copy.
"""

from __future__ import annotations

import dataclasses
import os
import stat

from .._paths import is_inside
from ..errors import SymlinkError
from .manifest import MANIFEST_NAME, TMP_MARK, LinkRecord, is_journal

__all__ = ["SourceFile", "SYMLINK_MODES", "scan_source", "scan_destination", "make_real_dir", "place_links"]

SYMLINK_MODES = ("copy", "refuse", "follow", "follow-outside")
_OWN_FILES = (MANIFEST_NAME,)


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """A file of the source dataset, by path relative to the dataset root; ``origin`` is
    the resolved path to read when a followed link leads there."""

    rel: str
    size: int
    mtime_ns: int
    mode: int
    origin: str | None = None


def _source_file(rel: str, st: os.stat_result, origin: str | None = None) -> SourceFile:
    return SourceFile(rel, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), origin)


def scan_source(src: str, symlinks: str = "copy") -> tuple[list[SourceFile], list[str], list[LinkRecord]]:
    """The files, directories and links (copied as links) of the source ``src``."""
    if symlinks not in SYMLINK_MODES:
        raise SymlinkError(f"symlinks must be one of {', '.join(SYMLINK_MODES)}, got {symlinks!r}")
    if os.path.isfile(src):
        return _single_file(src), [], []
    walk = _SourceWalk(src, symlinks)
    walk.run()
    walk.files.sort(key=lambda f: f.rel)
    return walk.files, sorted(walk.dirs), sorted(walk.links, key=lambda link: link.path)


def _single_file(src: str) -> list[SourceFile]:
    """A single-file dataset (a JINX file) travels with its binary sidecar; the user
    named the file, so a link there is followed."""
    names = [os.path.basename(src)]
    sidecar = os.path.splitext(src)[0] + ".binx"
    if sidecar != src and os.path.isfile(sidecar):
        names.append(os.path.basename(sidecar))
    base = os.path.dirname(src)
    files = []
    for name in names:
        path = os.path.join(base, name)
        files.append(_source_file(name, os.stat(path), os.path.realpath(path) if os.path.islink(path) else None))
    return files


class _SourceWalk:
    """A depth-first walk of a source directory applying the link policy."""

    def __init__(self, src: str, symlinks: str):
        self.src, self.mode = src, symlinks
        self.real_src = os.path.realpath(src)
        self.files: list[SourceFile] = []
        self.dirs: list[str] = []
        self.links: list[LinkRecord] = []

    def run(self) -> None:
        st = os.stat(self.src)
        stack: list[tuple[str, str, tuple[tuple[int, int], ...]]] = [("", self.src, ((st.st_dev, st.st_ino),))]
        while stack:
            rel_dir, real_dir, ancestors = stack.pop()
            with os.scandir(real_dir) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if not rel_dir and (entry.name in _OWN_FILES or is_journal(entry.name)):
                    continue
                if entry.is_symlink():
                    target = self._link(rel, entry.path)
                    if target is None:
                        continue
                    path, st = target, os.stat(target)
                else:
                    path, st = entry.path, entry.stat(follow_symlinks=False)
                origin = path if path != os.path.join(self.src, rel) else None
                if stat.S_ISDIR(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if key in ancestors:
                        raise SymlinkError(f"link {rel} leads back to a directory holding it (a loop)",
                                           path=entry.path)
                    self.dirs.append(rel)
                    stack.append((rel, path, ancestors + (key,)))
                elif stat.S_ISREG(st.st_mode):
                    self.files.append(_source_file(rel, st, origin))

    def _link(self, rel: str, path: str) -> str | None:
        """Apply the policy to the link ``rel``: None when it is recorded as a link,
        else the resolved path to copy from; SymlinkError when it is refused."""
        target = os.readlink(path)
        real = os.path.realpath(path)
        inside = is_inside(real, self.real_src)
        if self.mode == "refuse":
            raise SymlinkError(f"source holds the symbolic link {rel} -> {target}; staging was asked to "
                               "refuse links", path=path)
        if not inside and self.mode != "follow-outside":
            hint = ("--follow-symlinks --allow-outside-links (symlinks='follow-outside') copies what it "
                    "points to")
            raise SymlinkError(f"symbolic link {rel} -> {target} leads outside the source ({real}); {hint}",
                               path=path)
        if self.mode == "copy":
            link_dir = os.path.realpath(os.path.dirname(path))
            self.links.append(LinkRecord(rel, os.path.relpath(real, link_dir)))
            return None
        if not os.path.exists(real):
            raise SymlinkError(f"symbolic link {rel} -> {target} points to nothing", path=path)
        return real


def scan_destination(dst: str, planned: set[str], dirs: list[str]) -> tuple[dict[str, int], list[str], list[str]]:
    """Sizes of planned files already in ``dst`` as regular files, our stale temporary
    files there, and the links in place of planned files (to replace).

    Raises SymlinkError for a link in ``dst`` where a directory is needed or above a
    planned entry: staging would write through it.
    """
    existing: dict[str, int] = {}
    stale: list[str] = []
    replace: list[str] = []
    if not os.path.isdir(dst):
        return existing, stale, replace
    needed_dirs = set(dirs)
    for root, subdirs, names in os.walk(dst):
        rel_root = os.path.relpath(root, dst)
        for name in subdirs + names:
            full = os.path.join(root, name)
            rel = name if rel_root == "." else f"{rel_root}/{name}".replace(os.sep, "/")
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                if rel in needed_dirs:
                    raise SymlinkError(f"destination entry {rel} is a symbolic link to {os.readlink(full)} "
                                       "where staging needs a directory; it will not write through it; "
                                       "remove the link", path=full)
                if rel in planned:
                    replace.append(rel)
                continue
            if rel in planned and stat.S_ISREG(st.st_mode):
                existing[rel] = st.st_size
                continue
            head, mark, _job = rel.rpartition(TMP_MARK)
            if mark and (head in planned or head == MANIFEST_NAME) and not stat.S_ISDIR(st.st_mode):
                stale.append(rel)
    stale.sort()
    return existing, stale, sorted(replace)


def make_real_dir(dst: str, rel: str) -> None:
    """Create directory ``rel`` under ``dst`` (its parent already made); SymlinkError
    when a link stands there, so nothing is written through it."""
    path = os.path.join(dst, rel)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise SymlinkError(f"destination entry {rel} is not a directory (a link or a file) where "
                               "staging needs one; it will not write through it", path=path) from None


def place_links(dst: str, links: list[LinkRecord]) -> None:
    """Create the source's links in ``dst``: one already holding its target is kept, a
    stale link or file in its place is replaced (the entry itself, never its target)."""
    for link in links:
        path = os.path.join(dst, link.path)
        if os.path.islink(path) and os.readlink(path) == link.target:
            continue
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        os.symlink(link.target, path)
