"""Reading WebDataset shard sets: a member index per tar, and streaming without one."""

from __future__ import annotations

import contextlib
import glob
import mmap
import os
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from ..._paths import listed_inside
from ..._published import Version
from ...errors import CapabilityError, CorruptShardError, KeyNotFoundError, ShardNotFoundError, TruncatedShardError
from .. import _nested
from .._checksums import MANIFEST_NAME, recorded_samples, validate_files
from ..base import Reader as _Reader, ShardFile, locate, manifest_shard_files, sample_starts
from ..tar_gzip import is_gzip_name, open_decompressed
from .members import _member_key, decode_member


def list_shards(path) -> list[str]:
    """The tar files of ``path``: a directory, one file, a glob pattern, or a list."""
    if isinstance(path, (list, tuple)):
        return [os.fspath(p) for p in path]
    path = os.fspath(path)
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if _is_shard_name(n))
        return listed_inside(path, names, what="WebDataset shard")
    if os.path.exists(path):
        return [path]
    matches = sorted(glob.glob(path))
    if not matches:
        raise ShardNotFoundError("no WebDataset shards found", path=path)
    return matches


def _is_shard_name(name: str) -> bool:
    return name.endswith(".tar") or is_gzip_name(name)


class _Shard:
    """The member index of one tar file, grouped into samples.

    With ``samples`` (the count ``hashes.json`` records for a tar of the size it
    records) the tar is opened, mapped and its headers scanned only when the shard is
    first read: the scan walks the whole file, and the pass that reads the shard next
    then finds it cached, where a scan of every shard at open read a dataset larger
    than memory twice; and a reader of a node cache's mirror, whose tars are links to
    the shared tier until fetched, reads no byte of them at open.  :meth:`release`
    closes the file and its map and keeps the member index (the same bytes: a node
    cache checks each fetched tar's xxh3_64), so the next read opens the file there is
    now."""

    _SCANNED = ("keys", "suffixes", "data_offsets", "sizes", "sample_starts", "headers")
    _OPENED = ("file", "map", "fd", "mapped_size", "_check_mapped_size")

    def __init__(self, path: str, key_dots: int, cache_dir: str | None = None,
                 samples: int | None = None, version: Version | None = None):
        self.path = path
        self.version = version
        self.key_dots = key_dots
        self.cache_dir = cache_dir
        self.recorded = samples
        if samples is None:
            self._open()
            self._scan()

    def _open(self) -> None:
        from ..._core import _io

        path = self.path
        try:
            file = open(path, "rb")
            try:
                if file.read(2) == b"\x1f\x8b":
                    file.close()
                    file = open_decompressed(path, self.cache_dir)
            except BaseException:
                file.close()
                raise
        except FileNotFoundError:
            raise ShardNotFoundError("WebDataset shard is missing", path=path) from None
        try:
            size = os.fstat(file.fileno()).st_size
            self.map = _io.map_file(file.fileno()) if size else b""
        except BaseException:
            file.close()
            raise
        self.file = file
        self.fd, self.mapped_size, self._check_mapped_size = file.fileno(), size, _io.check_mapped_size
        if self.version is not None:
            self.version.check(path)  # a staged dataset staged again since it was opened

    def __getattr__(self, name):
        # only reached while an attribute the open or the scan sets is missing
        if "recorded" not in self.__dict__:
            raise AttributeError(name)
        if name in _Shard._OPENED:
            self._open()
        elif name in _Shard._SCANNED:
            self._scan()
        else:
            raise AttributeError(name)
        return self.__dict__[name]

    def _scan(self) -> None:
        from ..._core import _tar

        path, key_dots = self.path, self.key_dots
        names, header_offsets, data_offsets, sizes, _end, error = _tar.scan(
            memoryview(self.map), path=path, partial=True)
        keys, suffixes, starts = [], [], []
        kept = []
        last = None
        seen: set = set()
        for m, raw in enumerate(names):
            key, suffix = _member_key(raw, key_dots, path=path, offset=int(header_offsets[m]))
            if key is None:
                continue
            if key != last:
                starts.append(len(kept))
                keys.append(key)
                last = key
                seen = set()
            if suffix in seen:
                # webdataset refuses a sample with the same member twice: keeping either
                # copy would silently drop the other
                raise CorruptShardError(
                    f"sample {key!r} has the member {suffix!r} twice", path=path,
                    offset=int(header_offsets[m]), sample=len(keys) - 1)
            seen.add(suffix)
            kept.append(m)
            suffixes.append(suffix)
        if error is not None:
            # members before the damage may end a sample early: that sample is damaged too
            bad_sample = max(len(keys) - 1, 0) if names else 0
            raise type(error)(str(error).rsplit(" (", 1)[0], path=path, offset=error.offset,
                              sample=bad_sample)
        if self.recorded is not None and len(keys) != self.recorded:
            raise CorruptShardError(f"the tar holds {len(keys)} samples, {MANIFEST_NAME} records "
                                    f"{self.recorded}", path=path, sample=min(len(keys), self.recorded))
        kept = np.asarray(kept, dtype=np.int64)  # type: ignore[assignment]
        self.headers = len(names)  # the scanner compared each header's checksum
        self.suffixes = suffixes
        self.data_offsets = data_offsets[kept] if len(kept) else np.zeros(0, np.uint64)
        self.sizes = sizes[kept] if len(kept) else np.zeros(0, np.uint64)
        self.sample_starts = np.asarray(starts + [len(kept)], dtype=np.int64)
        self.keys = keys  # last: a scan that raised leaves the shard unscanned

    def __len__(self):
        return self.recorded if "keys" not in self.__dict__ else len(self.keys)

    def members(self, j: int) -> range:
        return range(int(self.sample_starts[j]), int(self.sample_starts[j + 1]))

    def check_size(self) -> None:
        """Raise ShardChangedError if the tar file shrank since it was mapped: reading the
        lost part of the mapping would kill the process (SIGBUS)."""
        if self.mapped_size:
            self._check_mapped_size(self.fd, self.mapped_size, self.path)

    def data(self, m: int):
        a = int(self.data_offsets[m])
        return self.map[a : a + int(self.sizes[m])]

    def release(self) -> None:
        """Close the file and its map; the next read opens the file at ``path`` again."""
        opened = {name: self.__dict__.pop(name) for name in _Shard._OPENED if name in self.__dict__}
        if isinstance(opened.get("map"), mmap.mmap):
            with contextlib.suppress(BufferError):  # a view still exported: freed with it
                opened["map"].close()
        if "file" in opened:
            opened["file"].close()

    def close(self):
        m = self.__dict__.get("map")
        if isinstance(m, mmap.mmap):
            m.close()
        if "file" in self.__dict__:
            self.file.close()


