"""Fuzz one of hpcio's Python byte parsers under atheris (coverage of the hpcio package):

    python fuzz/python/run.py TARGET [libFuzzer flags] [corpus directories or inputs]

TARGET is a key of ``targets.TARGETS``; the flags are libFuzzer's (``-max_total_time``,
``-rss_limit_mb``, ``-runs=0`` to replay inputs once).  An exception other than an
allowed hpcio error is reported as a crash and its input kept (``-artifact_prefix``).
"""

import atexit
import os
import sys


def main(argv):
    import atheris

    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    with atheris.instrument_imports(include=["hpcio"]):
        import targets

        targets.load()
    name = argv[1]
    if name not in targets.TARGETS:
        print(f"unknown target {name!r}; targets: {', '.join(targets.TARGETS)}", file=sys.stderr)
        return 2
    atexit.register(lambda: targets.scratch().cleanup())
    atheris.Setup([argv[0]] + argv[2:], lambda data: targets.check(name, data))
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
