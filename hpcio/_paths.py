"""Names read from files, resolved inside the directory they belong to.

A manifest entry, a part name in a root ``zarr.json`` or a file named by an index is
data, not a path the user chose: whoever wrote the file may have written
``../../victim/x`` or ``/etc/passwd``.  Every such name goes through
:func:`resolve_inside`, which refuses absolute names, ``..`` components and names
whose resolved path (symbolic links followed) leaves the directory.
"""

from __future__ import annotations

import os

from .errors import PathEscapeError

__all__ = ["check_relative_name", "encodable", "resolve_inside", "is_inside", "listed_inside", "named_inside"]


def check_relative_name(name, *, what: str, source, offset=None, sample=None) -> str:
    """``name`` if it is a non-empty relative path without ``..`` components or NUL
    that the file system can encode (JSON can hold a lone surrogate); else
    PathEscapeError naming ``what`` and where it was read (file ``source``, byte
    ``offset``, ``sample``)."""
    if not isinstance(name, str) or not name or "\0" in name or not encodable(name):
        raise PathEscapeError(f"{what} {name!r} is not a file name", path=source, offset=offset, sample=sample)
    parts = name.replace("\\", "/").split("/")
    if os.path.isabs(name) or name.startswith(("/", "\\")) or ".." in parts:
        raise PathEscapeError(f"{what} {name!r} leaves its directory", path=source, offset=offset, sample=sample)
    return name


def encodable(name: str) -> bool:
    """Whether the file system can encode ``name`` (JSON can hold a lone surrogate, a
    file name cannot)."""
    try:
        os.fsencode(name)
    except UnicodeEncodeError:
        return False
    return True


def is_inside(path: str, root: str) -> bool:
    """Whether the absolute ``path`` is ``root`` or lies below it (both already resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_inside(root, name, *, what: str, source, follow_last: bool = True) -> str:
    """The path of ``name`` under the directory ``root``, refused with PathEscapeError
    (naming ``what``, the name and the file ``source`` it came from) when it leaves
    ``root``, lexically or through a symbolic link.

    With ``follow_last=False`` a link in the last component is the entry itself (what
    an unlink removes), so only its parent directories are resolved.
    """
    root = os.fspath(root)
    check_relative_name(name, what=what, source=source)
    path = os.path.join(root, name)
    real_root = os.path.realpath(root)
    if follow_last:
        real = os.path.realpath(path)
    else:
        head, tail = os.path.split(os.path.normpath(path))
        real = os.path.join(os.path.realpath(head), tail)
    if not is_inside(real, real_root):
        raise PathEscapeError(f"{what} {name!r} resolves to {real}, outside {real_root}", path=source)
    return path


# Directories whose links into a dataset elsewhere are hpcio's own (a node cache's
# mirror): real path of the mirror -> real path of the dataset its links lead into.
_TRUSTED_LINKS: dict[str, str] = {}


def trust_links(mirror, target) -> None:
    """Accept, in :func:`listed_inside`, links under ``mirror`` that lead into ``target``:
    a node cache mirrors a dataset with links to the files it has not fetched."""
    _TRUSTED_LINKS[os.path.realpath(mirror)] = os.path.realpath(target)


def _leaves(real_root: str, real: str) -> bool:
    """Whether the resolved ``real`` lies outside ``real_root``, other than through a
    node cache mirror's links into its dataset."""
    return not is_inside(real, real_root) and not any(
        is_inside(real_root, mirror) and is_inside(real, target) for mirror, target in _TRUSTED_LINKS.items())


def listed_inside(directory, names, *, what: str) -> list[str]:
    """``directory``'s entries ``names`` as paths, refusing with PathEscapeError one that
    is a symbolic link leading out of ``directory`` (a shard a listing finds is the
    dataset's; a link to ``/etc`` or another user's file is not).  Only links are
    resolved, so listing 10^5 plain shards costs no ``realpath``."""
    directory = os.fspath(directory)
    real_root = None
    out = []
    for name in names:
        path = os.path.join(directory, name)
        if os.path.islink(path):
            real_root = real_root or os.path.realpath(directory)
            real = os.path.realpath(path)
            if _leaves(real_root, real):
                raise PathEscapeError(f"{what} {name!r} is a symbolic link to {real}, outside {real_root}",
                                      path=directory)
        out.append(path)
    return out


def named_inside(directory, name: str, *, what: str, source) -> str:
    """The path of the file ``name`` (relative, from an index) under ``directory``,
    refusing with PathEscapeError one that a symbolic link (the file, or a directory on
    its way) leads out of ``directory``.  Only a name with a directory in it, or a file
    that is a link, is resolved: a plain shard costs one ``lstat``."""
    directory = os.fspath(directory)
    path = os.path.join(directory, name)
    if "/" in name or os.path.islink(path):
        real_root, real = os.path.realpath(directory), os.path.realpath(path)
        if _leaves(real_root, real):
            raise PathEscapeError(f"{what} {name!r} resolves to {real}, outside {real_root}", path=source)
    return path