class Reader(_Reader):
    """Random-access reader of a WebDataset shard set (a directory, file, glob or list).

    Parameters
    ----------
    key_dots
        Dots of the basename kept in the key (0: webdataset's default grouping).
    decode
        Decode ``.txt``/``.json``/``.cls``/``.npy`` members and strip their extensions
        from the field names (the default); False gives raw bytes under the full suffix.
    sidecars
        Other shard sets with the same keys in the same order, merged field-wise.
    include_key
        Add the sample key as ``__key__``.
    cache_dir
        Where gzip-compressed shards (``.tar.gz``, ``.tgz``) are kept decompressed for
        later readers; without it each is decompressed into an anonymous temporary file
        (under ``TMPDIR``) for the reader's lifetime.
    validate_hashes
        True: check every shard against the xxh3_64 its ``hashes.json`` records (a
        shard no manifest names is not checked) before reading, raising
        :class:`~hpcio.errors.ChecksumMismatchError` naming the shard; ``"xxh3_64"``
        also requires every shard to have one.
    """

    def __init__(self, path, key_dots: int = 0, decode: bool = True,
                 sidecars: Sequence | None = None, include_key: bool = False,
                 cache_dir=None, validate_hashes: bool | str = False, **options):
        self.path = os.fspath(path) if not isinstance(path, (list, tuple)) else str(path[0])
        self.key_dots = key_dots
        self.decode = decode
        self.include_key = include_key
        self.shards: list[_Shard] = []
        try:
            paths = list_shards(path)
            validate_files(paths, validate_hashes)
            version = Version(os.path.dirname(paths[0])) if paths else None
            for p, samples in zip(paths, recorded_samples(paths)):
                self.shards.append(_Shard(p, key_dots, cache_dir, samples, version))
        except BaseException:
            self.close()
            raise
        self.cum = sample_starts([len(s) for s in self.shards])
        self.sidecars = [Reader(p, key_dots=key_dots, decode=decode, validate_hashes=validate_hashes)
                         for p in (sidecars or [])]
        for side in self.sidecars:
            if len(side) != len(self):
                raise CorruptShardError(
                    f"sidecar has {len(side)} samples, the main shard set {len(self)}",
                    path=side.path)

    def __len__(self) -> int:
        return int(self.cum[-1])

    def _locate(self, i: int) -> tuple[_Shard, int]:
        s, j = locate(self.cum, i)
        return self.shards[int(s)], int(j)

    def key(self, i: int) -> str:
        shard, j = self._locate(self.check_index(i))
        return shard.keys[j]

    def _sample(self, shard: _Shard, j: int, i: int, fields) -> dict:
        out = {"__key__": shard.keys[j]} if self.include_key else {}
        shard.check_size()
        for m in shard.members(j):
            suffix = shard.suffixes[m]
            if fields is not None and not self.decode and suffix not in fields:
                continue
            name, value = decode_member(suffix, shard.data(m), self.decode, path=shard.path, sample=i)
            # the items of a list and a mapping's bytes are named <field>.<...>
            if fields is None or name in fields or name.split(".", 1)[0] in fields or name.rpartition(".")[0] in fields:
                out[name] = value
        if self.decode:
            out = _nested.group_fields(out)
        for side in self.sidecars:
            sshard, sj = side._locate(i)
            if sshard.keys[sj] != shard.keys[j]:
                raise CorruptShardError(
                    f"sidecar key {sshard.keys[sj]!r} does not match key {shard.keys[j]!r}",
                    path=sshard.path, sample=i)
            extra = side._sample(sshard, sj, i, fields)
            extra.pop("__key__", None)
            out.update(extra)
        if fields is not None:
            missing = [f for f in fields if f not in out]
            if missing:
                raise KeyNotFoundError(f"sample {i} of {shard.path} has no field {missing[0]!r}")
            return {f: out[f] for f in fields}  # project(), as a dict
        return out

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        i = self.check_index(i)
        shard, j = self._locate(i)
        return self._sample(shard, j, i, fields)

    def read_many(self, indices, fields=None) -> list:
        indices = np.asarray(indices, dtype=np.int64)
        shards, local = locate(self.cum, indices)
        return [self._sample(self.shards[s], int(j), int(i), fields)
                for s, j, i in zip(shards.tolist(), local.tolist(), indices.tolist())]

    def iter_range(self, start=0, stop=None, fields=None) -> Iterator[Mapping]:
        stop = len(self) if stop is None else stop
        for i in range(start, stop):
            shard, j = self._locate(i)
            yield self._sample(shard, j, i, fields)

    @classmethod
    def check_node_cache(cls, path, options) -> None:
        """A node cache reads a directory of plain tars, each with its size, xxh3_64 and
        sample count in ``hashes.json`` (what hpcio's writer records): without the count,
        opening would scan every tar through the shared tier.  Sidecars (other shard sets
        the cache does not fetch), gzip shards (decompressed into copies outside the
        cache's limit) and ``validate_hashes`` (every tar hashed at open; the cache checks
        each tar's xxh3_64 as it fetches it) are refused."""
        if isinstance(path, (list, tuple)) or not os.path.isdir(path):
            raise CapabilityError("a node cache mirrors a directory of WebDataset tars: pass the directory, "
                                  "not a file, a glob or a list", path=str(path))
        if options.get("sidecars"):
            raise CapabilityError("WebDataset sidecars cannot read through a node cache (it fetches the tars "
                                  "of one shard set): read them without cache=", path=path)
        if options.get("validate_hashes"):
            raise CapabilityError("validate_hashes would hash every tar through the shared tier at open; a "
                                  f"node cache checks each tar against the xxh3_64 {MANIFEST_NAME} records "
                                  "as it fetches it: leave validate_hashes out", path=path)
        paths = list_shards(path)
        for p in paths:
            if is_gzip_name(p):
                raise CapabilityError("gzip-compressed tars cannot read through a node cache: each would be "
                                      "decompressed into a copy outside the cache's limit; decompress them "
                                      f"and record them in {MANIFEST_NAME} (hpcio convert SRC DST --to "
                                      "webdataset writes both)", path=p)
        missing = [p for p, n in zip(paths, recorded_samples(paths)) if n is None]
        if missing:
            raise CapabilityError(
                f"{MANIFEST_NAME} records no sample count for {len(missing)} of the {len(paths)} tars, so "
                "opening them would scan every such tar through the shared tier, around the node cache; "
                f"rewrite the shards with the {MANIFEST_NAME} hpcio's WebDataset writer records "
                "(hpcio convert SRC DST --to webdataset, or hpcio.open_writer(DST, format=\"webdataset\"))",
                path=missing[0])

    def files_of_shards(self) -> list[list[ShardFile]]:
        """Each tar, with the size and xxh3_64 ``hashes.json`` records for it (its size on
        disk where no manifest names it)."""
        return manifest_shard_files([s.path for s in self.shards])

    def release_shards(self, shards: Sequence[int]) -> None:
        """Close the tars of ``shards``; their member indexes stay, and the next read
        opens and maps the file now at each path (a node cache replaced it)."""
        for k in shards:
            self.shards[int(k)].release()

    def close(self) -> None:
        for s in self.shards:
            s.close()
        self.shards = []
        for side in getattr(self, "sidecars", []):
            side.close()


