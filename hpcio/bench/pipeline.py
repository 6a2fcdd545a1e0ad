"""Staging and conversion figures, each against the standard tool on the same bytes.

Staging: ``hpcio.stage`` (copy plus checksum verification) against ``cp -r`` of the same
dataset directory, both without fsync (``stage``'s default for a node-local destination
such as this temporary directory); and ``hpcio.stage(fsync=True)`` (the default for a
shared destination) against ``cp -r`` followed by ``sync``, which is what the same
durability costs ``cp``.  Warm page cache, fresh destination each run.  The stage is timed
inside its process (imports excluded) and as a whole process.

Conversion: the bench's Parquet file written as MDS by ``hpcio convert`` on 1 and 2 MPI
ranks, by ``mdf convert parquet mds`` (mldataforge, from the interop environment, with a
fresh Hugging Face datasets cache each run), and by streaming's ``MDSWriter`` and
webdataset's ``ShardWriter`` (each reading the same Parquet with pyarrow).  Every writer
runs as a whole process and is timed from launch to exit, imports included, since that is
what a conversion job costs; samples/s per rank divides by the number of ranks.  For
hpcio the job's own time (``convert --json``: planning, writing and publishing, without
interpreter start, imports and MPI start-up) is reported too, since at bench sizes the
start-up of a second rank is a large part of the whole-process time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

__all__ = ["staging_figures", "conversion_figures"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_PEER_WRITERS = {
    "streaming MDSWriter": """
import sys, pyarrow.parquet as pq
from streaming import MDSWriter
rows = pq.read_table(sys.argv[1]).to_pylist()
cols = {k: ("int" if isinstance(v, int) else "str" if isinstance(v, str) else "bytes" if isinstance(v, bytes) else "json")
        for k, v in rows[0].items()}
with MDSWriter(out=sys.argv[2], columns=cols, size_limit=1 << 26) as w:
    for r in rows:
        w.write(r)
""",
    "webdataset ShardWriter": """
import sys, os, json, pyarrow.parquet as pq
import webdataset as wds
rows = pq.read_table(sys.argv[1]).to_pylist()
os.makedirs(sys.argv[2])
with wds.ShardWriter(os.path.join(sys.argv[2], "shard-%06d.tar"), maxsize=1 << 26, verbose=0) as w:
    for i, r in enumerate(rows):
        s = {"__key__": f"{i:09d}"}
        for k, v in r.items():
            s[k + (".bin" if isinstance(v, bytes) else ".txt" if isinstance(v, str) else ".json")] = (
                v if isinstance(v, (bytes, str)) else json.dumps(v))
        w.write(s)
""",
}


def _median_wall(make_cmd, repeats: int, env=None, inner=None) -> tuple[float, float | None]:
    """Median wall seconds of the command, and the median of ``inner(stdout)`` (the
    seconds a process reports for its own work) when ``inner`` is given."""
    times, inner_times = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="hpcio-bench-pipe-") as tmp:
            dst = os.path.join(tmp, "out")
            cmd = make_cmd(dst)
            t = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            times.append(time.perf_counter() - t)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd[:4])} failed: {proc.stderr.strip()[-500:]}")
            if inner is not None:
                inner_times.append(inner(proc.stdout))
    return float(np.median(times)), (float(np.median(inner_times)) if inner_times else None)


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


def staging_figures(datasets, profile: str, repeats: int = 3, log=print) -> list[dict]:
    """Bytes/s of ``hpcio.stage`` (verified) against ``cp -r``, and of
    ``hpcio.stage(fsync=True)`` against ``cp -r; sync``, copying each dataset directory."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    out = []
    for d in datasets:
        if d.name != "mds" or not os.path.isdir(d.path):
            continue
        size = d.bytes
        cp, _ = _median_wall(lambda dst: ["cp", "-r", d.path, dst], repeats)
        cp_sync, _ = _median_wall(lambda dst: ["sh", "-c", 'cp -r "$0" "$1" && sync', d.path, dst], repeats)
        timings = {}
        for mode in ("no-fsync", "fsync"):
            timings[mode] = _median_wall(
                lambda dst, mode=mode: [sys.executable, "-c", _STAGE_SCRIPT, d.path, dst, mode], repeats, env,
                inner=lambda stdout: _last_json(stdout)["stage_s"])
        (wall, st), (wall_sync, st_sync) = timings["no-fsync"], timings["fsync"]
        rec = {"section": "staging", "profile": profile, "dataset": d.name, "bytes": size,
               "cp_s": cp, "cp_sync_s": cp_sync, "stage_s": st, "stage_process_s": wall,
               "stage_fsync_s": st_sync, "stage_fsync_process_s": wall_sync,
               "cp_bytes_per_s": size / cp, "cp_sync_bytes_per_s": size / cp_sync,
               "stage_bytes_per_s": size / st, "stage_fsync_bytes_per_s": size / st_sync,
               "ratio": cp / st, "ratio_sync": cp_sync / st_sync}
        log(f"  staging {profile} {d.name}: hpcio.stage {size / st / 1e6:,.0f} MB/s "
            f"(whole process {size / wall / 1e6:,.0f}) against cp -r {size / cp / 1e6:,.0f} MB/s; "
            f"with fsync {size / st_sync / 1e6:,.0f} MB/s against cp -r + sync {size / cp_sync / 1e6:,.0f} MB/s")
        out.append(rec)
    return out


