"""What a fresh process pays before its first sample: import, open, first read.

Each system runs as a new interpreter that imports its library, opens the dataset and
reads one sample, timing each step with ``perf_counter`` from its first line (the
interpreter's own start-up is the same for every system and left out).  The datasets are
written by each library's own writer (mosaicml-streaming's ``MDSWriter`` with the images
as a ``pkl`` list, the only list-of-binaries encoding it writes; webdataset's
``ShardWriter``; pyarrow) and by hpcio's, and read as the writer left them: no page-cache
preparation.  Runs alternate between systems and the median of ``repeats`` is kept.

Each run also reports the share of the Python modules it imported that had their
bytecode cached: what pip leaves for an installed wheel, and what an editable install
leaves only where the interpreter may write it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SYSTEMS", "open_cost_figures", "markdown", "prepare"]

# Run as a program: the steps are timed inside it, then reported as one JSON line.
_PROGRAM = """\
import time
t0 = time.perf_counter()
{imports}
t1 = time.perf_counter()
{open}
t2 = time.perf_counter()
{first}
t3 = time.perf_counter()
import json, os, sys
cached = [c for c in (getattr(m, "__cached__", None) for m in list(sys.modules.values())) if isinstance(c, str)]
print(json.dumps({{"import_s": t1 - t0, "open_s": t2 - t1, "first_s": t3 - t2,
                  "modules": len(sys.modules),
                  "bytecode_share": sum(map(os.path.exists, cached)) / max(len(cached), 1)}}))
