"""Staging and conversion figures, each against the standard tool on the same bytes.

Staging: ``hpcio.stage`` (copy plus checksum verification) against ``cp -r`` of the same
dataset directory, both without fsync (``stage``'s default for a node-local destination
such as this temporary directory); and ``hpcio.stage(fsync=True)`` (the default for a
shared destination) against ``cp -r`` followed by ``sync``, which is what the same
durability costs ``cp``.  Warm page cache, fresh destination each run.  Each figure is
the median of PIPELINE_REPEATS runs, the systems taking turns.  The stage is timed
inside its process (imports excluded) and as a whole process.

Conversion: the bench's Parquet file written as MDS by ``hpcio convert`` on 1 and 2 MPI
ranks, by ``mdf convert parquet mds`` (mldataforge, from the interop environment, with a
fresh Hugging Face datasets cache each run), and by streaming's ``MDSWriter`` and
webdataset's ``ShardWriter`` (each reading the same Parquet with pyarrow).  Every writer
runs as a whole process and is timed from launch to exit, imports included, since that is
what a conversion job costs; samples/s per rank divides by the number of ranks.  For
hpcio the job's own time (``convert --json``: planning, writing and publishing, without
interpreter start, imports and MPI start-up) is reported too, since at bench sizes the
start-up of a second rank is a large part of the whole-process time.  hpcio's 1- and
2-rank jobs run again on a larger Parquet file of the same profile (``larger``), where
the job's fixed costs weigh less.  Beside the scaling stands the memory copy bandwidth
of one process and of two at once (:func:`.limits.memory_copy_scaling`): what the
copying part of a job can gain from a second rank on the same node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from .limits import memory_copy_scaling

__all__ = ["staging_figures", "conversion_figures"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What each peer stores a column as, from the Parquet schema the bench writes: a list of
# binaries (a sample's images) is pickled, the only list-of-binaries encoding MDS has.
_PEER_COLUMN_KIND = """
import pyarrow as pa
def kind(t):
    if pa.types.is_integer(t): return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t): return "str"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t): return "bytes"
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_binary(t.value_type): return "pkl"
    return "json"
"""

_PEER_WRITERS = {
    "streaming MDSWriter": _PEER_COLUMN_KIND + """
import sys, pyarrow.parquet as pq
from streaming import MDSWriter
table = pq.read_table(sys.argv[1])
cols = {f.name: kind(f.type) for f in table.schema}
with MDSWriter(out=sys.argv[2], columns=cols, size_limit=1 << 26) as w:
    for r in table.to_pylist():
        w.write(r)
""",
    "webdataset ShardWriter": _PEER_COLUMN_KIND + """
import sys, os, json, pickle, pyarrow.parquet as pq
import webdataset as wds
table = pq.read_table(sys.argv[1])
suffix = {f.name: {"bytes": ".bin", "str": ".txt", "pkl": ".pickle"}.get(kind(f.type), ".json") for f in table.schema}
encode = {".bin": lambda v: v, ".txt": lambda v: v, ".pickle": pickle.dumps, ".json": json.dumps}
os.makedirs(sys.argv[2])
with wds.ShardWriter(os.path.join(sys.argv[2], "shard-%06d.tar"), maxsize=1 << 26, verbose=0) as w:
    for i, r in enumerate(table.to_pylist()):
        s = {"__key__": f"{i:09d}"}
        for k, v in r.items():
            s[k + suffix[k]] = encode[suffix[k]](v)
        w.write(s)
