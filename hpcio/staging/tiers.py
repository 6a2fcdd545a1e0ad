"""Named storage tiers: where they are, what they hold, how much room is left.

A tier is a directory with a policy: a quota in bytes and inodes, a purge rule, whether
it is shared by every node or local to one, whether compute nodes can reach it.  Tiers
come from, in order:

1. environment variables: ``$HOME``, ``$WORK``, ``$SCRATCH``, ``$JOBSCRATCH``, ``$DSDIR``,
   ``$STORE``, ``$TMPDIR`` and ``/dev/shm`` when it exists, with only the policies their
   names imply (``$TMPDIR`` and ``/dev/shm`` are node-local);
2. the site profile, on the site it describes only (:mod:`hpcio.staging.sites`:
   ``HPCIO_SITE`` or detection), which adds the site's policies (Jean Zay's SCRATCH purge,
   read-only DSDIR, STORE unreachable from compute nodes...);
3. ``$HPCIO_TIERS_CONFIG`` if set, else ``$XDG_CONFIG_HOME/hpcio/tiers.toml``
   (``~/.config/hpcio/tiers.toml``): one ``[tiers.<name>]`` table per tier with ``path``
   and optional ``quota_bytes``, ``quota_inodes``, ``used_bytes``, ``used_inodes``,
   ``purge``, ``purge_days``, ``node_local``, ``read_only``, ``compute_reachable``,
   ``description``; keys override what came before;
4. ``HPCIO_TIERS="name=path,name=path"`` replaces paths (the benchmark convention).

Quotas are never assumed: a tier's quota is the config file's, else what the
filesystem's tools report (:mod:`hpcio.staging.quota`), else there is none; every quota
carries its source.

>>> t = Tier("scratch", "/tmp", purge="unused", purge_days=30)
>>> t.purge_managed, t.quota_label()
(True, "quota of tier 'scratch'")
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import re
import time
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

from ..errors import HpcioError, StagingError
from ..units import parse_bytes
from .quota import mount_of, read_quota
from .sites import detect_site

__all__ = [
    "Tier",
    "FsUsage",
    "KNOWN_TIERS",
    "resolve_tiers",
    "tier_for_path",
    "config_path",
    "fs_usage",
    "filesystem_type",
    "is_node_local",
    "node_local_tier",
    "bench_tier",
]

#: Purge rules: ``None`` (kept), ``"unused"`` (files untouched for ``purge_days`` are
#: deleted, e.g. SCRATCH), ``"job"`` (deleted when the job ends, e.g. JOBSCRATCH),
#: ``"node"`` (lost at reboot or job end, e.g. node-local NVMe or tmpfs).
PURGE_RULES = (None, "unused", "job", "node")

# Filesystems whose contents one node alone sees; used when a tier does not say.
_LOCAL_FS_TYPES = frozenset(
    {"tmpfs", "ramfs", "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "overlay", "vfat"}
)
# Filesystems every node of a cluster shares: never a node cache's default place.
_SHARED_FS_TYPES = frozenset(
    {"gpfs", "lustre", "nfs", "nfs4", "beegfs", "cephfs", "ceph", "fuse.glusterfs", "wekafs", "pvfs2", "orangefs"}
)


@dataclasses.dataclass(frozen=True)
class Tier:
    """One named storage tier.

    Parameters
    ----------
    name : str
        Short name used on the command line (``work``, ``scratch``, ``nvme``...).
    path : str
        Root directory of the tier for this user or job.
    env : str, optional
        Environment variable the path came from.
    quota_bytes, quota_inodes : int, optional
        Quota of the tier (``None`` when unlimited or unknown).
    used_bytes, used_inodes : int, optional
        Current use counted against the quota when known.
    quota_source : str, optional
        Where the quota figures come from (``lfs quota``, ``idr_quota_user (refreshed
        daily)``, ``tier config <path>``...).
    purge : str, optional
        One of :data:`PURGE_RULES`.
    purge_days : int, optional
        Age in days after which unused files are purged (``purge="unused"``).
    node_local : bool
        The tier is private to one node (each node has its own copy).
    read_only : bool
        Users cannot write there (``$DSDIR``).
    compute_reachable : bool
        Compute nodes can reach it (``$STORE`` is only reachable from prepost/archive).
    """

    name: str
    path: str
    env: str | None = None
    quota_bytes: int | None = None
    quota_inodes: int | None = None
    used_bytes: int | None = None
    used_inodes: int | None = None
    quota_source: str | None = None
    purge: str | None = None
    purge_days: int | None = None
    node_local: bool = False
    read_only: bool = False
    compute_reachable: bool = True
    description: str = ""

    def __post_init__(self):
        if self.purge not in PURGE_RULES:
            raise HpcioError(f"tier {self.name!r}: purge must be one of {PURGE_RULES}, got {self.purge!r}")

    @property
    def purge_managed(self) -> bool:
        """True when files left there are deleted by a policy (so mtimes matter)."""
        return self.purge is not None

    def quota_free(self) -> tuple[int | None, int | None]:
        """Bytes and inodes left under the known quota (``None`` where unknown)."""
        free_b = None if self.quota_bytes is None else max(0, self.quota_bytes - (self.used_bytes or 0))
        free_i = None if self.quota_inodes is None else max(0, self.quota_inodes - (self.used_inodes or 0))
        return free_b, free_i

    def quota_label(self) -> str:
        """``quota of tier 'work'``, with the source of its figures when known."""
        source = f" ({self.quota_source})" if self.quota_source else ""
        return f"quota of tier {self.name!r}{source}"


# What a tier's variable says on any machine; a site profile adds its site's policies.
KNOWN_TIERS: dict[str, dict] = {
    "home": dict(env="HOME", description="home directory"),
    "work": dict(env="WORK", description="work space"),
    "scratch": dict(env="SCRATCH", description="scratch space"),
    "jobscratch": dict(env="JOBSCRATCH", purge="job", description="per job, deleted when the job ends"),
    "dsdir": dict(env="DSDIR", description="common datasets"),
    "store": dict(env="STORE", description="long-term storage"),
    "tmp": dict(env="TMPDIR", purge="job", node_local=True, description="job temporary directory"),
    "shm": dict(env=None, default_path="/dev/shm", purge="node", node_local=True,
                description="node memory (tmpfs)"),
}

_FIELDS = {f.name for f in dataclasses.fields(Tier)} - {"name", "quota_source"}
_QUOTA_KEYS = ("quota_bytes", "quota_inodes", "used_bytes", "used_inodes")


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """Path of the tier config file (``$HPCIO_TIERS_CONFIG`` or the XDG default)."""
    env = os.environ if env is None else env
    if env.get("HPCIO_TIERS_CONFIG"):
        return Path(env["HPCIO_TIERS_CONFIG"])
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", "~"), ".config")
    return Path(os.path.expanduser(base)) / "hpcio" / "tiers.toml"


def _expand(path: str, env: Mapping[str, str]) -> str:
    # os.path.expandvars reads os.environ only; expand against the given mapping.
    def sub(m):
        name = m.group(1) or m.group(2)
        return env.get(name, m.group(0))

    return os.path.expanduser(re.sub(r"\$(?:\{(\w+)\}|(\w+))", sub, path))


def _tier_from_options(name: str, options: Mapping, source: str) -> dict:
    unknown = set(options) - _FIELDS - {"default_path"}
    if unknown:
        raise HpcioError(f"{source}: tier {name!r} has unknown keys {sorted(unknown)}; known: {sorted(_FIELDS)}")
    out = dict(options)
    for key in _QUOTA_KEYS:
        if out.get(key) is not None:
            out[key] = parse_bytes(out[key], what=f"{source}: tier {name!r}: {key}")
    if any(out.get(key) is not None for key in _QUOTA_KEYS):
        out["quota_source"] = f"tier config {source}"
    return out


def _site_specs(env: Mapping[str, str], specs: dict) -> str | None:
    """Merge the detected site's tiers into ``specs``; returns the site's quota command."""
    site = detect_site(env)
    if site is None:
        return None
    for name, options in site.tiers.items():
        specs.setdefault(name, {}).update(options)
    return site.quota_command


def resolve_tiers(env: Mapping[str, str] | None = None, config: str | os.PathLike | None = None,
                  read_quotas: bool = True) -> dict[str, Tier]:
    """Resolve the named tiers visible to this process.

    Parameters
    ----------
    env : mapping, optional
        Environment to read (default ``os.environ``).
    config : path, optional
        TOML config file; default :func:`config_path`.  A missing default file is fine,
        a missing explicit one is an error.
    read_quotas : bool
        Ask the filesystem's quota tools about tiers whose quota the config does not
        give (:func:`hpcio.staging.quota.read_quota`; nothing runs where none is installed).

    Returns
    -------
    dict
        ``{name: Tier}`` for every tier with a path, in a stable order.
    """
    env = os.environ if env is None else env
    specs: dict[str, dict] = {name: dict(spec) for name, spec in KNOWN_TIERS.items()}
    quota_command = _site_specs(env, specs)
    for spec in specs.values():
        path = env.get(spec["env"]) if spec.get("env") else None
        if not path and spec.get("default_path") and os.path.isdir(spec["default_path"]):
            path = spec["default_path"]
        if path:
            spec["path"] = path

    cfg = Path(config) if config is not None else config_path(env)
    explicit = config is not None or bool(env.get("HPCIO_TIERS_CONFIG"))
    if cfg.is_file():
        try:
            data = tomllib.loads(cfg.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise HpcioError(f"tier config is not valid TOML: {exc}", path=cfg) from None
        for name, options in data.get("tiers", {}).items():
            specs.setdefault(name, {}).update(_tier_from_options(name, options, str(cfg)))
    elif explicit:
        raise HpcioError("tier config file does not exist", path=cfg)

    for item in filter(None, (s.strip() for s in env.get("HPCIO_TIERS", "").split(","))):
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise HpcioError(f"HPCIO_TIERS entry {item!r} is not name=path")
        specs.setdefault(name.strip(), {})["path"] = path.strip()

    tiers = {}
    for name, spec in specs.items():
        if not spec.get("path"):
            continue
        section = spec.get("quota_section")
        spec = {k: v for k, v in spec.items() if k not in ("default_path", "quota_section")}
        spec["path"] = _expand(str(spec["path"]), env)
        if read_quotas and spec.get("quota_source") is None:
            spec.update(_read_tier_quota(spec["path"], quota_command, section))
        tiers[name] = Tier(name=name, **spec)
    return tiers


def _read_tier_quota(path: str, quota_command: str | None, section: str | None) -> dict:
    quota = read_quota(path, site_command=quota_command, section=section)
    if quota is None:
        return {}
    return dict(quota_bytes=quota.limit_bytes, quota_inodes=quota.limit_inodes, used_bytes=quota.used_bytes,
                used_inodes=quota.used_inodes, quota_source=quota.source)


def tier_for_path(path: str | os.PathLike, tiers: Mapping[str, Tier]) -> Tier | None:
    """The tier whose root is the longest prefix of ``path`` (symlinks resolved)."""
    target = os.path.realpath(path)
    best, best_len = None, -1
    for tier in tiers.values():
        root = os.path.realpath(tier.path)
        if (target == root or target.startswith(root.rstrip(os.sep) + os.sep)) and len(root) > best_len:
            best, best_len = tier, len(root)
    return best


def _existing_ancestor(path: str | os.PathLike) -> str:
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


@dataclasses.dataclass(frozen=True)
class FsUsage:
    """Free and total space of the filesystem holding a path (from ``statvfs``)."""

    free_bytes: int
    free_inodes: int
    total_bytes: int
    total_inodes: int
    block_size: int


def fs_usage(path: str | os.PathLike, fs_stat: Callable = os.statvfs) -> FsUsage:
    """Space left for an unprivileged user on the filesystem that holds ``path``.

    ``path`` need not exist yet: its closest existing ancestor is asked.  ``fs_stat``
    stands in for :func:`os.statvfs` (it returns an object with the same ``f_*``
    fields), which is how tests simulate a nearly full tier.
    """
    st = fs_stat(_existing_ancestor(path))
    frsize = st.f_frsize or st.f_bsize
    # Some filesystems (tmpfs mounted without nr_inodes) report 0 inodes: unlimited.
    free_inodes = st.f_favail if st.f_files else 2**63 - 1
    return FsUsage(
        free_bytes=st.f_bavail * frsize,
        free_inodes=free_inodes,
        total_bytes=st.f_blocks * frsize,
        total_inodes=st.f_files,
        block_size=frsize,
    )


def filesystem_type(path: str | os.PathLike) -> str | None:
    """Filesystem type (``ext4``, ``tmpfs``, ``gpfs``, ``lustre``...) of the mount holding ``path``."""
    mount = mount_of(path)
    return None if mount is None else mount[1]


def is_node_local(path: str | os.PathLike, tiers: Mapping[str, Tier] | None = None) -> bool:
    """Whether ``path`` lives on storage that only this node sees.

    A tier that covers the path decides; otherwise the filesystem type does (tmpfs,
    ext4, xfs... are local; gpfs, lustre, nfs, beegfs... are shared).
    """
    tier = tier_for_path(path, tiers) if tiers else None
    if tier is not None:
        return tier.node_local
    return filesystem_type(path) in _LOCAL_FS_TYPES


def node_local_tier(tiers: Mapping[str, Tier] | None = None) -> Tier | None:
    """The node-local tier a node cache defaults to: a configured node-local tier (an
    NVMe), then ``$TMPDIR``, then ``/dev/shm``; a tier declared node-local whose
    filesystem is shared (``$TMPDIR`` on a parallel filesystem, as ``$JOBSCRATCH`` at
    IDRIS is) is passed over."""
    tiers = resolve_tiers(read_quotas=False) if tiers is None else tiers
    order = sorted((t for t in tiers.values() if t.node_local and not t.read_only),
                   key=lambda t: (t.name == "shm", t.name == "tmp"))
    for tier in order:
        if os.path.isdir(tier.path) and filesystem_type(tier.path) not in _SHARED_FS_TYPES:
            return tier
    return None


def _drop_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def bench_tier(path: str | os.PathLike, size: int = 256 * 2**20, block: int = 8 * 2**20) -> dict:
    """Measure sequential write and read bandwidth of the tier holding ``path``.

    Writes ``size`` bytes in ``block``-byte writes, ``fsync``s them (so the write figure
    includes reaching the device), drops the file from the page cache with
    ``posix_fadvise(DONTNEED)`` (so the read figure is not a memory copy), reads it
    back, and removes it.  On tmpfs the page cache *is* the storage: DONTNEED cannot
    evict it and both figures are memory bandwidth, as they should be.

    Returns
    -------
    dict
        ``{"path", "bytes", "write_bytes_per_s", "read_bytes_per_s"}``.
    """
    if size <= 0 or block <= 0:
        raise HpcioError(f"benchmark size and block must be positive, got {size} and {block}")
    os.makedirs(path, exist_ok=True)
    target = os.path.join(path, f".hpcio-bench.{os.getpid()}")
    buf = mmap.mmap(-1, block)  # page-aligned, and random so compressing filesystems cannot cheat
    buf.write(os.urandom(block))
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            t0 = time.perf_counter()
            written = 0
            while written < size:
                written += os.write(fd, memoryview(buf)[: min(block, size - written)])
            os.fsync(fd)
            t_write = time.perf_counter() - t0
            _drop_cache(fd)
        finally:
            os.close(fd)
        fd = os.open(target, os.O_RDONLY)
        try:
            _drop_cache(fd)
            t0 = time.perf_counter()
            read = 0
            while True:
                n = os.readv(fd, [buf])
                if not n:
                    break
                read += n
            t_read = time.perf_counter() - t0
            _drop_cache(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StagingError(f"tier benchmark failed: {exc.strerror}", path=target) from exc
    finally:
        buf.close()
        try:
            os.unlink(target)
        except FileNotFoundError:
            pass
    if read != size:
        raise StagingError(f"tier benchmark read {read} bytes back, expected {size}", path=target)
    return {
        "path": str(path),
        "bytes": size,
        "write_bytes_per_s": size / max(t_write, 1e-9),
        "read_bytes_per_s": size / max(t_read, 1e-9),
    }
