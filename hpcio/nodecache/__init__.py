"""A bounded node-local cache of shards read from a shared tier, evicting by the future.

>>> import hpcio
>>> cache = hpcio.NodeCache("/local/nvme/cache", limit="1.5TB")     # doctest: +SKIP
>>> ds = hpcio.open("/lustre/work/shards", cache=cache)              # doctest: +SKIP

Every process of a node that opens a dataset with a cache of the same directory shares
one copy of each shard: a shard is fetched from the shared tier on first need (or ahead,
for the next batches), at most ``limit`` bytes stay resident, and the shard evicted is
the one whose next use in the node's announced orders is furthest away (``policy=
"belady"``), or the one used longest ago (``"lru"``).  The announced orders are the
passes of views, pipelines and the :mod:`hpcio.torch` adapters (``will_read``); they are
computed, so what a consumer publishes stays the size of a window, not of the order.

The figures against LRU and mosaicml-streaming's cache are in ``docs/staging.md``.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from .._paths import trust_links
from ..errors import CapabilityError, NodeCacheError
from ..units import parse_bytes
from .budget import Budget
from .consumer import Consumer
from .policy import POLICIES, check_policy, simulate
from .reader import CachedReader
from .store import Store, build_mirror, check_mirror

__all__ = ["NodeCache", "CachedReader", "POLICIES", "simulate", "default_directory", "from_environment"]


def default_directory() -> str:
    """The node-local tier ``hpcio tiers`` names (a configured NVMe, ``$TMPDIR`` when it
    is on a node-local filesystem, then ``/dev/shm``), plus ``hpcio-cache``."""
    from ..staging.tiers import node_local_tier

    tier = node_local_tier()
    if tier is None:
        raise NodeCacheError("no node-local tier is known here (hpcio tiers lists none): pass "
                             "NodeCache(directory=...) a directory on the node's own disk or memory")
    return os.path.join(tier.path, "hpcio-cache")


class NodeCache:
    """Shards of datasets read from a shared tier, kept on this node under ``limit``.

    directory
        Node-local directory of the cache (default :func:`default_directory`); every
        process of the node given the same one shares its shards.
    limit
        Most bytes of shards resident at once over every dataset read through
        ``directory`` (a mixture's sources share it), an int or a size such as
        ``"1.5TB"``; default 80% of the space free on the directory's filesystem now.
    policy
        ``"belady"`` (evict the shard used furthest in the future) or ``"lru"``.
    prefetch
        Batches ahead of each consumer whose shards are fetched in the background.
    fetchers
        Most copies from the shared tier in flight on the node at once.
    horizon
        Most stream positions of a consumer's future mapped to shards at a time.
    """

    def __init__(self, directory: str | os.PathLike | None = None, limit: int | str | None = None, *,
                 policy: str = "belady", prefetch: int = 4, fetchers: int = 4, horizon: int = 1 << 20):
        self.policy = check_policy(policy)
        given = None if limit is None else parse_bytes(limit, what="NodeCache limit")
        self.directory = os.path.abspath(os.fspath(directory)) if directory is not None else default_directory()
        self.limit = _free_bytes(self.directory) * 4 // 5 if given is None else given
        for name, value, low in (("prefetch", prefetch, 0), ("fetchers", fetchers, 1), ("horizon", horizon, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise NodeCacheError(f"NodeCache {name} must be an int >= {low}, got {value!r}")
        self.prefetch, self.fetchers, self.horizon = prefetch, fetchers, horizon
        self._readers: list[CachedReader] = []
        self._budget = Budget(self.directory, self.limit, self._stores)

    def __reduce__(self):
        return (_rebuild, (self.directory, self.limit, self.policy, self.prefetch, self.fetchers, self.horizon))

    def root_of(self, path: str | os.PathLike) -> str:
        """The directory caching the dataset ``path`` (its name and a key of its real path)."""
        real = os.path.realpath(os.fspath(path))
        key = hashlib.sha256(real.encode()).hexdigest()[:16]
        return os.path.join(self.directory, f"{os.path.basename(real) or 'dataset'}-{key}")

    def open_reader(self, module, path: str | os.PathLike, options: dict) -> CachedReader:
        """A reader of ``path`` in the format ``module`` through this cache (what
        ``hpcio.open(path, cache=...)`` uses)."""
        module.Reader.check_node_cache(path, options)  # before any reader opens the remote
        remote = os.path.realpath(os.fspath(path))
        root = self.root_of(remote)
        os.makedirs(os.path.join(root, "meta"), exist_ok=True)
        store = None
        lock = _DirectoryLock(os.path.join(root, "meta", "mirror.lock"))
        with lock:
            if not check_mirror(root, remote):
                probe = module.Reader(remote, **options)
                try:
                    files = _files(probe, remote, module.NAME)
                finally:
                    probe.close()
                build_mirror(root, remote, {os.path.join(remote, f.path) for shard in files for f in shard})
        trust_links(os.path.join(root, "data"), remote)
        inner = module.Reader(os.path.join(root, "data"), **options)
        try:
            # the cache fetches and evicts units of files: a run of shards sharing their files is one
            files, first = _units(_files(inner, os.path.join(root, "data"), module.NAME),
                                  os.path.join(root, "data"), module.NAME)
            store = Store(root, remote, files, self.fetchers)
            cum = np.concatenate([[0], np.cumsum(inner.shard_sizes(), dtype=np.int64)])[first]
            consumer = Consumer(store, cum, budget=self._budget, policy=self.policy, prefetch=self.prefetch,
                                horizon=self.horizon, release=_release_units(inner.release_shards, first))
        except BaseException:
            inner.close()
            raise
        reader = CachedReader(inner, consumer, remote)
        self._readers.append(reader)
        return reader

    def _stores(self) -> list[Store]:
        """The stores of the datasets this cache has open in this process."""
        return [reader.consumer.store for reader in self._readers]

    def stats(self) -> dict:
        """``fetched_bytes``, ``fetches``, ``evictions``, ``resident_bytes`` and
        ``resident_shards`` of the node (all its processes), and ``hits``, ``misses``
        (shards a batch found resident or not), ``wait_s`` (time reads waited for
        fetches), ``prefetched``, ``over_limit`` and ``prefetch_errors`` of this process,
        summed over the datasets this cache opened."""
        out: dict = {"fetched_bytes": 0, "fetches": 0, "evictions": 0, "resident_bytes": 0,
                     "resident_shards": 0, "hits": 0, "misses": 0, "wait_s": 0.0, "prefetched": 0,
                     "over_limit": 0, "prefetch_errors": 0, "limit": self.limit, "policy": self.policy}
        stores = {reader.consumer.store.root: reader.consumer.store for reader in self._readers}
        parts = [store.counters() for store in stores.values()]
        parts += [reader.consumer.stats() for reader in self._readers]
        for part in parts:
            for key, value in part.items():
                out[key] += value
        return out

    def wait(self) -> None:
        """Return once the fetches this process started ahead of its reads have ended, so
        the tier's byte count and :meth:`stats` agree (a fetch in flight counts in neither
        until it ends)."""
        for reader in self._readers:
            reader.consumer.wait()

    def clear(self) -> None:
        """Evict every shard this cache's datasets hold on the node."""
        for reader in self._readers:
            reader.consumer.store.clear()

    def __repr__(self):
        return f"<hpcio.NodeCache {self.directory!r} limit={self.limit} policy={self.policy!r}>"