""",
}


# Staging and conversion jobs take under a second each (the peers' conversions a few
# seconds), and on this kind of shared machine a job touching fresh memory runs fast or up
# to three times slower by the host's state, two-rank jobs more often than one-rank ones:
# every system runs this many times, the systems taking turns, so a slow spell hits them
# alike.  The median is the figure; the best run is reported beside it.
PIPELINE_REPEATS = 7
# One staging or conversion process takes seconds; one that runs this long is stuck (an
# MPI launcher waiting for resources, say) and is killed with its process group.
RUN_TIMEOUT_S = 300


def _run(cmd: list[str], env, timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session; on timeout kill the whole group (an ``mpiexec``'s
    ranks too), then raise :class:`subprocess.TimeoutExpired`."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _run_once(make_cmd, env, timeout: float = RUN_TIMEOUT_S) -> tuple[subprocess.CompletedProcess | None, float,
                                                                      str | None]:
    """Run ``make_cmd(output directory)`` in a fresh temporary directory: (process, wall
    seconds, failure message or None)."""
    with tempfile.TemporaryDirectory(prefix="hpcio-bench-pipe-") as tmp:
        cmd = make_cmd(os.path.join(tmp, "out"))
        t = time.perf_counter()
        try:
            proc = _run(cmd, env, timeout)
            failure = f"{' '.join(cmd[:4])} failed: {proc.stderr.strip()[-500:]}" if proc.returncode else None
        except subprocess.TimeoutExpired:
            proc, failure = None, f"{' '.join(cmd[:4])} timed out after {timeout:.0f} s"
        except OSError as exc:
            proc, failure = None, f"{' '.join(cmd[:4])} failed: {exc}"
        return proc, time.perf_counter() - t, failure


def _alternating(runs: list[tuple], repeats: int, env=None, log=print, twice: bool = False) -> dict:
    """Run each ``(label, make_cmd, inner)`` in turn, ``repeats`` rounds, each in a fresh
    output directory.  Returns ``{label: {"runs", "wall", "wall_best", "inner", "inner_best",
    "details"}}`` (runs timed; median and best seconds; ``inner(stdout)`` is ``(seconds, details)``:
    the seconds a process reports for its own work and whatever else it reports, or None
    to keep, one ``details`` per run; None without ``inner``), or ``{label: {"error":
    message}}`` for a system that failed, which is not run again.

    ``twice``: each turn runs the system twice in a row (the last system once more
    before the first turn, untimed), so half of a system's runs follow the previous
    system's run and half follow its own; ``"inner_after_previous"`` and
    ``"inner_after_same"`` are the medians of each half's own seconds."""
    labels = [label for label, _cmd, _inner in runs]
    times: dict[str, list[float]] = {label: [] for label in labels}
    inner_times: dict[str, list[float]] = {label: [] for label in labels}
    by_turn: dict[str, tuple[list, list]] = {label: ([], []) for label in labels}
    details: dict[str, list] = {label: [] for label in labels}
    errors: dict[str, str] = {}
    if twice and runs:
        _run_once(runs[-1][1], env)
    for _ in range(repeats):
        for label, make_cmd, inner in runs:
            for turn in range(2 if twice else 1):
                if label in errors:
                    continue
                proc, elapsed, failure = _run_once(make_cmd, env)
                if failure is not None:
                    errors[label] = failure
                    log(f"  {label}: {failure}")
                    continue
                times[label].append(elapsed)
                if inner is not None:
                    seconds, more = inner(proc.stdout)
                    inner_times[label].append(seconds)
                    by_turn[label][turn].append(seconds)
                    if more is not None:
                        details[label].append(more)
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        if label in errors:
            out[label] = {"error": errors[label]}
            continue
        wall, own = times[label], inner_times[label]
        out[label] = {"runs": len(wall), "wall": float(np.median(wall)), "wall_best": min(wall),
                      "inner": float(np.median(own)) if own else None, "inner_best": min(own) if own else None,
                      "details": details[label]}
        after_previous, after_same = by_turn[label]
        if twice and after_previous and after_same:
            out[label].update(inner_after_previous=float(np.median(after_previous)),
                              inner_after_same=float(np.median(after_same)))
    return out


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


# hpcio.stage imports its modules on first use: imported before the clock starts, as the
# docstring promises (imports excluded); the whole-process time includes them.
_STAGE_SCRIPT = """
import json, sys, time
import hpcio, hpcio.staging.stage
t = time.perf_counter()
hpcio.stage(sys.argv[1], sys.argv[2], progress=False, fsync=sys.argv[3] == "fsync")
print(json.dumps({"stage_s": time.perf_counter() - t}))
"""


