"""What a conversion makes storage read, as a multiple of its sources' bytes.

Each run starts with the sources evicted from the page cache and runs ``hpcio convert``
under ``mpiexec -n R`` in a child process (optionally inside a memory cgroup smaller than
the sources, so the page cache cannot serve a second pass); the bytes read from storage
are the block input of every process of the job (``RUSAGE_CHILDREN.ru_inblock``, which
the kernel counts at the block layer and hands up as each process is reaped), so the
figure is the job's own whatever else runs on the machine.  That count includes the
job's own code: under a tight memory limit the interpreter's and libraries' pages are
evicted and read again.  With ``tier`` (an :class:`~hpcio.bench.tier.EmulatedTier`
holding the sources) only the sources' bytes the tier served are counted.  Writes are
not counted.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from .cold import _join, memory_cgroup
from .limits import dataset_files
from .pagecache import evict, resident

__all__ = ["conversion_reads", "reads_markdown"]

_SECTOR = 512


def _mpiexec() -> str:
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("mpiexec not found (pip install 'hpcio[mpich]' or a system MPI)")
    return found


def _block_input_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock * _SECTOR


def conversion_reads(sources: list[str], to: str, *, ranks=(1, 2, 4), round_size: str | None = None,
                     memory_limit: int | None = None, options: tuple = (), workdir: str | None = None,
                     tier=None, log=print) -> list[dict]:
    """Convert ``sources`` into format ``to`` once per rank count, cold; one record per run:
    ranks, source bytes, bytes read from storage, their ratio, seconds, exit code."""
    files = [f for s in sources for f in dataset_files(s)]
    source_bytes = sum(os.path.getsize(f) for f in files)
    records = []
    with memory_cgroup(memory_limit) if memory_limit else contextlib.nullcontext() as procs:
        for r in ranks:
            out = tempfile.mkdtemp(prefix="hpcio-convert-reads-", dir=workdir)
            dst = os.path.join(out, "dst")
            argv = [_mpiexec(), "-n", str(r), sys.executable, "-m", "hpcio.cli.main", "convert",
                    *sources, dst, "--to", to, "--no-progress", *options]
            if round_size:
                argv += ["--round-size", str(round_size)]
            try:
                evict(files)
                left = resident(files).fraction
                count = _block_input_bytes if tier is None else (lambda: tier.stats()["bytes"])
                before = count()
                t = time.perf_counter()
                proc = subprocess.run(argv, capture_output=True, text=True, preexec_fn=_join(procs))
                seconds = time.perf_counter() - t
                read = count() - before
            finally:
                shutil.rmtree(out, ignore_errors=True)
            rec = {"ranks": r, "to": to, "source_bytes": source_bytes, "storage_read_bytes": read,
                   "ratio": read / source_bytes if source_bytes else 0.0, "seconds": seconds,
                   "resident_before": left, "returncode": proc.returncode,
                   "memory_limit": memory_limit, "round_size": round_size,
                   "counted": "block input" if tier is None else "tier bytes"}
            if proc.returncode != 0:
                rec["error"] = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
            log(f"  convert --to {to} ranks={r}: read {read / 1e6:,.1f} MB of {source_bytes / 1e6:,.1f} MB "
                f"sources = {rec['ratio']:.2f}x in {seconds:.1f} s" + (f"  ({rec['error']})" if "error" in rec else ""))
            records.append(rec)
    return records


def reads_markdown(records: list[dict]) -> str:
    lines = ["| ranks | to | sources | read from storage | ratio | seconds | memory limit |",
             "|---|---|---|---|---|---|---|"]
    for r in records:
        limit = "-" if not r["memory_limit"] else f"{r['memory_limit'] / 1e6:,.0f} MB"
        ratio = r.get("error") or f"{r['ratio']:.2f}x"
        lines.append(f"| {r['ranks']} | {r['to']} | {r['source_bytes'] / 1e6:,.1f} MB | "
                     f"{r['storage_read_bytes'] / 1e6:,.1f} MB | {ratio} | {r['seconds']:.1f} | {limit} |")
    return "\n".join(lines) + "\n"
