"""Fill rate of packed rows and padding waste of token-budget batches on the demo text
profile, as planned by :mod:`hpcio.pipeline.plan` (tokens: the UTF-8 bytes of ``text``).

Usage: ``python tools/packing_fill.py [N_DOCS]``.  Prints one line per method.  Only
lengths are used, windows of the shuffled epoch order as a pipeline plans them.
"""

from __future__ import annotations

import sys

import numpy as np

from hpcio.demo import generate
from hpcio.distributed import GlobalOrder
from hpcio.pipeline.plan import DEFAULT_PLAN_WINDOW, pack_best_fit, pack_next_fit, plan_batches


def windows(lengths: np.ndarray, window: int = DEFAULT_PLAN_WINDOW):
    order = GlobalOrder(len(lengths), seed=0, epoch=0)[:]
    for lo in range(0, len(order), window):
        yield lengths[order[lo : lo + window]]


def fill(lengths, max_len, pack) -> tuple[float, int]:
    tokens = rows = 0
    for w in windows(lengths):
        got = pack(w, max_len)
        rows += len(got)
        tokens += int(w.sum())
    return tokens / (rows * max_len), rows


def split(lengths, max_len):
    count = np.maximum(1, -(-lengths // max_len))
    pieces = np.full(int(count.sum()), max_len, dtype=np.int64)
    ends = np.cumsum(count) - 1
    pieces[ends] = lengths - (count - 1) * max_len
    return pieces


def waste(lengths, max_tokens, buckets) -> tuple[float, int]:
    real = padded = steps = 0
    rng = np.random.default_rng(0)
    for w in windows(lengths):
        for b in plan_batches(w, max_tokens=max_tokens, buckets=buckets, rng=rng):
            real += int(w[b].sum())
            padded += len(b) * int(w[b].max())
            steps += 1
    return 1 - real / padded, steps


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    lengths = np.array([len(s["text"].encode()) + 1 for s in generate("text", n, seed=0)], dtype=np.int64)
    print(f"{n} documents of {lengths.min()}-{lengths.max()} tokens (mean {lengths.mean():.0f}, eos included)")
    for max_len in (4096, 8192):
        docs = lengths if max_len >= lengths.max() else split(lengths, max_len)
        cut = "" if docs is lengths else f", {len(docs) - n} cuts (split_documents=True)"
        for name, pack in (("best-fit decreasing", pack_best_fit), ("greedy next-fit", pack_next_fit)):
            f, rows = fill(docs, max_len, pack)
            print(f"pack max_len={max_len} {name}: fill {100 * f:.2f}% in {rows} rows{cut}")
        total = int(lengths.sum())
        rows = total // max_len
        print(f"pack max_len={max_len} greedy concatenate-and-cut (SequencePacker): fill "
              f"{100 * rows * max_len / total:.2f}% of tokens kept, about {rows} documents cut")
    for buckets in (None, 4, 8, 16):
        w, steps = waste(lengths, 65536, buckets)
        print(f"batch max_tokens=65536 buckets={buckets}: padding waste {100 * w:.2f}% in {steps} batches")


if __name__ == "__main__":
    main()
