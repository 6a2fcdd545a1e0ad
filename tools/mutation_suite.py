#!/usr/bin/env python
"""Run the mutation suite (:mod:`hpcio.testing.mutation`) and print its per-format table.

    python tools/mutation_suite.py --truncations 40 --flips 40 --rewrites 40
    python tools/mutation_suite.py --formats mds,jinx --json results.json

Run it in a fresh interpreter: its cases fork from this process.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from hpcio.testing import mutation
from hpcio.units import parse_bytes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--formats", default=",".join(mutation.FORMATS),
                        help=f"comma-separated variants (default all: {','.join(mutation.FORMATS)})")
    parser.add_argument("--truncations", type=int, default=8, help="truncations per variant")
    parser.add_argument("--flips", type=int, default=8, help="seeded byte flips per variant")
    parser.add_argument("--rewrites", type=int, default=8, help="count/offset rewrites per variant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory", default="1GiB", help="address space a case may add (RLIMIT_AS)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a case may take")
    parser.add_argument("--json", metavar="FILE", help="write every case's result to FILE")
    parser.add_argument("--list", choices=[*mutation.OUTCOMES, "missed"], action="append", default=[],
                        help="print the cases with this outcome (or silent ones verify missed)")
    args = parser.parse_args(argv)
    variants = [v for v in args.formats.split(",") if v]
    unknown = sorted(set(variants) - set(mutation.FORMATS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {', '.join(mutation.FORMATS)}")
    with tempfile.TemporaryDirectory(prefix="hpcio-mutation-") as root:
        results = mutation.run_suite(root, variants=variants, truncations=args.truncations, flips=args.flips,
                                     rewrites=args.rewrites, seed=args.seed, memory=parse_bytes(args.memory),
                                     timeout=args.timeout)
    print(mutation.table(mutation.summarize(results)))
    for r in results:
        missed = r.outcome == "silent" and r.verify == "missed"
        if r.outcome in args.list or ("missed" in args.list and missed):
            print(f"{r.outcome:<10} verify={r.verify:<8} {r.case.label()}  {r.detail}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([mutation.result_json(r) for r in results], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
