"""Reading from storage, not from the page cache: cold runs, datasets larger than the
memory a reader may use, and the device's own limits measured in the same run.

Every run starts with the dataset's files evicted (:mod:`hpcio.bench.pagecache`) and
checked with ``mincore``, whatever wrote or last read them.  A memory limit confines the
reader to a memory cgroup smaller than the dataset, so mapped pages are reclaimed as they
are on a node reading terabytes.  Each record carries the bytes the reader made the
storage read (``/proc/<pid>/io`` on a block device, the emulated tier's own count behind
:class:`~hpcio.bench.tier.EmulatedTier`) as a multiple of the dataset's bytes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from typing import Any

import numpy as np

from ..demo.samples import IMAGES_PER_SAMPLE
from ..errors import BenchmarkError, HpcioError
from .data import META_FIELDS, VLM_COLUMNS, BenchDataset, parquet_row_group_rows
from .limits import dataset_files
from .pagecache import evict, resident
from .runner import WORKER, System, systems_for

__all__ = ["COLD_OPS", "cold_systems", "synthetic_datasets", "device_limits", "memory_cgroup", "measure_cold",
           "run", "markdown"]

# Exact shuffle (``shuffle``) and the shuffled DataLoader epoch against the device's random
# reads; the block and buffer shuffles (hpcio.bench.worker) against the same reader's
# ``iterate``, whose access pattern they keep close to.
COLD_OPS = ("iterate", "shuffle", "shuffle-block", "shuffle-buffer", "dataloader")
_NEAR_ITERATE = ("shuffle-block", "shuffle-buffer")
_RANDOM = ("shuffle", "dataloader")

# Synthetic samples: sizes (and images per vlm sample) as the demo profiles have them,
# random (incompressible) payloads.
_VLM_IMAGE_BYTES = (30_000, 150_000)
_TEXT_CHARS = (500, 4000)
_WRITE_BATCH = 4096


def _samples(profile: str, n: int, seed: int):
    """``n`` synthetic samples, made a few thousand at a time from one numpy generator."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", np.uint8)
    for lo in range(0, n, _WRITE_BATCH):
        count = min(_WRITE_BATCH, n - lo)
        if profile == "vlm":
            counts = rng.integers(IMAGES_PER_SAMPLE[0], IMAGES_PER_SAMPLE[1] + 1, size=count)
            sizes = rng.integers(*_VLM_IMAGE_BYTES, size=int(counts.sum()))
            blob = rng.bytes(int(sizes.sum()))
            ends = np.cumsum(sizes).tolist()
            firsts = np.concatenate(([0], np.cumsum(counts))).tolist()
            for k in range(count):
                images = [blob[ends[m] - int(sizes[m]): ends[m]] for m in range(firsts[k], firsts[k + 1])]
                yield {"id": f"{lo + k:012d}",
                       "messages": [{"role": "user", "content": "<image>\n" * len(images) + "Describe the pictures."},
                                    {"role": "assistant", "content": f"Sample {lo + k}."}],
                       "images": images}
        else:
            sizes = rng.integers(*_TEXT_CHARS, size=count)
            text = letters[rng.integers(0, len(letters), size=int(sizes.sum()))].tobytes().decode()
            ends = np.cumsum(sizes)
            for k in range(count):
                yield {"id": lo + k, "text": text[ends[k] - sizes[k]: ends[k]],
                       "meta": {"source": "synthetic", "length": int(sizes[k])}}


