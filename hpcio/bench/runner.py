"""Run the benchmark matrix: every system on the same data, each measurement in a fresh
process, median of ``repeats`` runs.

hpcio and the peers installed beside it (streaming, webdataset, pyarrow) run under this
interpreter; mldataforge and Hugging Face datasets run under the interop environment's
Python 3.12 (``HPCIO_INTEROP_PYTHON``, created by ``tools/interop-env.sh``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import BenchmarkError
from .data import META_FIELDS, BenchDataset

__all__ = ["System", "systems_for", "measure", "interop_python", "OPERATIONS", "BATCH_OPS"]

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
OPERATIONS = ("iterate", "iterate-meta", "shuffle", "sort", "batch", "columns")
RANDOM_OPS = ("shuffle", "sort", "batch", "columns")
# hpcio's batch APIs have no counterpart in the peers: they are compared with the best
# peer reading the same samples in the same order one by one
BATCH_OPS = ("batch", "columns")
DEFAULT_INTEROP = os.path.expanduser("~/.cache/hpcio/interop-py312/bin/python")


def interop_python_path() -> str:
    """Where the interop environment's interpreter is looked for."""
    return os.environ.get("HPCIO_INTEROP_PYTHON", DEFAULT_INTEROP)


def interop_python() -> str | None:
    """The interop environment's interpreter, if it exists and imports mldataforge."""
    path = interop_python_path()
    if not os.path.exists(path):
        return None
    ok = subprocess.run([path, "-c", "import mldataforge.utils"], capture_output=True).returncode == 0
    return path if ok else None


@dataclass
class System:
    """One reader configuration: who reads which dataset, how, with which interpreter."""

    label: str  # shown in tables, e.g. "hpcio jinx-zst-bin lazy"
    system: str  # worker opener key
    dataset: str  # BenchDataset.name
    options: dict = field(default_factory=dict)
    python: str = sys.executable
    ops: tuple = ("iterate", "iterate-meta", "shuffle", "sort")
    peer: bool = True


def systems_for(datasets: list[BenchDataset], include_interop: bool = True) -> list[System]:
    by_name = {d.name: d for d in datasets}
    names = set(by_name)
    out: list[System] = []
    hp_ops = OPERATIONS
    for d in datasets:
        if d.name.startswith("jinx"):
            out.append(System(f"hpcio {d.name} lazy", "hpcio", d.name, {"lazy": True}, ops=hp_ops, peer=False))
            out.append(System(f"hpcio {d.name} eager", "hpcio", d.name, {"lazy": False}, ops=hp_ops, peer=False))
        elif d.name in ("mds", "mds-sample-zstd", "parquet"):
            out.append(System(f"hpcio {d.name}", "hpcio", d.name, {}, ops=hp_ops, peer=False))
            if d.name.startswith("mds"):
                # binary values as read-only views of the mapped (or decompressed) shard
                out.append(System(f"hpcio {d.name} zero-copy", "hpcio", d.name, {"zero_copy": True},
                                  ops=hp_ops, peer=False))
        elif d.name == "mds-streaming":
            # streaming pickles a list of images: reading it runs the file's pickles, which
            # hpcio (like streaming) does only when told the data is trusted
            out.append(System("hpcio mds-streaming", "hpcio", d.name, {"allow_pickle": True}, ops=hp_ops,
                              peer=False))
        elif d.name == "webdataset":
            out.append(System("hpcio webdataset", "hpcio", d.name, {}, ops=("iterate", "iterate-meta"), peer=False))
    if "mds" in names:
        out.append(System("streaming mds", "streaming", "mds"))
    if "mds-streaming" in names:
        out.append(System("streaming mds-streaming", "streaming", "mds-streaming", {"allow_unsafe_types": True}))
    if "webdataset" in names:
        out.append(System("webdataset", "webdataset", "webdataset", ops=("iterate", "iterate-meta")))
    if "parquet" in names:
        out.append(System("pyarrow parquet", "arrow", "parquet"))
    py = interop_python() if include_interop else None
    if py:
        for mds in ("mds", "mds-sample-zstd", "mds-streaming"):
            if mds in names:
                out.append(System(f"mldataforge {mds} ram", "mdf-mds", mds, {"reader": "ram"}, py))
                out.append(System(f"mldataforge {mds} bulk", "mdf-mds", mds, {"reader": "bulk"}, py,
                                  ops=("iterate", "iterate-meta")))
        for jx in ("jinx", "jinx-bin", "jinx-zst-bin"):
            # mldataforge's JINX cannot keep bytes in a list (it reads them back as base85
            # text) and refuses hpcio's typed lists: it cannot read the vlm images.
            if jx in names and by_name[jx].profile != "vlm":
                out.append(System(f"mldataforge {jx} lazy", "mdf-jinx", jx, {"lazy": True}, py))
                out.append(System(f"mldataforge {jx} eager", "mdf-jinx", jx, {"lazy": False}, py))
        if "parquet" in names:
            out.append(System("hf-datasets parquet", "hf", "parquet", {"builder": "parquet"}, py))
    return out