def staging_figures(datasets, profile: str, repeats: int = PIPELINE_REPEATS, log=print) -> list[dict]:
    """Bytes/s of ``hpcio.stage`` (verified) against ``cp -r``, and of
    ``hpcio.stage(fsync=True)`` against ``cp -r; sync``, copying each dataset directory."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    stage_seconds = lambda stdout: (_last_json(stdout)["stage_s"], None)  # noqa: E731
    out = []
    for d in datasets:
        if d.name != "mds" or not os.path.isdir(d.path):
            continue
        size = d.bytes
        t = _alternating([
            ("cp", lambda dst, src=d.path: ["cp", "-r", src, dst], None),
            ("cp_sync", lambda dst, src=d.path: ["sh", "-c", 'cp -r "$0" "$1" && sync', src, dst], None),
            ("stage", lambda dst, src=d.path: [sys.executable, "-c", _STAGE_SCRIPT, src, dst, "no-fsync"],
             stage_seconds),
            ("stage_fsync", lambda dst, src=d.path: [sys.executable, "-c", _STAGE_SCRIPT, src, dst, "fsync"],
             stage_seconds),
        ], repeats, env, log)
        failed = {label: r["error"] for label, r in t.items() if "error" in r}
        if failed:
            out.append({"section": "staging", "profile": profile, "dataset": d.name, "error": "; ".join(failed.values())})
            continue
        cp, cp_sync, st, st_sync = t["cp"]["wall"], t["cp_sync"]["wall"], t["stage"]["inner"], t["stage_fsync"]["inner"]
        rec = {"section": "staging", "profile": profile, "dataset": d.name, "bytes": size, "runs": repeats,
               "cp_s": cp, "cp_sync_s": cp_sync, "stage_s": st, "stage_process_s": t["stage"]["wall"],
               "stage_fsync_s": st_sync, "stage_fsync_process_s": t["stage_fsync"]["wall"],
               "cp_bytes_per_s": size / cp, "cp_sync_bytes_per_s": size / cp_sync,
               "stage_bytes_per_s": size / st, "stage_fsync_bytes_per_s": size / st_sync,
               "ratio": cp / st, "ratio_sync": cp_sync / st_sync,
               "ratio_best": t["cp"]["wall_best"] / t["stage"]["inner_best"],
               "ratio_sync_best": t["cp_sync"]["wall_best"] / t["stage_fsync"]["inner_best"]}
        log(f"  staging {profile} {d.name}: hpcio.stage {size / st / 1e6:,.0f} MB/s "
            f"(whole process {size / rec['stage_process_s'] / 1e6:,.0f}) against cp -r {size / cp / 1e6:,.0f} MB/s; "
            f"with fsync {size / st_sync / 1e6:,.0f} MB/s against cp -r + sync {size / cp_sync / 1e6:,.0f} MB/s")
        out.append(rec)
    return out


def _job_and_phases(stdout: str) -> tuple[float, dict]:
    """A conversion's job seconds and its phases (seconds per rank) from its summary."""
    summary = _last_json(stdout)
    return summary["seconds"], summary["phases"]


def _median_phases(runs: list[dict]) -> dict:
    """Per phase, the median over runs of the slowest rank's seconds.

    >>> _median_phases([{"read": [0.1, 0.3]}, {"read": [0.2, 0.2]}, {"read": [0.5, 0.1]}])
    {'read': 0.3}
    """
    return {name: float(np.median([max(run[name]) for run in runs])) for name in runs[0]}


def _hpcio_convert_runs(src: str, samples: int, suffix: str = "") -> list[tuple]:
    """``(label, ranks, samples, make_cmd, inner)`` of ``hpcio convert`` on 1 and 2 ranks
    of ``src``."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    runs = []
    for ranks in (1, 2):
        def cmd(dst, ranks=ranks):
            convert = ["-m", "hpcio.cli.main", "convert", src, dst, "--to", "mds", "--num-shards", "4", "--json"]
            if ranks == 1:
                return [sys.executable, *convert]
            return [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", *convert]

        label = f"hpcio convert ({ranks} rank{'s' if ranks > 1 else ''}){suffix}"
        runs.append((label, ranks, samples, cmd, _job_and_phases))
    return runs


def _add_scaling(records: list[dict]) -> None:
    """Put the 1→2 rank scaling (whole process, job alone, best job runs) on the 2-rank
    record of hpcio's pair of ``records``."""
    one = next((r for r in records if r["ranks"] == 1 and "wall_s" in r), None)
    two = next((r for r in records if r["ranks"] == 2 and "wall_s" in r), None)
    if one and two:
        two["scaling_1_to_2"] = one["wall_s"] / two["wall_s"]
        if one.get("job_s") and two.get("job_s"):
            two["job_scaling_1_to_2"] = one["job_s"] / two["job_s"]
            two["job_scaling_1_to_2_best"] = one["job_best_s"] / two["job_best_s"]
        for after in ("one_rank", "two_ranks"):
            if one.get(f"job_after_{after}_s") and two.get(f"job_after_{after}_s"):
                two[f"job_scaling_1_to_2_after_{after}"] = one[f"job_after_{after}_s"] / two[f"job_after_{after}_s"]