def synthetic_datasets(profile: str, target_bytes: int, root: str, *, seed: int = 0,
                       formats=("mds", "webdataset", "jinx", "parquet"), write=None, log=print) -> list[BenchDataset]:
    """Datasets of about ``target_bytes`` each, written once under ``root`` and reused.
    ``write``: the formats to write when missing (default all); the others are only
    described, for choosing the readers.  Parquet is written by pyarrow, in the row
    groups Hugging Face writes (:func:`~hpcio.bench.data.parquet_row_group_rows`)."""
    import hpcio

    if profile == "vlm":
        mean = np.mean(_VLM_IMAGE_BYTES) * np.mean(IMAGES_PER_SAMPLE) + 200
    else:
        mean = np.mean(_TEXT_CHARS) + 200
    n = max(1, int(target_bytes // mean))
    columns = VLM_COLUMNS if profile == "vlm" else {"id": "int", "text": "str", "meta": "json"}
    options = {"mds": {"columns": columns}, "webdataset": {}, "jinx": {}, "parquet": {}}
    out = []
    for fmt in formats:
        folder = os.path.join(root, f"{profile}-{target_bytes}-{seed}", fmt)
        # JINX is one file (and its sidecar); the other formats are directories
        path = os.path.join(folder, "data.jinx") if fmt == "jinx" else folder
        done = folder + ".complete"  # beside it: readers list every file of the folder
        if (write is None or fmt in write) and not os.path.exists(done):
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            log(f"writing {n} synthetic {profile} samples as {fmt} in {path}")
            if fmt == "parquet":
                _write_parquet(os.path.join(path, "data.parquet"), _samples(profile, n, seed),
                               parquet_row_group_rows(profile))
            else:
                with hpcio.open_writer(path, format=fmt, **options[fmt]) as w:
                    for sample in _samples(profile, n, seed):
                        w.write(sample)
            open(done, "w").close()
        out.append(BenchDataset(fmt, fmt, path, n, options[fmt], profile))
    return out


def _write_parquet(path: str, samples, rows_per_group: int) -> None:
    """``samples`` as one Parquet file, a row group of ``rows_per_group`` at a time (the
    samples are never all in memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(path), exist_ok=True)
    samples = iter(samples)
    writer = None
    try:
        while group := list(itertools.islice(samples, rows_per_group)):
            table = pa.Table.from_pylist(group)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table, row_group_size=rows_per_group)
    finally:
        if writer is not None:
            writer.close()


def _fio(args: list[str]) -> dict:
    proc = subprocess.run(["fio", "--output-format=json", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise HpcioError(f"fio failed: {proc.stderr.strip() or proc.stdout.strip()}")
    job = json.loads(proc.stdout)["jobs"][0]["read"]
    return {"bytes_per_s": job["bw_bytes"], "iops": job["iops"]}


def device_limits(directory: str, *, file_bytes: int = 2 << 30, request_bytes: int = 128 << 10,
                  depths=(1, 4, 16, 32), seconds: int = 5) -> dict:
    """The storage under ``directory`` read with ``O_DIRECT`` by fio: sequential 4 MiB
    reads, and random reads of ``request_bytes`` at each queue depth (the best kept)."""
    if shutil.which("fio") is None:
        raise HpcioError("fio is not installed (Debian: apt-get install fio); the device limits are unknown")
    with tempfile.TemporaryDirectory(dir=directory, prefix="hpcio-fio-") as tmp:
        target = os.path.join(tmp, "fio.dat")
        common = [f"--filename={target}", f"--size={file_bytes}", "--direct=1", "--ioengine=libaio",
                  "--name=limit", f"--runtime={seconds}", "--time_based"]
        fill = subprocess.run(["fio", f"--filename={target}", f"--size={file_bytes}", "--name=fill",
                               "--rw=write", "--bs=4M", "--direct=1"], capture_output=True, text=True)
        if fill.returncode != 0:
            raise HpcioError(f"fio cannot write {target} with O_DIRECT: {fill.stderr.strip() or fill.stdout.strip()}")
        seq = _fio([*common, "--rw=read", "--bs=4M", "--iodepth=8"])
        rand = {d: _fio([*common, "--rw=randread", f"--bs={request_bytes}", f"--iodepth={d}"]) for d in depths}
    best = max(rand, key=lambda d: rand[d]["bytes_per_s"])
    return {"sequential_bytes_per_s": seq["bytes_per_s"], "random_request_bytes": request_bytes,
            "random_bytes_per_s": rand[best]["bytes_per_s"], "random_best_depth": best,
            "random_by_depth": {d: r["bytes_per_s"] for d, r in rand.items()}}


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int):
    """A memory cgroup (v1 or v2) limited to ``limit_bytes``; yields the file a process
    writes its pid to in order to join it."""
    v1 = "/sys/fs/cgroup/memory"
    v2 = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
    if os.path.exists(os.path.join(v1, "memory.limit_in_bytes")):
        parent, limit_file = v1, "memory.limit_in_bytes"
    elif "memory" in _read_text(os.path.join(v2, "cgroup.controllers")).split():
        parent, limit_file = v2, "memory.max"
    else:
        raise HpcioError("no memory cgroup controller is available: cannot confine the reader's memory")
    group = os.path.join(parent, f"hpcio-bench-{os.getpid()}")
    os.mkdir(group)
    try:
        with open(os.path.join(group, limit_file), "w") as f:
            f.write(str(int(limit_bytes)))
        yield os.path.join(group, "cgroup.procs")
    except BaseException as err:
        _remove_cgroup(group, err)
        raise
    else:
        _remove_cgroup(group, None)


def _remove_cgroup(group: str, in_flight: BaseException | None) -> None:
    """Remove ``group``, first ending the processes still in it (a reader killed by a
    Ctrl-C may leave its children); an exception in flight is never replaced."""
    for _ in range(50):
        try:
            os.rmdir(group)
            return
        except FileNotFoundError:
            return
        except OSError as err:  # EBUSY: processes are still members
            failure = err
        try:
            pids = [int(p) for p in _read_text(os.path.join(group, "cgroup.procs")).split()]
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    message = f"removing the benchmark's memory cgroup {group} failed: {failure.strerror}"
    if in_flight is None:
        raise BenchmarkError(message)
    warnings.warn(f"{message} (while handling {type(in_flight).__name__})", RuntimeWarning, stacklevel=3)


def _join(procs: str | None):
    if procs is None:
        return None

    def join() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    return join


def measure_cold(system: System, dataset: BenchDataset, op: str, profile: str, *,
                 cgroup_procs: str | None = None, tier=None) -> dict:
    """One cold run of ``system`` doing ``op`` over ``dataset`` (read through ``tier``'s
    mount when given), in a fresh process."""
    path = dataset.path if tier is None else tier.path(os.path.relpath(dataset.path, tier.source))
    files = dataset_files(path)
    source_before = None
    if tier is not None:
        from .tier import cache_source

        source_before = cache_source(dataset_files(dataset.path))
    evict(files)
    before = resident(files)
    tier_before = tier.stats() if tier is not None else None
    spec = {"system": system.system, "op": op, "profile": profile, "path": path,
            "options": system.options, "meta_fields": META_FIELDS[profile], "n": dataset.samples, "anon_peak": True}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if system.system == "hpcio":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="hpcio-cold-") as tmp:
        env["TMPDIR"] = tmp
        before_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([system.python, WORKER, json.dumps(spec)], capture_output=True, text=True,
                              env=env, preexec_fn=_join(cgroup_procs))
        after_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = sum(os.path.getsize(f) for f in files)
    head = {"system": system.label, "dataset": dataset.name, "op": op, "profile": profile,
            "dataset_bytes": total, "resident_before": before.fraction, "tier_source_resident": source_before,
            "tier": None if tier is None else {"latency_us": tier.latency_us, "bandwidth": tier.bandwidth,
                                               "max_background": tier.max_background,
                                               "read_ahead_kb": tier.read_ahead_kb}}
    if proc.returncode != 0:
        return {**head, "error": _failure(proc, cgroup_procs)}
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    storage = (tier.stats()["bytes"] - tier_before["bytes"]) if tier is not None else rec.get("io_read_bytes")
    return {
        # the open counts: a reader that loads the whole file when opened (pyarrow's
        # read_table) makes its storage reads there
        **head, "samples": rec["samples"], "open_s": rec["open_s"], "op_s": rec["op_s"],
        "samples_per_s": rec["samples"] / rec["total_s"] if rec["total_s"] else float("inf"),
        "bytes_per_s": total / rec["total_s"] if rec["total_s"] else float("inf"),
        "maxrss_mb": rec["maxrss_mb"], "anon_peak_mb": rec.get("anon_peak_mb"),
        "anon_at_open_mb": rec.get("anon_at_open_mb"), "storage_bytes": storage,
        # the reader's CPU seconds, whole process: on a busy machine, bytes per CPU second
        # say how fast it would read with a core of its own, where it is CPU-bound
        "cpu_s": (after_cpu.ru_utime - before_cpu.ru_utime) + (after_cpu.ru_stime - before_cpu.ru_stime),
        "runqueue_wait_s": rec.get("runqueue_wait_s"),
        "storage_ratio": storage / total if storage is not None and total else None,
        "checksum": rec["checksum"],
    }


def _failure(proc: subprocess.CompletedProcess, cgroup_procs: str | None) -> str:
    """Why a run failed, in one line: a reader killed inside the memory cgroup ran out of
    the memory it was allowed, which is a result (it needs more than the limit), not a crash."""
    if proc.returncode == -9 and cgroup_procs is not None:
        return "killed by the memory cgroup: needs more memory than the limit"
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
    return f"exit status {proc.returncode}: {tail}"


def _tier_label(tier: dict) -> str:
    """``emulated 5000 us``, with the client's request size and depth when they were set."""
    label = f"emulated {tier['latency_us']} us"
    if tier.get("read_ahead_kb") or tier.get("max_background"):
        label += f", {tier.get('read_ahead_kb') or 128} KiB x {tier.get('max_background') or 12}"
    return label


def cold_systems(datasets: list[BenchDataset], include_interop: bool = True) -> list[System]:
    """The readers of the cold runs: the warm comparison's, with hpcio's block and buffer
    shuffles and DataLoader epoch on sharded formats, webdataset's buffer shuffle, and the
    one-request-at-a-time baseline (one ``pread`` per MDS record, in shuffled order) added."""
    systems = systems_for(datasets, include_interop)
    for s in systems:
        if s.system == "hpcio" and s.dataset.startswith("mds"):
            s.ops = (*s.ops, "shuffle-block", "shuffle-buffer", "dataloader")
        elif s.system == "webdataset":
            s.ops = (*s.ops, "shuffle-buffer")
    if any(d.name == "mds" for d in datasets):
        systems.append(System("one-request mds", "one-request", "mds", ops=("shuffle",), peer=False))
    return systems


def run(profile: str, target_bytes: int, root: str, *, ops=COLD_OPS, memory_limit: int | None = None,
        only=None, include_interop: bool = True, tier: Any = None, log=print) -> list[dict]:
    """Cold runs of every system on synthetic datasets of ``target_bytes``; ``tier``: read
    them through :class:`~hpcio.bench.tier.EmulatedTier` with these keyword arguments."""
    datasets = synthetic_datasets(profile, target_bytes, root, write=(), log=log)
    systems = [s for s in cold_systems(datasets, include_interop)
               if not only or any(word in s.label for word in only)]
    # only what the chosen readers read is written (6 GB of tar for nobody took minutes)
    datasets = synthetic_datasets(profile, target_bytes, root, write={s.dataset for s in systems}, log=log)
    by_name = {d.name: d for d in datasets}
    records = []
    with contextlib.ExitStack() as stack:
        procs = stack.enter_context(memory_cgroup(memory_limit)) if memory_limit else None
        if tier is not None:
            from .tier import EmulatedTier

            tier = stack.enter_context(EmulatedTier(root, **tier))
        for system in systems:
            for op in ops:
                if op not in system.ops:
                    continue
                rec = measure_cold(system, by_name[system.dataset], op, profile, cgroup_procs=procs, tier=tier)
                rec["memory_limit"] = memory_limit
                records.append(rec)
                if "error" in rec:
                    log(f"{rec['system']:32} {op:14} failed: {rec['error']}")
                    continue
                log(f"{rec['system']:32} {op:14} {rec['samples_per_s']:>12,.0f} samples/s "
                    f"{rec['bytes_per_s'] / 1e6:>8,.0f} MB/s  rss {rec['maxrss_mb']:>7,.0f} MB  "
                    f"anon {rec['anon_peak_mb'] or float('nan'):>7,.0f} MB "
                    f"({rec['anon_at_open_mb'] or float('nan'):,.0f} at open)  cpu {rec['cpu_s']:.1f} s  "
                    f"waiting for a cpu {rec['runqueue_wait_s'] or float('nan'):.1f} s  "
                    f"storage {rec['storage_ratio'] or float('nan'):.2f}x  resident before "
                    f"{rec['resident_before']:.2f}")
    return records


def markdown(limits: dict | None, records: list[dict]) -> str:
    """The cold runs as a table, each against the device limit its access pattern meets
    (when ``limits`` are known), and the block and buffer shuffles also against the same
    reader's iterate."""
    iterate = {(r["profile"], r["system"], str(r["tier"])): r["bytes_per_s"]
               for r in records if r["op"] == "iterate" and "error" not in r}
    if limits is None:
        seq = rnd = None
        lines = ["Device limits unknown (fio could not read the storage with O_DIRECT).", ""]
    else:
        seq, rnd = limits["sequential_bytes_per_s"], limits["random_bytes_per_s"]
        lines = [f"Device (fio, O_DIRECT): sequential {seq / 1e6:,.0f} MB/s; random "
                 f"{limits['random_request_bytes'] >> 10} KiB reads {rnd / 1e6:,.0f} MB/s at depth "
                 f"{limits['random_best_depth']}.", ""]
    lines += ["| profile | system | op | samples/s | MB/s | of device | of iterate | peak RSS / dataset "
              "| peak anonymous / dataset | anonymous at open MB | storage read / dataset | MB per CPU s | tier |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        limit = rnd if r["op"] in _RANDOM else seq
        tier = "local" if r["tier"] is None else _tier_label(r["tier"])
        if "error" in r:
            lines.append(f"| {r['profile']} | {r['system']} | {r['op']} | {r['error']} |||||||||{tier} |")
            continue
        ratio = "-" if r["storage_ratio"] is None else f"{r['storage_ratio']:.2f}"
        base = iterate.get((r["profile"], r["system"], str(r["tier"])))
        near = f"{r['bytes_per_s'] / base:.2f}" if r["op"] in _NEAR_ITERATE and base else "-"
        of_device = "-" if limit is None else f"{r['bytes_per_s'] / limit:.2f}"
        cpu = f"{r['dataset_bytes'] / 1e6 / r['cpu_s']:,.0f}" if r.get("cpu_s") else "-"
        anon = f"{r['anon_peak_mb'] * 1e6 / r['dataset_bytes']:.3f}" if r.get("anon_peak_mb") is not None else "-"
        at_open = f"{r['anon_at_open_mb']:,.0f}" if r.get("anon_at_open_mb") is not None else "-"
        lines.append(f"| {r['profile']} | {r['system']} | {r['op']} | {r['samples_per_s']:,.0f} | "
                     f"{r['bytes_per_s'] / 1e6:,.0f} | {of_device} | {near} | "
                     f"{r['maxrss_mb'] * 1e6 / r['dataset_bytes']:.3f} | {anon} | {at_open} | {ratio} | {cpu} | "
                     f"{tier} |")
    return "\n".join(lines) + "\n"
