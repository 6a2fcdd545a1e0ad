"""Reading a JINX file or a directory of ``shard-*.jinx`` files."""

from __future__ import annotations

import bisect
import os
from collections.abc import Mapping, Sequence

import numpy as np

from ... import codecs as _codecs_table
from ..._core import _codecs as _zstd_kernels, _jinx
from ...errors import CorruptShardError, DecompressionLimitError
from .. import base
from .sample import JinxSample
from .shard import HASH_PREFIX, Shard, shard_paths

# Lazy samples are built a run of lines at a time, in one compiled call.  The samples of
# a run are alive together, so runs are short: a fresh process pays more for growing its
# heap to hold a long run than for the extra calls of short ones.
_RUN = 16
_MISSING = object()


class Reader(base.Reader):
    """A JINX file or a directory of ``shard-*.jinx`` files.

    Parameters
    ----------
    path
        A ``.jinx`` file or a directory holding ``shard-NNNNN.jinx`` files.
    lazy
        True (default): samples are :class:`JinxSample` mappings that decode values on
        access.  False: plain dicts, every value decoded.
    split
        Keep only shards whose footer ``split`` equals this (as mldataforge does).
    encoding
        Encoding assumed for files whose footer does not name one (default a85).
    max_decoded_bytes
        Most bytes one read may decompress: one value, or the sidecar values of one
        batch together (a byte size; default ``$HPCIO_MAX_DECODED_BYTES``, else 1 GiB).
    validate_hashes
        True: check every file (and sidecar) against the xxh3_64 its footer records
        before reading, raising :class:`~hpcio.errors.ChecksumMismatchError` naming it;
        files without one are not checked.  ``"xxh3_64"`` also requires the hash.
    """

    def __init__(self, path, lazy: bool = True, split: str | None = None,
                 encoding: str | None = None, max_decoded_bytes: int | str | None = None,
                 validate_hashes: bool | str = False):
        super().__init__(path)
        self.lazy = lazy
        self.encoding = encoding
        self.shards: list[Shard] = []
        limit = _codecs_table.max_decoded_bytes(max_decoded_bytes)
        try:
            for p in shard_paths(self.path):
                shard = Shard(p, encoding=encoding, limit=limit)
                if split is not None and shard.footer.get("split") != split:
                    shard.close()
                    continue
                self.shards.append(shard)
                if validate_hashes and not shard.check_hashes() and validate_hashes is not True:
                    raise CorruptShardError(f"the JINX footer records no {validate_hashes} hash",
                                            path=shard.path, offset=shard.footer_offset)
        except BaseException:
            for s in self.shards:
                s.close()
            raise
        counts = [s.num_samples for s in self.shards]
        self.cum = np.concatenate([[0], np.cumsum(counts, dtype=np.uint64)]).astype(np.uint64)
        self._starts = [int(c) for c in self.cum[:-1]]
        self._n = int(self.cum[-1])

    def __len__(self) -> int:
        return self._n

    def mean_sample_bytes(self) -> float | None:
        if not self._n:
            return None
        sidecars = sum(os.path.getsize(s.binx_path) for s in self.shards if os.path.isfile(s.binx_path))
        return (sum(s.size for s in self.shards) + sidecars) / self._n

    def _locate(self, i: int):
        k = bisect.bisect_right(self._starts, i) - 1
        return self.shards[k], i - self._starts[k]

    def _sample(self, shard: Shard, local: int, fields):
        shard.check_size()
        raw = shard.raw(local)
        if fields is not None:
            raw = _jinx.project(raw, shard, fields)
        return JinxSample(raw, shard, local) if self.lazy else shard.materialize(raw, local)

    def read(self, i: int, fields: Sequence[str] | None = None) -> Mapping:
        if len(self.shards) == 1:
            return self._sample(self.shards[0], i, fields)
        shard, local = self._locate(i)
        return self._sample(shard, local, fields)

    def read_many(self, indices, fields=None) -> list:
        if len(self.shards) == 1:
            shard = self.shards[0]
            if self.lazy:
                shard.check_size()
                return _jinx.lazy_gather(shard, JinxSample, np.asarray(indices).tolist(), fields)
            return [self._sample(shard, i, fields) for i in np.asarray(indices).tolist()]
        idx = np.asarray(indices, dtype=np.int64)
        which = np.searchsorted(self.cum, idx, side="right") - 1
        local = idx - self.cum[which].astype(np.int64)
        shards = self.shards
        return [self._sample(shards[k], j, fields) for k, j in zip(which.tolist(), local.tolist())]

    def iter_many(self, indices, fields=None):
        samples = self.read_many(indices, fields)
        return base.handed_out(samples) if self.lazy else iter(samples)

    def iter_range(self, start=0, stop=None, fields=None):
        stop = self._n if stop is None else stop
        sample = self._sample
        for shard, lo in zip(self.shards, self._starts):
            a, b = max(start - lo, 0), min(stop - lo, shard.num_samples)
            if self.lazy:
                while a < b:
                    shard.check_size()
                    run = _jinx.lazy_run(shard, JinxSample, a, min(a + _RUN, b), fields)
                    a += len(run)
                    yield from base.handed_out(run)
            else:
                for j in range(a, b):
                    yield sample(shard, j, fields)

    def read_field(self, indices, field: str) -> list:
        """One field of many samples; zstd values in the sidecar are decoded in one
        GIL-free batch per shard (``zstd_decode_many``), everything else as accessed."""
        samples = self._lazy_many(indices)
        out = [None] * len(samples)
        batches: dict[Shard, list] = {}
        for j, s in enumerate(samples):
            raw, shard = s._raw, s._shard
            v = raw.get(field, _MISSING)
            if v is _MISSING:
                rk = shard.keymap(raw).get(field)
                exts: tuple[str, ...] = shard.plan(rk)[1] if rk is not None else ()
                if len(exts) == 3 and exts[1] == "zst" and exts[2] == "bin" and type(raw[rk]) is dict:
                    batches.setdefault(shard, []).append((j, rk, raw[rk], s._sample))
                    continue
            out[j] = s[field]
        for shard, items in batches.items():
            self._decode_batch(shard, items, out)
        return out

    @staticmethod
    def _decode_batch(shard: Shard, items: list, out: list) -> None:
        binx = shard.sidecar()
        try:
            starts = np.fromiter((loc["offset"] for _, _, loc, _ in items), np.uint64, len(items))
            ends = starts + np.fromiter((loc["length"] for _, _, loc, _ in items), np.uint64, len(items))
        except (KeyError, TypeError, ValueError, OverflowError):
            starts = None
        if starts is None or (len(ends) and int(ends.max()) > len(binx)) or bool((ends < starts).any()):
            for j, rk, loc, i in items:  # the per-value path names the bad one
                out[j] = shard.decode(rk, loc, i)
            return
        try:
            data, pos = _zstd_kernels.zstd_decode_many(binx, starts, ends, shard.limit, path=shard.binx_path,
                                                       batch_limit=shard.limit)
        except DecompressionLimitError as exc:  # item j of the batch: name its sample
            j = exc.sample or 0
            raise DecompressionLimitError(str(exc).rsplit(" (", 1)[0], path=shard.binx_path,
                                          offset=int(starts[j]), sample=items[j][3]) from None
        view = memoryview(data)
        for (j, rk, _, i), a, b in zip(items, pos[:-1].tolist(), pos[1:].tolist()):
            out[j] = shard.unserialize(rk, view[a:b], shard.plan(rk)[1][:1], i, shard.offsets[i])

    def _lazy_many(self, indices):
        if self.lazy:
            return self.read_many(indices, None)
        lazy, self.lazy = self.lazy, True
        try:
            return self.read_many(indices, None)
        finally:
            self.lazy = lazy

    def files_of_shards(self) -> list[list[base.ShardFile]]:
        """Each JINX file, and its sidecar where there is one (with the footer's hash)."""
        out = []
        for shard in self.shards:
            files = [base.ShardFile(shard.path, shard.size)]
            if os.path.exists(shard.binx_path):
                want = shard.footer.get("binx_hash")
                hashes = ({"xxh3_64": want[len(HASH_PREFIX):]}
                          if isinstance(want, str) and want.startswith(HASH_PREFIX) else {})
                files.append(base.ShardFile(shard.binx_path, os.path.getsize(shard.binx_path), hashes))
            out.append(files)
        return out

    def release_shards(self, shards: Sequence[int]) -> None:
        """Map the files of ``shards`` again (their footers are read now): a node cache
        replaced them.  Lazy samples already returned keep the old maps."""
        for k in shards:
            old = self.shards[int(k)]
            self.shards[int(k)] = Shard(old.path, encoding=self.encoding, limit=old.limit)

    def close(self) -> None:
        """Drop the reader's maps.  Lazy samples already returned keep their shard
        alive and stay readable; its maps close when the last of them is gone."""
        self.shards = []