def conversion_figures(profile: str, n: int, datasets=None, repeats: int = 3, log=print,
                       interop_python: str | None = None) -> list[dict]:
    """Samples/s per rank writing the Parquet samples as MDS (hpcio on 1 and 2 ranks) and
    with the peers' writers (``mdf convert`` when ``interop_python`` is given)."""
    parquet = next((d for d in datasets or [] if d.name == "parquet"), None)
    if parquet is None:
        return []
    src = os.path.join(parquet.path, "data.parquet")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               PYTHONWARNINGS="ignore")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    runs = []
    for ranks in (1, 2):
        def cmd(dst, ranks=ranks):
            convert = ["-m", "hpcio.cli.main", "convert", src, dst, "--to", "mds", "--num-shards", "4", "--json"]
            if ranks == 1:
                return [sys.executable, *convert]
            return [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", *convert]

        runs.append((f"hpcio convert ({ranks} rank{'s' if ranks > 1 else ''})", ranks, cmd,
                     lambda stdout: _last_json(stdout)["seconds"]))
    if interop_python:
        mdf = os.path.join(os.path.dirname(interop_python), "mdf")
        # HF datasets caches the Parquet it loads; a cache inside the run's temporary
        # directory makes every run convert from scratch.
        runs.append(("mdf convert", 1, lambda dst: ["env", f"HF_DATASETS_CACHE={dst}.hf-cache", mdf, "convert",
                                                    "parquet", "mds", dst, src, "--yes"], None))
    for label, script in _PEER_WRITERS.items():
        runs.append((label, 1, lambda dst, script=script: [sys.executable, "-c", script, src, dst], None))
    out = []
    for label, ranks, cmd, inner in runs:
        try:
            wall, job = _median_wall(cmd, repeats, env, inner)
        except (RuntimeError, OSError) as exc:
            log(f"  conversion {label}: {exc}")
            out.append({"section": "conversion", "profile": profile, "writer": label, "ranks": ranks,
                        "error": str(exc)})
            continue
        rec = {"section": "conversion", "profile": profile, "writer": label, "ranks": ranks, "samples": n,
               "wall_s": wall, "samples_per_s": n / wall, "samples_per_s_per_rank": n / wall / ranks}
        if job is not None:
            rec.update(job_s=job, job_samples_per_s=n / job)
        log(f"  conversion {profile} {label}: {n / wall:,.0f} samples/s ({n / wall / ranks:,.0f} per rank)"
            + (f", job alone {n / job:,.0f} samples/s" if job else ""))
        out.append(rec)
    one = next((r for r in out if r["writer"].startswith("hpcio convert (1") and "wall_s" in r), None)
    two = next((r for r in out if r["writer"].startswith("hpcio convert (2") and "wall_s" in r), None)
    if one and two:
        two["scaling_1_to_2"] = one["wall_s"] / two["wall_s"]
        if one.get("job_s") and two.get("job_s"):
            two["job_scaling_1_to_2"] = one["job_s"] / two["job_s"]
    if one:
        for r in out:
            if "wall_s" in r and not r["writer"].startswith("hpcio"):
                r["hpcio_ratio"] = r["wall_s"] / one["wall_s"]
    return out
