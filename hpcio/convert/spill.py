"""A seeded conversion's samples read once, ahead of its rounds, into a file per round.

Every shard of a seeded plan is a random sample of the whole source, so every round of
a conversion in several rounds wants samples from every block of the sources.  Read
round by round, each round would read the sources again wherever the page cache cannot
hold them (sources larger than memory).  Instead each rank reads, once and in source
order, its share of every round's samples and appends them, as pickled pieces, to the
file of their round beside the output; a round then reads its own file, in the order
its share would have read the sources.  The sources are read once, for one write and
one read of the selected samples on the destination's file system.
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Iterator

import numpy as np

__all__ = ["RoundSpill", "RoundShare", "Piece", "PASS_SAMPLES"]

# Global ids a pass ahead of the rounds looks at at a time: it holds arrays of this many.
PASS_SAMPLES = 1 << 16

# A piece: the global ids of a run of samples of one round, their shards, the
# ``(position in the run, sample)`` read and the ``(global id, BadSample)`` that failed.
Piece = tuple[np.ndarray, np.ndarray, list, list]


class RoundShare:
    """This rank's samples of one round, in source order: global ids, shards, blocks."""

    def __init__(self, gids: np.ndarray, shard_of: np.ndarray, blocks: np.ndarray):
        self.gids, self.shard_of, self.blocks = gids, shard_of, blocks


class RoundSpill:
    """The files of one rank's rounds under ``directory``: filled once, read round by round.

    Pieces are buffered in memory up to ``buffer_bytes`` (pickled) and then appended to
    their rounds' files: a pass opens each file once per buffer's worth of samples, not
    once per block it reads.  The files are the job's own, unpickled by the rank that
    wrote them."""

    def __init__(self, directory: str, rounds: int, buffer_bytes: int):
        self.directory = directory
        self.rounds = rounds
        self.buffer_bytes = max(1 << 20, buffer_bytes)
        self._buffers = [bytearray() for _ in range(rounds)]
        self._held = 0
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)

    def path(self, t: int) -> str:
        return os.path.join(self.directory, f"round-{t:06d}.pickle")

    def fill(self, gids: np.ndarray, shard_of: np.ndarray, blocks: np.ndarray, round_of: np.ndarray,
             read_runs) -> None:
        """Read the samples ``gids`` (ascending, of the rounds ``round_of``) with
        ``read_runs(gids, shard_of, blocks)``, which yields :data:`Piece` s, and file each
        piece by round.  Called for consecutive parts of one pass; then :meth:`finish`."""
        at = 0
        for run_gids, run_shards, pairs, bad in read_runs(gids, shard_of, blocks):
            rounds = round_of[at : at + len(run_gids)]
            at += len(run_gids)
            present = np.unique(rounds).tolist()
            position = np.empty(len(run_gids), np.int64)  # of each sample among its round's
            members = {}
            for t in present:
                members[t] = np.flatnonzero(rounds == t)
                position[members[t]] = np.arange(len(members[t]))
            round_list, position_list = rounds.tolist(), position.tolist()
            read = {t: [] for t in present}
            for k, sample in pairs:
                read[round_list[k]].append((position_list[k], sample))
            failed = {t: [] for t in present}
            for item in bad:
                failed[round_list[int(np.searchsorted(run_gids, item[0]))]].append(item)
            for t in present:
                self._add(t, (run_gids[members[t]], run_shards[members[t]], read[t], failed[t]))

    def finish(self) -> None:
        """Write what is still buffered."""
        self._flush()

    def _add(self, t: int, piece: Piece) -> None:
        data = pickle.dumps(piece, protocol=pickle.HIGHEST_PROTOCOL)
        self._buffers[t] += data
        self._held += len(data)
        if self._held >= self.buffer_bytes:
            self._flush()

    def _flush(self) -> None:
        for t, buf in enumerate(self._buffers):
            if buf:
                with open(self.path(t), "ab") as f:
                    f.write(buf)
                self._buffers[t] = bytearray()
        self._held = 0

    def pieces(self, t: int) -> Iterator[Piece]:
        """Round ``t``'s pieces in source order; the file is deleted once read."""
        path = self.path(t)
        if not os.path.exists(path):
            return
        with open(path, "rb") as f:
            while True:
                try:
                    yield pickle.load(f)
                except EOFError:
                    break
        os.remove(path)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