"""


@dataclass(frozen=True)
class System:
    label: str
    dataset: str  # a name of prepare()'s datasets
    imports: str
    open: str  # binds ds; PATH is the dataset's directory
    first: str
    interop: bool = False  # runs under the Python 3.12 interop environment (mldataforge)
    peer: bool = True


SYSTEMS = (
    System("hpcio mds (streaming-written, pkl)", "streaming-mds", "import hpcio",
           "ds = hpcio.open(PATH, allow_pickle=True)", "ds[0]", peer=False),
    System("hpcio mds (hpcio-written)", "hpcio-mds", "import hpcio", "ds = hpcio.open(PATH)", "ds[0]", peer=False),
    System("hpcio webdataset", "webdataset", "import hpcio", "ds = hpcio.open(PATH)", "ds[0]", peer=False),
    System("mosaicml-streaming", "streaming-mds", "from streaming import StreamingDataset",
           "ds = StreamingDataset(local=PATH, remote=None, shuffle=False, batch_size=1, allow_unsafe_types=True)", "ds[0]"),
    System("mldataforge ram", "streaming-mds", "from mldataforge.utils import load_mds_directories",
           "ds = load_mds_directories([PATH], reader='ram')", "ds[0]", interop=True),
    System("webdataset", "webdataset", "import webdataset as wds",
           "ds = wds.WebDataset(sorted(os.path.join(PATH, f) for f in os.listdir(PATH) if f.endswith('.tar')), "
           "shardshuffle=False, empty_check=False).decode()", "next(iter(ds))"),
    System("pyarrow", "parquet", "import pyarrow.parquet as pq",
           "ds = pq.ParquetFile(os.path.join(PATH, 'data.parquet'))", "ds.read_row_group(0).slice(0, 1).to_pylist()"),
)


def prepare(root: str, n: int, seed: int = 0, log=print) -> dict[str, str]:
    """Write ``n`` vlm demo samples under ``root`` with each library's own writer (reused
    when present); ``{dataset name: directory}``."""
    from .. import demo

    os.makedirs(root, exist_ok=True)
    out = {name: os.path.join(root, name) for name in ("streaming-mds", "hpcio-mds", "webdataset", "parquet")}
    todo = [name for name, path in out.items() if not os.path.exists(path)]
    if not todo:
        return out
    samples = list(demo.generate("vlm", n, seed=seed))
    for name in todo:
        log(f"writing {name} ({n} vlm samples)")
        tmp = out[name] + ".tmp"
        _WRITERS[name](tmp, samples)
        os.replace(tmp, out[name])
    return out


def _write_streaming(path, samples):
    from streaming import MDSWriter

    with MDSWriter(out=path, columns={"id": "str", "messages": "json", "images": "pkl"}) as w:
        for s in samples:
            w.write(s)


def _write_hpcio(path, samples):
    import hpcio

    from .data import VLM_COLUMNS

    with hpcio.open_writer(path, format="mds", columns=VLM_COLUMNS) as w:
        for s in samples:
            w.write(s)


def _write_webdataset(path, samples):
    import webdataset as wds

    os.makedirs(path)
    with wds.ShardWriter(os.path.join(path, "shard-%06d.tar"), maxsize=64 << 20, verbose=0) as w:
        for i, s in enumerate(samples):
            record = {"__key__": f"{i:08d}", "messages.json": s["messages"]}
            record.update({f"images.{j}.jpg": image for j, image in enumerate(s["images"])})
            w.write(record)


def _write_parquet(path, samples):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .data import parquet_row_group_rows

    os.makedirs(path)
    pq.write_table(pa.Table.from_pylist(samples), os.path.join(path, "data.parquet"),
                   row_group_size=parquet_row_group_rows("vlm"))


_WRITERS = {"streaming-mds": _write_streaming, "hpcio-mds": _write_hpcio, "webdataset": _write_webdataset,
            "parquet": _write_parquet}


def _run(system: System, path: str, python: str, tmp: str) -> dict:
    program = f"import os\nPATH = {path!r}\n" + _PROGRAM.format(imports=system.imports, open=system.open,
                                                                 first=system.first)
    env = dict(os.environ, TMPDIR=tmp, PYTHONWARNINGS="ignore")
    proc = subprocess.run([python, "-c", program], capture_output=True, text=True, env=env, cwd=tmp, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def open_cost_figures(root: str, n: int = 1000, repeats: int = 5, only=None, interop_python: str | None = None,
                      log=print) -> dict:
    """Median import, open and first-read seconds of every system in fresh processes."""
    import tempfile

    paths = prepare(root, n, log=log)
    systems = [s for s in SYSTEMS if not only or any(word in s.label for word in only)]
    runs: dict[str, list] = {s.label: [] for s in systems}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="hpcio-open-cost-") as tmp:
        for _ in range(repeats):  # alternating: a slow minute of the machine hits every system
            for s in systems:
                if s.label in errors:
                    continue
                if s.interop and interop_python is None:
                    errors[s.label] = "the interop environment is missing (tools/interop-env.sh)"
                    continue
                rec = _run(s, paths[s.dataset], interop_python if s.interop else sys.executable, tmp)
                if "error" in rec:
                    errors[s.label] = rec["error"]
                else:
                    runs[s.label].append(rec)
    rows: list[dict[str, Any]] = []
    for s in systems:
        if s.label in errors:
            rows.append({"system": s.label, "peer": s.peer, "error": errors[s.label]})
            continue
        med = {k: float(np.median([r[k] for r in runs[s.label]])) for k in ("import_s", "open_s", "first_s")}
        total = med["import_s"] + med["open_s"]
        rows.append({"system": s.label, "peer": s.peer, "dataset": s.dataset, **med, "import_open_s": total,
                     "import_share": med["import_s"] / total if total else None,
                     "modules": runs[s.label][0]["modules"],
                     "bytecode_share": min(r["bytecode_share"] for r in runs[s.label])})
    peers = [r for r in rows if r["peer"] and "error" not in r]
    fastest = min(peers, key=lambda r: r["import_open_s"], default=None)
    for r in rows:
        if "error" not in r and fastest:
            r["over_fastest_peer"] = r["import_open_s"] / fastest["import_open_s"]
    return {"samples": n, "repeats": repeats, "fastest_peer": fastest and fastest["system"], "rows": rows}


def markdown(result: dict) -> str:
    lines = [f"Fresh process: import + open of {result['samples']:,} vlm samples, then the first sample "
             f"(median of {result['repeats']}, ms).", "",
             "| system | import | open | import + open | import share | first sample | × fastest peer "
             "| modules | bytecode cached |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['system']} | {r['error']} | | | | | | | |")
            continue
        lines.append(f"| {r['system']} | {1e3 * r['import_s']:.1f} | {1e3 * r['open_s']:.1f} | "
                     f"{1e3 * r['import_open_s']:.1f} | {r['import_share']:.0%} | {1e3 * r['first_s']:.1f} | "
                     f"{r.get('over_fastest_peer', float('nan')):.2f} | {r['modules']} | {r['bytecode_share']:.0%} |")
    return "\n".join(lines) + "\n"
