"""The packed-LLM row: tokens/s of a pretraining pipeline through a DataLoader, beside
litdata's ``TokensLoader`` on the same tokens.

Set-up, once per dataset (reused while its stamp matches): a byte-level BPE of
:data:`VOCAB_SIZE` entries is trained with ``tokenizers`` on the first
:data:`TRAIN_DOCUMENTS` texts of the bench's text profile, and the documents are
tokenised in the pipeline's ``map`` before its ``cache`` boundary
(``Pipeline(ds).map(TokenizerMap(path)).cache(dir)``), which writes the token arrays as
MDS shards.  The cached arrays, read back in document order with :data:`EOS` after each,
are what litdata's own ``optimize(item_loader=TokensLoader())`` writes as its chunks, so
both systems read the same tokens.  Both set-ups are timed once, apart from the runs.

The runs, each in a fresh process, median of ``repeats`` (the systems taking turns),
for 0, 1 and 2 DataLoader workers:

- hpcio: ``.cache(dir).pack(max_len, eos=EOS).batch(rows).map(stack_rows)`` through
  :class:`hpcio.torch.PipelineDataset` and :class:`hpcio.torch.DataLoader`: the cached
  tokens read, whole documents packed by best fit into rows of ``max_len`` with
  ``cu_seqlens`` and ``position_ids``, ``rows`` rows stacked per step into arrays that
  the loop wraps as tensors.
- litdata: ``StreamingDataset(item_loader=TokensLoader(block_size=max_len),
  shuffle=True)`` through ``StreamingDataLoader(batch_size=rows)``: blocks of ``max_len``
  tokens cut from the concatenated documents, with no padding and no document
  boundaries.

The clock runs from building the dataset and its loader to the end of one epoch, worker
start included, imports excluded.  Tokens/s counts the tokens of documents delivered
(their ``EOS`` included, hpcio's padding not); the token sum of every batch is checked
against the sum of all tokens.  Beside them stands what no loader can beat on one core:
numpy copying the same tokens into int64 rows of ``max_len``, in memory.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from .limits import dataset_files

__all__ = ["TokenizerMap", "stack_rows", "train_tokenizer", "prepare_tokens", "packed_llm_figures",
           "copy_limit", "VOCAB_SIZE", "TRAIN_DOCUMENTS", "EOS", "MAX_LEN", "ROWS", "WORKERS"]

VOCAB_SIZE = 4096
# Enough text for the merges of a 4096-entry vocabulary; training on all 20,000 documents
# costs several times as long and changes the tokens per document by little.
TRAIN_DOCUMENTS = 2000
EOS_TOKEN = "<|endoftext|>"
EOS = 0  # the id of EOS_TOKEN, the first special token; also the padding of hpcio's rows
MAX_LEN = 2048
ROWS = 8
WORKERS = (0, 1, 2)
# One epoch over the bench's 20,000 documents takes seconds; a run this long is stuck.
RUN_TIMEOUT_S = 600
# litdata chunks of this many rows of tokens (4 MiB of int32 tokens at max_len 2048).
CHUNK_ROWS = 512
STAMP_VERSION = 1

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --- the pipeline's stages -----------------------------------------------------------
class TokenizerMap:
    """A ``map`` stage: ``{"tokens": int32 ids of text}`` with a ``tokenizers`` tokenizer
    saved at ``path``; named in cache keys by a digest of the tokenizer's JSON, so a
    retrained tokenizer writes a new cache."""

    def __init__(self, path: str, field: str = "text"):
        from tokenizers import Tokenizer

        self.path, self.field = os.fspath(path), field
        self.tokenizer = Tokenizer.from_file(self.path)

    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.tokenizer.to_str().encode()).hexdigest()[:16]
        return f"{self.field}:{digest}"

    def __call__(self, sample) -> dict:
        ids = self.tokenizer.encode(sample[self.field]).ids
        return {"tokens": np.asarray(ids, dtype=np.int32)}


def stack_rows(rows: list) -> dict:
    """A step of packed rows as arrays a training step turns into tensors: ``tokens`` and
    ``position_ids`` (int64, ``[rows, max_len]``), ``cu_seqlens`` (int32) of the
    flattened batch as flash-attention's varlen kernels take them (each row's padding a
    sequence of its own), and ``lengths`` (the tokens of documents in each row).

    Arrays, not tensors: a tensor leaves a DataLoader worker through shared memory, a
    file descriptor per tensor, which costs more per step than pickling these arrays
    through the worker's pipe (``torch.from_numpy`` then wraps them without a copy).

    >>> row = {"tokens": np.array([5, 6, 0, 9]), "position_ids": np.array([0, 1, 2, 0]),
    ...        "cu_seqlens": np.array([0, 3, 4], np.int32), "length": 4}
    >>> short = {"tokens": np.array([7, 0, 0, 0]), "position_ids": np.array([0, 1, 0, 1]),
    ...          "cu_seqlens": np.array([0, 2], np.int32), "length": 2}
    >>> step = stack_rows([row, short])
    >>> step["tokens"].shape, step["cu_seqlens"].tolist(), step["lengths"].tolist()
    ((2, 4), [0, 3, 4, 6, 8], [4, 2])
    """
    max_len = len(rows[0]["tokens"])
    bounds = [0]
    for k, r in enumerate(rows):
        base = k * max_len
        bounds.extend((base + np.asarray(r["cu_seqlens"][1:], dtype=np.int64)).tolist())
        if bounds[-1] != base + max_len:
            bounds.append(base + max_len)
    return {"tokens": np.stack([r["tokens"] for r in rows]),
            "position_ids": np.stack([r["position_ids"] for r in rows]),
            "cu_seqlens": np.asarray(bounds, dtype=np.int32),
            "lengths": np.asarray([int(r["length"]) for r in rows], dtype=np.int64)}


def train_tokenizer(texts, path: str, vocab_size: int = VOCAB_SIZE) -> None:
    """Train a byte-level BPE on ``texts`` and save it to ``path``; ``EOS_TOKEN`` is id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(path)