def iter_tar(fileobj, key_dots: int = 0, decode: bool = True, path=None,
             include_key: bool = True) -> Iterator[dict]:
    """Stream the samples of a tar from a readable file object, without an index.

    Headers are checked as they come (checksum, truncation), so a damaged stream fails
    at the damaged member with its byte offset and sample number.
    """
    from ..._core import _tar

    offset = 0
    sample: dict | None = None
    key = None
    count = 0
    long_name = pax_path = None

    def read_exact(n):
        data = fileobj.read(n)
        if len(data) != n:
            raise TruncatedShardError(
                f"tar data truncated: expected {n} bytes, got {len(data)}",
                path=path, offset=offset, sample=count)
        return data

    while True:
        block = fileobj.read(512)
        if len(block) == 0:
            raise TruncatedShardError("tar archive ends without its end-of-archive blocks",
                                      path=path, offset=offset, sample=count)
        if len(block) < 512:
            raise TruncatedShardError(
                f"tar header truncated: expected 512 bytes, got {len(block)}",
                path=path, offset=offset, sample=count)
        try:
            header = _tar.parse_header(block, offset, path=path)
        except CorruptShardError as exc:
            raise type(exc)(str(exc).rsplit(" (", 1)[0], path=path, offset=offset, sample=count) from None
        if header is None:
            break
        name, size, typeflag = header
        data = read_exact(size)
        pad = -size % 512
        if pad:
            read_exact(pad)
        here = offset
        offset += 512 + size + pad
        if typeflag == "L":
            long_name = data.rstrip(b"\0")
            continue
        if typeflag == "x":
            for rec in data.decode("utf-8", "surrogateescape").split("\n"):
                kv = rec.split(" ", 1)[-1]
                if kv.startswith("path="):
                    pax_path = kv[5:].encode("utf-8", "surrogateescape")
            continue
        if typeflag not in ("0", "7"):
            long_name = pax_path = None
            continue
        name = pax_path or long_name or name
        long_name = pax_path = None
        k, suffix = _member_key(name, key_dots, path=path, offset=here)
        if k is None:
            continue
        if k != key:
            if sample is not None:
                yield _nested.group_fields(sample) if decode else sample
                count += 1
            key = k
            sample = {"__key__": k} if include_key else {}
        field, value = decode_member(suffix, data, decode, path=path, sample=count)
        if field in sample:
            raise CorruptShardError(f"duplicate field {field!r} in sample {k!r}",
                                    path=path, offset=here, sample=count)
        sample[field] = value
    if sample is not None:
        yield _nested.group_fields(sample) if decode else sample

