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
not counted.  Each rank reports its peak resident memory (``VmHWM``) in the job's summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from ..errors import ToolNotFoundError
from ..units import parse_bytes
from .cold import _join, memory_cgroup
from .limits import dataset_files
from .pagecache import evict, resident

__all__ = ["conversion_reads", "reads_markdown"]

_SECTOR = 512


def _mpiexec() -> str:
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if found is None:
        raise ToolNotFoundError("mpiexec not found (pip install 'hpcio[mpich]' or a system MPI)")
    return found


def _block_input_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock * _SECTOR


def conversion_reads(sources: list[str], to: str, *, ranks=(1, 2, 4), round_size=None,
                     memory_limit: int | None = None, options: tuple = (), workdir: str | None = None,
                     tier=None, log=print) -> list[dict]:
    """Convert ``sources`` into format ``to`` once per rank count and round size (``round_size``
    one size or a sequence of them), cold; one record per run: ranks, round size, source
    bytes, bytes read from storage, their ratio, each rank's peak resident memory, seconds,
    exit code."""
    files = [f for s in sources for f in dataset_files(s)]
    source_bytes = sum(os.path.getsize(f) for f in files)
    round_sizes = [round_size] if round_size is None or isinstance(round_size, (str, int)) else list(round_size)
    records = []
    with memory_cgroup(memory_limit) if memory_limit else contextlib.nullcontext() as procs:
        for size in round_sizes:
            for r in ranks:
                rec = _one_run(sources, files, to, r, size, options, workdir, tier, procs)
                rec.update(source_bytes=source_bytes, memory_limit=memory_limit,
                           ratio=rec["storage_read_bytes"] / source_bytes if source_bytes else 0.0)
                peak = max(rec["peak_rss_bytes"], default=0)
                log(f"  convert --to {to} ranks={r} round={size}: read {rec['storage_read_bytes'] / 1e6:,.1f} MB "
                    f"of {source_bytes / 1e6:,.1f} MB sources = {rec['ratio']:.2f}x, peak RSS per rank "
                    f"{peak / 1e6:,.1f} MB in {rec['seconds']:.1f} s"
                    + (f"  ({rec['error']})" if "error" in rec else ""))
                records.append(rec)
    return records


def _one_run(sources, files, to, ranks, round_size, options, workdir, tier, procs) -> dict:
    """One cold conversion: what it read from storage, each rank's peak memory, its time."""
    out = tempfile.mkdtemp(prefix="hpcio-convert-reads-", dir=workdir)
    argv = [_mpiexec(), "-n", str(ranks), sys.executable, "-m", "hpcio.cli.main", "convert",
            *sources, os.path.join(out, "dst"), "--to", to, "--no-progress", "--json", *options]
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
    rec = {"ranks": ranks, "to": to, "round_size": round_size, "storage_read_bytes": read, "seconds": seconds,
           "resident_before": left, "returncode": proc.returncode, "peak_rss_bytes": [],
           "counted": "block input" if tier is None else "tier bytes"}
    if proc.returncode != 0:
        rec["error"] = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
    else:
        rec["peak_rss_bytes"] = json.loads(proc.stdout.strip().splitlines()[-1]).get("peak_rss_bytes", [])
    return rec


def reads_markdown(records: list[dict]) -> str:
    """The records as a table: source bytes read as a multiple of the sources' bytes, and
    the largest rank's peak resident memory, per rank count and round size."""
    lines = ["| ranks | to | round size | sources | read from storage | ratio | peak RSS per rank | seconds "
             "| memory limit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        limit = "-" if not r["memory_limit"] else f"{r['memory_limit'] / 1e6:,.0f} MB"
        ratio = r.get("error") or f"{r['ratio']:.2f}x"
        peak = f"{max(r['peak_rss_bytes']) / 1e6:,.0f} MB" if r["peak_rss_bytes"] else "-"
        lines.append(f"| {r['ranks']} | {r['to']} | {r['round_size'] or 'default'} | {r['source_bytes'] / 1e6:,.1f} MB | "
                     f"{r['storage_read_bytes'] / 1e6:,.1f} MB | {ratio} | {peak} | {r['seconds']:.1f} | {limit} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """``python -m hpcio.bench.conversion_reads SRC... --to mds --ranks 1,2,4 --round-size
    16MB,64MB --memory-limit 250MB [--tier]``: the table of :func:`reads_markdown`."""
    parser = argparse.ArgumentParser(prog="python -m hpcio.bench.conversion_reads", description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--to", default="mds")
    parser.add_argument("--ranks", default="1,2,4", help="comma-separated rank counts")
    parser.add_argument("--round-size", default="", help="comma-separated round sizes (default: the converter's)")
    parser.add_argument("--memory-limit", default=None, help="run inside a memory cgroup of this size")
    parser.add_argument("--tier", action="store_true",
                        help="count the bytes an emulated tier holding the sources' directory serves")
    parser.add_argument("--json", default=None, help="also write the records to this file")
    args, options = parser.parse_known_args(argv)
    limit = parse_bytes(args.memory_limit, what="--memory-limit") if args.memory_limit else None
    kwargs = dict(ranks=[int(r) for r in args.ranks.split(",")], round_size=args.round_size.split(",") if
                  args.round_size else None, memory_limit=limit, options=tuple(options))
    if args.tier:
        from .tier import EmulatedTier

        top = os.path.commonpath([os.path.dirname(os.path.abspath(s)) for s in args.sources])
        with EmulatedTier(top, latency_us=0) as tier:
            records = conversion_reads([tier.path(os.path.relpath(os.path.abspath(s), top)) for s in args.sources],
                                       args.to, tier=tier, **kwargs)
    else:
        records = conversion_reads(args.sources, args.to, **kwargs)
    print(reads_markdown(records), end="")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0 if all(r["returncode"] == 0 for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