def _free_bytes(directory: str) -> int:
    """Bytes free to this user on the filesystem that holds (or will hold) ``directory``."""
    at = directory
    while not os.path.isdir(at) and os.path.dirname(at) != at:
        at = os.path.dirname(at)
    st = os.statvfs(at)
    return st.f_bavail * st.f_frsize


def from_environment() -> NodeCache | None:
    """The cache ``$HPCIO_NODE_CACHE`` names (limit ``$HPCIO_NODE_CACHE_LIMIT``), which
    ``hpcio.open`` uses for formats that can read through one: a job script turns the
    cache on for a training script that does not mention it."""
    directory = os.environ.get("HPCIO_NODE_CACHE")
    if not directory:
        return None
    return NodeCache(directory, os.environ.get("HPCIO_NODE_CACHE_LIMIT") or None)


def _rebuild(directory, limit, policy, prefetch, fetchers, horizon) -> NodeCache:
    return NodeCache(directory, limit, policy=policy, prefetch=prefetch, fetchers=fetchers, horizon=horizon)


def _files(reader, top: str, name: str) -> list:
    """The reader's shard files with paths relative to the dataset directory ``top``."""
    from ..formats.base import ShardFile

    files = reader.files_of_shards()
    sizes = reader.shard_sizes()
    if files is None or sizes is None:
        raise CapabilityError(f"the {name} reader cannot list its shards' files, so it cannot read "
                              "through a node cache (mds, jinx, webdataset, msgpack, hdf5, zarr and parquet can)", path=top)
    top = os.path.abspath(top)
    return [[ShardFile(os.path.relpath(os.path.abspath(f.path), top), f.size, f.hashes) for f in shard]
            for shard in files]


def _units(files: list, top: str, name: str) -> tuple[list, np.ndarray]:
    """The cache's units of the reader's shards ``files``: each run of consecutive shards
    reading the same files (the row groups of one Parquet file) is one unit, since the
    cache fetches and evicts whole files.  Returns each unit's files and the first shard
    of each unit followed by the shard count.  A file read by shards of two units is
    refused: evicting one unit would pull the file from under the other."""
    first: list[int] = []
    for k, shard in enumerate(files):
        if not first or [f.path for f in shard] != [f.path for f in files[k - 1]]:
            first.append(k)
    units = [files[k] for k in first]
    owner: dict[str, int] = {}
    for u, unit in enumerate(units):
        for f in unit:
            if owner.setdefault(f.path, u) != u:
                raise CapabilityError(f"the {name} reader's shards {first[owner[f.path]]} and {first[u]} both read "
                                      "this file but are not one run of shards reading the same files, which a "
                                      "node cache fetches and evicts as one unit", path=os.path.join(top, f.path))
    return units, np.array([*first, len(files)], dtype=np.int64)


def _release_units(release_shards, first: np.ndarray):
    """``release_shards`` of the reader, called with cache units (``first`` as
    :func:`_units` returns it): the reader is handed every shard of each unit."""

    def release(units) -> None:
        release_shards([k for u in units for k in range(int(first[u]), int(first[u + 1]))])

    return release


class _DirectoryLock:
    """An exclusive ``flock`` on a file, held by one process of the node at a time."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)