@functools.cache
def _byte_compile(root: str) -> None:
    """Byte-compile the hpcio under test once, as installing a package does: run from a
    source tree with PYTHONDONTWRITEBYTECODE set, every fresh process would otherwise
    compile the format modules inside the timed open (peers come installed, compiled)."""
    import compileall

    compileall.compile_dir(os.path.join(root, "hpcio"), quiet=2)


def _run_once(system: System, path: str, op: str, profile: str, samples: int, env: dict) -> dict:
    spec = {
        "system": system.system,
        "op": op,
        "profile": profile,
        "path": path,
        "options": system.options,
        "meta_fields": META_FIELDS[profile],
        "n": samples,
    }
    if system.system == "hpcio":
        # the hpcio under test, also when it runs from a source tree
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")])))
        _byte_compile(root)
    with tempfile.TemporaryFile() as errfile:
        proc = subprocess.Popen(
            [system.python, WORKER, json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=errfile,
            env=env,
        )
        out = proc.stdout.read()
        proc.stdout.close()
        # wait4 gives this child's own CPU times (RUSAGE_CHILDREN would mix every run so
        # far); peak RSS comes from the child itself, since ru_maxrss survives fork+exec.
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            errfile.seek(0)
            tail = errfile.read().decode(errors="replace").strip().splitlines()[-3:]
            raise BenchmarkError(f"{system.label} {op} failed: {' | '.join(tail)}")
    rec = json.loads(out.decode().strip().splitlines()[-1])
    rec.update(user_s=usage.ru_utime, sys_s=usage.ru_stime)
    return rec


def measure(system: System, dataset: BenchDataset, op: str, profile: str, repeats: int = 3) -> dict:
    """Median figures of ``repeats`` fresh-process runs of one (system, op), each on the
    dataset's files as the writer and the systems before it left them in the page cache:
    no preparation a user's job would not make."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="hpcio-bench-") as tmp:
        env = dict(os.environ, TMPDIR=tmp, HF_DATASETS_CACHE=os.path.join(tmp, "hf"),
                   PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
        for _ in range(repeats):
            runs.append(_run_once(system, dataset.path, op, profile, dataset.samples, env))
    med = {k: float(np.median([r[k] for r in runs])) for k in ("import_s", "open_s", "op_s", "total_s", "user_s", "sys_s")}
    n = runs[0]["samples"]
    return {
        "system": system.label,
        "peer": system.peer,
        "dataset": dataset.name,
        "op": op,
        "profile": profile,
        "samples": n,
        "checksum": runs[0]["checksum"],
        "repeats": repeats,
        **med,
        "samples_per_s": n / med["total_s"] if med["total_s"] else float("inf"),
        "op_samples_per_s": n / med["op_s"] if med["op_s"] else float("inf"),
        "maxrss_mb": max(r["maxrss_mb"] for r in runs),
        "storage_bytes": dataset.bytes,
    }


def to_json(records: list[dict]) -> str:
    return json.dumps(records, indent=1, default=lambda o: asdict(o))
