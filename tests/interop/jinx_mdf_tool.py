"""Run mldataforge's JINX writer and reader for the interop tests (Python 3.12 side).

Reads a JSON job list on stdin and prints one JSON result per job, so a whole test
module costs one interpreter start (importing mldataforge imports torch)::

    {"samples_py": ".../samples.py",
     "jobs": [{"op": "write", "path": "...", "options": {...}, "n": 6, "seed": 0, "cwd": "..."},
              {"op": "write", "path": "...", "hazard": "dotted"},
              {"op": "read", "path": "...", "lazy": false}]}

Results: ``{"ok": true}`` / ``{"ok": true, "samples": [...]}`` (canonical JSON from
``samples.to_jsonable``) or ``{"ok": false, "error": "Type: message"}``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys


def main():
    request = json.load(sys.stdin)
    spec = importlib.util.spec_from_file_location("jinx_samples", request["samples_py"])
    samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(samples)
    import lz4.frame  # noqa: F401  mldataforge's lz4 codec needs the submodule loaded
    from mldataforge.jinx import JinxDatasetReader, JinxDatasetWriter

    results = []
    for job in request["jobs"]:
        try:
            if job["op"] == "write":
                if "hazard" in job:
                    data = samples.hazard_samples(job["hazard"])
                else:
                    data = samples.make_samples(job["n"], seed=job.get("seed", 0),
                                                min_bytes=job.get("min_bytes", 0))
                opts = dict(job.get("options", {}))
                shard_size = opts.pop("shard_size", None)
                opts.setdefault("compression", None)
                opts.setdefault("index_compression", None)
                opts.setdefault("compress_threshold", 64)
                opts.setdefault("compress_ratio", 1.0)
                cwd = os.getcwd()
                os.chdir(job.get("cwd", cwd))
                try:
                    with JinxDatasetWriter(job["path"], shard_size=shard_size, **opts) as w:
                        for s in data:
                            w.write(s)
                finally:
                    os.chdir(cwd)
                results.append({"ok": True})
            elif job["op"] == "read":
                # no close(): mldataforge's calls memmap.close(), which does not exist
                r = JinxDatasetReader(job["path"], lazy=job.get("lazy", False))
                got = [samples.to_jsonable(s) for s in r]
                results.append({"ok": True, "samples": got})
            else:
                raise ValueError(f"unknown op {job['op']!r}")
        except Exception as exc:  # reported to the test, which decides what is expected
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