def _pipeline(source_path: str, tokenizer: str, cache: str, shuffle: bool = True):
    """The pipeline up to its cache boundary, over the text dataset at ``source_path``
    (the cache's key names the source and the stages, not the order read)."""
    import hpcio
    from hpcio.pipeline import Pipeline

    # one consumer per DataLoader worker, whatever a batch job's environment says
    return (Pipeline(hpcio.open(source_path), shuffle=shuffle, seed=0, context={"rank": 0, "world_size": 1})
            .map(TokenizerMap(tokenizer)).cache(cache))


# --- set-up ----------------------------------------------------------------------------
def _litdata_documents(tokens_path: str, bounds: tuple[int, int]):
    """litdata's ``optimize`` function: the documents ``bounds`` of the flat token file,
    one int32 tensor each (module-level, so litdata's workers can import it)."""
    import torch

    flat = np.load(tokens_path, mmap_mode="r")
    offsets = np.load(tokens_path[: -len(".npy")] + ".offsets.npy")
    for d in range(*bounds):
        yield torch.from_numpy(np.array(flat[offsets[d] : offsets[d + 1]]))


def _optimize(spec: dict) -> dict:
    """Write the flat token file as litdata chunks with litdata's own ``optimize``."""
    from litdata import TokensLoader, optimize

    n = spec["documents"]
    step = max(1, -(-n // 64))
    inputs = [(a, min(a + step, n)) for a in range(0, n, step)]
    t = time.perf_counter()
    optimize(fn=functools.partial(_litdata_documents, spec["tokens"]), inputs=inputs, output_dir=spec["out"],
             chunk_size=spec["max_len"] * CHUNK_ROWS, item_loader=TokensLoader(), num_workers=1,
             mode="overwrite", verbose=False)
    return {"optimize_s": time.perf_counter() - t}


def _litdata_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("litdata")
    except PackageNotFoundError:
        return None


def _complete(setup: dict) -> bool:
    """Whether the files of a set-up are all there: the pipeline's cache of the tokens,
    the token file and litdata's chunks."""
    if not setup or not os.path.exists(setup["tokens_file"]) or not os.path.exists(setup.get("litdata", "/")):
        return False
    return os.path.isdir(os.path.join(setup["cache"], _pipeline(setup["source"], setup["tokenizer"],
                                                                setup["cache"]).fingerprint()))


def prepare_tokens(source_path: str, root: str, max_len: int = MAX_LEN, log=print) -> dict:
    """Tokenise the text dataset at ``source_path`` through the pipeline's cache, and
    write the same tokens as litdata chunks, under ``root``.  Returns the set-up: paths,
    ``documents``, ``tokens`` (EOS included), ``checksum`` (their sum) and the seconds of
    each step; ``litdata_error`` says why litdata's chunks are missing."""
    import hpcio

    # absolute: the runs' processes start in directories of their own
    source_path, root = os.path.abspath(source_path), os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    stamp_path = os.path.join(root, "tokens.json")
    # the source's files as the pipeline's cache key names them: a rewritten source
    # must not leave the runs tokenising it again
    files = [os.stat(f) for f in dataset_files(source_path)]
    key = {"version": STAMP_VERSION, "hpcio": hpcio.__version__, "source": os.path.abspath(source_path),
           "files": [[st.st_size, st.st_mtime_ns] for st in files],
           "vocab_size": VOCAB_SIZE, "train_documents": TRAIN_DOCUMENTS, "max_len": max_len,
           "litdata": _litdata_version()}
    if os.path.exists(stamp_path):
        with open(stamp_path) as f:
            stamp = json.load(f)
        setup = stamp.get("setup") or {}
        if stamp.get("key") == key and _complete(setup):
            log(f"  packed-llm: reusing the tokens under {root}")
            return setup
    for name in os.listdir(root):
        path = os.path.join(root, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    tokenizer = os.path.join(root, "tokenizer.json")
    with hpcio.open(source_path) as ds:
        texts = [s["text"] for s in ds.get_batch(np.arange(min(TRAIN_DOCUMENTS, len(ds))))]
    t = time.perf_counter()
    train_tokenizer(texts, tokenizer)
    train_s = time.perf_counter() - t
    cache = os.path.join(root, "cache")
    pipe = _pipeline(source_path, tokenizer, cache)
    t = time.perf_counter()
    pipe.steps()  # materialises the cache: every document tokenised and written once
    cache_s = time.perf_counter() - t
    # The cached arrays in document order, each with its EOS.
    in_order = _pipeline(source_path, tokenizer, cache, shuffle=False)
    arrays = [np.append(s["tokens"], np.int32(EOS)) for s in in_order.iterate(in_order.context())]
    offsets = np.concatenate(([0], np.cumsum([len(a) for a in arrays]))).astype(np.int64)
    flat = np.concatenate(arrays).astype(np.int32)
    tokens_path = os.path.join(root, "tokens.npy")
    np.save(tokens_path, flat)
    np.save(os.path.join(root, "tokens.offsets.npy"), offsets)
    setup = {"source": os.path.abspath(source_path), "tokenizer": tokenizer, "cache": cache,
             "tokens_file": tokens_path, "documents": len(arrays), "tokens": int(len(flat)),
             "checksum": int(flat.astype(np.int64).sum()), "vocab_size": VOCAB_SIZE, "max_len": max_len,
             "train_documents": len(texts), "train_s": train_s, "tokenise_cache_s": cache_s}
    log(f"  packed-llm: {len(arrays):,} documents, {len(flat):,} tokens; BPE trained in {train_s:.1f} s, "
        f"tokenised and cached in {cache_s:.1f} s")
    if _litdata_version() is None:
        setup["litdata_error"] = "litdata is not installed (pip install litdata; it is in the bench extra)"
    else:
        out = os.path.join(root, "litdata")
        spec = {"tokens": tokens_path, "documents": len(arrays), "out": out, "max_len": max_len}
        rec, failure = _run_worker({"task": "optimize", **spec})
        if failure:
            setup["litdata_error"] = f"litdata optimize() failed: {failure}"
        else:
            setup.update(litdata=out, optimize_s=rec["optimize_s"])
            log(f"  packed-llm: litdata optimize() wrote the same tokens in {rec['optimize_s']:.1f} s")
    if "litdata_error" in setup:
        log(f"  packed-llm: {setup['litdata_error']}")
    with open(stamp_path, "w") as f:
        json.dump({"key": key, "setup": setup}, f, indent=1)
    return setup


# --- one epoch, in a fresh process -----------------------------------------------------
def _loader_kwargs(workers: int) -> dict:
    return {"num_workers": workers, **({"prefetch_factor": 2} if workers else {})}


def _epoch(batches, t0: float, get_tokens, get_count) -> dict:
    first = None
    steps = tokens = checksum = 0
    for batch in batches:
        if first is None:
            first = time.perf_counter() - t0
        steps += 1
        tokens += get_count(batch)
        checksum += int(get_tokens(batch).sum())
    wall = time.perf_counter() - t0
    return {"steps": steps, "tokens_delivered": tokens, "checksum": checksum, "epoch_s": wall,
            "first_batch_s": first}


def _hpcio_epoch(spec: dict) -> dict:
    import torch

    import hpcio.torch as ht

    from ..errors import BenchmarkError

    t0 = time.perf_counter()
    pipe = (_pipeline(spec["source"], spec["tokenizer"], spec["cache"])
            .pack(spec["max_len"], eos=EOS, pad=EOS).batch(spec["rows"]).map(stack_rows))
    key = os.path.join(spec["cache"], pipe.fingerprint(2))  # the source, the map and the cache
    if not os.path.isdir(key):
        raise BenchmarkError(f"no token cache at {key}: the run would tokenise the documents again")
    loader = ht.DataLoader(ht.PipelineDataset(pipe), **_loader_kwargs(spec["workers"]))
    steps = ({k: torch.from_numpy(v) for k, v in step.items()} for step in loader)  # as a training step
    rec = _epoch(steps, t0, lambda b: b["tokens"], lambda b: int(b["lengths"].sum()))
    rec["row_tokens"] = rec["steps"] * spec["rows"] * spec["max_len"]
    return rec


def _litdata_epoch(spec: dict) -> dict:
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    t0 = time.perf_counter()
    ds = StreamingDataset(spec["litdata"], item_loader=TokensLoader(block_size=spec["max_len"]), shuffle=True,
                          seed=0)
    loader = StreamingDataLoader(ds, batch_size=spec["rows"], **_loader_kwargs(spec["workers"]))
    rec = _epoch(loader, t0, lambda b: b, lambda b: b.numel())
    rec["row_tokens"] = rec["tokens_delivered"]
    return rec


def copy_limit(tokens_path: str, max_len: int, rows: int, repeats: int = 3) -> dict:
    """Tokens/s of numpy copying the token file (in memory) into int64 steps of ``rows``
    rows of ``max_len``, one process: the memory-bound floor under any loader's work."""
    flat = np.load(tokens_path)
    step = rows * max_len
    whole = len(flat) // step * step

    def run():
        total = 0
        for a in range(0, whole, step):
            total += int(flat[a : a + step].reshape(rows, max_len).astype(np.int64)[0, 0])
        return total

    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    seconds = float(np.median(times))
    return {"tokens": whole, "seconds": seconds, "tokens_per_s": whole / seconds if seconds else float("inf")}


def _main(spec: dict) -> dict:
    task = spec["task"]
    if task == "optimize":
        return _optimize(spec)
    if task == "hpcio":
        return _hpcio_epoch(spec)
    if task == "litdata":
        return _litdata_epoch(spec)
    from ..errors import InvalidArgumentError

    raise InvalidArgumentError(f"unknown packed-llm task {task!r}; expected optimize, hpcio or litdata")


def _run_worker(spec: dict, timeout: float = RUN_TIMEOUT_S) -> tuple[dict | None, str | None]:
    """Run ``spec`` in a fresh process: (its record with ``process_s``, failure or None)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    with tempfile.TemporaryDirectory(prefix="hpcio-bench-tokens-") as tmp:
        env["TMPDIR"] = tmp
        t = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "hpcio.bench.tokens", json.dumps(spec)],
                                  capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout:.0f} s"
        elapsed = time.perf_counter() - t
    if proc.returncode:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        return None, f"exit status {proc.returncode}: {tail}"
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    rec["process_s"] = elapsed
    return rec, None


# --- the figures -----------------------------------------------------------------------
def packed_llm_figures(dataset, root: str, *, workers=WORKERS, max_len: int = MAX_LEN, rows: int = ROWS,
                       repeats: int = 3, log=print) -> list[dict]:
    """Records of the packed-LLM row over the text ``dataset`` (a BenchDataset in MDS):
    one per (system, workers), and one for the numpy copy limit."""
    setup = prepare_tokens(dataset.path, root, max_len, log=log)
    base = {"section": "packed-llm", "profile": dataset.profile or "text", "max_len": max_len, "rows": rows,
            "documents": setup["documents"], "tokens_total": setup["tokens"],
            "checksum_total": setup["checksum"], "cores": len(os.sched_getaffinity(0))}
    systems = [("hpcio", {"source": setup["source"], "tokenizer": setup["tokenizer"], "cache": setup["cache"]},
                setup["tokenise_cache_s"])]
    if "litdata_error" not in setup:
        systems.append(("litdata", {"litdata": setup["litdata"]}, setup["optimize_s"]))
    runs: dict = {(name, w): [] for name, _, _ in systems for w in workers}
    errors: dict = {}
    for _ in range(repeats):
        for name, extra, _ in systems:
            for w in workers:
                if (name, w) in errors:
                    continue
                rec, failure = _run_worker({"task": name, "workers": w, "max_len": max_len, "rows": rows, **extra})
                if failure:
                    errors[name, w] = failure
                    log(f"  packed-llm {name} workers={w}: {failure}")
                else:
                    runs[name, w].append(rec)
    out = []
    for name, _, prepare_s in systems:
        for w in workers:
            rec = {**base, "system": name, "workers": w, "prepare_s": prepare_s}
            if (name, w) in errors:
                rec["error"] = errors[name, w]
                out.append(rec)
                continue
            got = runs[name, w]
            epoch = float(np.median([r["epoch_s"] for r in got]))
            first = got[0]
            rec.update(runs=len(got), epoch_s=epoch, epoch_best_s=min(r["epoch_s"] for r in got),
                       first_batch_s=float(np.median([r["first_batch_s"] or 0.0 for r in got])),
                       process_s=float(np.median([r["process_s"] for r in got])),
                       steps=first["steps"], tokens_delivered=first["tokens_delivered"],
                       checksum=first["checksum"], fill=first["tokens_delivered"] / first["row_tokens"]
                       if first["row_tokens"] else 0.0,
                       tokens_per_s=first["tokens_delivered"] / epoch if epoch else float("inf"))
            log(f"  packed-llm {name:8s} workers={w}: {rec['tokens_per_s']:>12,.0f} tokens/s  "
                f"({rec['tokens_delivered']:,} tokens in {rec['steps']} steps, fill {rec['fill']:.3f})")
            out.append(rec)
    if "litdata_error" in setup:
        out.append({**base, "system": "litdata", "workers": None, "error": setup["litdata_error"]})
    for rec in out:  # hpcio over litdata at the same workers
        peer = next((p for p in out if p["system"] == "litdata" and p["workers"] == rec["workers"]
                     and "tokens_per_s" in p), None)
        if rec["system"] == "hpcio" and "tokens_per_s" in rec and peer:
            rec["ratio_to_litdata"] = rec["tokens_per_s"] / peer["tokens_per_s"]
    limit = copy_limit(setup["tokens_file"], max_len, rows)
    log(f"  packed-llm limit (numpy copy into int64 rows, one process): {limit['tokens_per_s']:,.0f} tokens/s")
    out.append({**base, "system": "numpy copy (limit)", "workers": None, "tokens_per_s": limit["tokens_per_s"],
                "tokens_delivered": limit["tokens"], "epoch_s": limit["seconds"]})
    return out


if __name__ == "__main__":
    # through the module's own name: run as __main__, TokenizerMap would be
    # __main__.TokenizerMap, another stage to the cache key than the one that wrote it
    from hpcio.bench.tokens import _main as main

    print(json.dumps(main(json.loads(sys.argv[1]))))