def conversion_figures(profile: str, n: int, datasets=None, repeats: int = PIPELINE_REPEATS, log=print,
                       interop_python: str | None = None, larger: tuple[str, int] | None = None,
                       only: list[str] | None = None) -> list[dict]:
    """Samples/s per rank writing the Parquet samples as MDS (hpcio on 1 and 2 ranks) and
    with the peers' writers (``mdf convert`` when ``interop_python`` is given).

    ``only``: keep the peers' writers whose label contains one of these words.
    ``larger`` is ``(Parquet file, samples)`` of a bigger input on which hpcio's 1- and
    2-rank jobs are run again: at the bench's sizes a job takes a fraction of a second,
    and its fixed costs (the exchange's set-up, the options agreed between ranks, the
    fsyncs of the shared disk) weigh on the scaling as they would not on a real dataset.
    """
    parquet = next((d for d in datasets or [] if d.name == "parquet"), None)
    if parquet is None:
        return []
    src = os.path.join(parquet.path, "data.parquet")
    # HYDRA_LAUNCHER=fork: inside a Slurm step, MPICH's mpiexec would start its ranks
    # with a nested srun that never gets resources; the bench's ranks all run here.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               PYTHONWARNINGS="ignore", HYDRA_LAUNCHER="fork",
               HPCIO_TUNE="all")  # the tuning a conversion job opts in to
    hpcio_runs = _hpcio_convert_runs(src, n)
    larger_runs = [] if larger is None else _hpcio_convert_runs(larger[0], larger[1], f", {larger[1]:,} samples")
    peer_runs = []
    if interop_python:
        mdf = os.path.join(os.path.dirname(interop_python), "mdf")
        # HF datasets caches the Parquet it loads; a cache inside the run's temporary
        # directory makes every run convert from scratch.
        peer_runs.append(("mdf convert", 1, n, lambda dst: ["env", f"HF_DATASETS_CACHE={dst}.hf-cache", mdf,
                                                            "convert", "parquet", "mds", dst, src, "--yes"], None))
    for label, script in _PEER_WRITERS.items():
        peer_runs.append((label, 1, n, lambda dst, script=script: [sys.executable, "-c", script, src, dst], None))  # type: ignore[misc]
    if only:  # the bench's --only: peers' writers by label, like its readers
        peer_runs = [run for run in peer_runs if any(word in run[0] for word in only)]
    # hpcio's 1- and 2-rank jobs take turns with each other, the peers with each other: a
    # peer's run frees hundreds of MB (mdf convert peaks near 1 GB) that the next job then
    # takes back from the host, so interleaving both groups would tie the scaling figure
    # to which peer ran last.
    # On a virtual machine a job runs faster or slower depending on what ran just before
    # it (any job ran faster after a two-rank job than after a one-rank one; figures in
    # docs/performance.md).  Taking turns alone would time every
    # two-rank job after a one-rank one and every one-rank job after a two-rank one.
    # Each turn runs hpcio's jobs twice, so each kind has as many runs after either kind,
    # and the scaling is also given with both kinds after the same kind of job.
    # What two processes sharing the node's memory bandwidth can do, next to the scaling.
    copy = memory_copy_scaling()
    log(f"  memory copy: one process {copy['one_bytes_per_s'] / 1e9:.1f} GB/s, two at once "
        f"{sum(copy['two_bytes_per_s']) / 1e9:.1f} GB/s together (scaling {copy['scaling']:.2f})")
    groups = [(hpcio_runs, True), (larger_runs, True), (peer_runs, False)]
    out_groups = []
    for group, twice in groups:
        timed = _alternating([(label, cmd, inner) for label, _ranks, _n, cmd, inner in group], repeats, env, log,
                             twice=twice)
        out_groups.append([_conversion_record(profile, label, ranks, count, timed[label], log)
                           for label, ranks, count, _cmd, _inner in group])
    hpcio_out, larger_out, peer_out = out_groups
    _add_scaling(hpcio_out)
    _add_scaling(larger_out)
    for r in hpcio_out:
        if "scaling_1_to_2" in r:
            r["memory_copy"] = copy
    one = next((r for r in hpcio_out if r["ranks"] == 1 and "wall_s" in r), None)
    if one:
        for r in peer_out:
            if "wall_s" in r:
                r["hpcio_ratio"] = r["wall_s"] / one["wall_s"]
    return hpcio_out + larger_out + peer_out


def _conversion_record(profile: str, label: str, ranks: int, count: int, t: dict, log) -> dict:
    """The report's record of one writer from its :func:`_alternating` figures."""
    if "error" in t:
        return {"section": "conversion", "profile": profile, "writer": label, "ranks": ranks, "samples": count,
                "error": t["error"]}
    wall, job = t["wall"], t["inner"]
    rec = {"section": "conversion", "profile": profile, "writer": label, "ranks": ranks, "samples": count,
           "runs": t["runs"], "wall_s": wall, "wall_best_s": t["wall_best"], "samples_per_s": count / wall,
           "samples_per_s_per_rank": count / wall / ranks}
    if job is not None:
        rec.update(job_s=job, job_best_s=t["inner_best"], job_samples_per_s=count / job)
    if t.get("inner_after_previous") is not None:
        # hpcio's jobs run 1 rank, then 2 ranks: a one-rank job's first run of a turn
        # follows a two-rank job, a two-rank job's first run a one-rank job
        previous, same = t["inner_after_previous"], t["inner_after_same"]
        rec.update(job_after_one_rank_s=same if ranks == 1 else previous,
                   job_after_two_ranks_s=previous if ranks == 1 else same)
    if t.get("details"):
        rec["phases_s"] = _median_phases(t["details"])
    log(f"  conversion {profile} {label}: {count / wall:,.0f} samples/s ({count / wall / ranks:,.0f} per rank)"
        + (f", job alone {count / job:,.0f} samples/s" if job else ""))
    return rec
