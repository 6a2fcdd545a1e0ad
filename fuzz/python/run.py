"""Fuzz one of hpcio's Python byte parsers under atheris (coverage of the hpcio package):

    python fuzz/python/run.py TARGET [libFuzzer flags] [corpus directories or inputs]
    python fuzz/python/run.py replay     every committed seed and regression input, once

TARGET is a key of ``targets.TARGETS``; the flags are libFuzzer's (``-max_total_time``,
``-rss_limit_mb``, ``-runs=0`` to replay inputs once).  An exception other than an
allowed hpcio error is reported as a crash and its input kept (``-artifact_prefix``).
``replay`` runs every input of fuzz/python/corpus/ and fuzz/python/regressions/ in one
process, without atheris, and fails on the first that breaks the contract.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def replay(targets) -> int:
    for target in sorted(targets.TARGETS):
        paths = [p for kind in ("corpus", "regressions") if (HERE / kind / target).is_dir()
                 for p in sorted((HERE / kind / target).iterdir())]
        for path in paths:
            try:
                targets.check(target, path.read_bytes())
            except BaseException:
                print(f"fuzz: py-{target} broke its contract on {path}", file=sys.stderr)
                raise
        print(f"fuzz: py-{target}: {len(paths)} inputs replayed")
    return 0


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    if argv[1:] == ["replay"]:
        import targets

        return replay(targets)
    import atheris

    with atheris.instrument_imports(include=["hpcio"]):
        import targets

        targets.load()
    name = argv[1]
    if name not in targets.TARGETS:
        print(f"unknown target {name!r}; targets: {', '.join(targets.TARGETS)}", file=sys.stderr)
        return 2
    atheris.Setup([argv[0]] + argv[2:], lambda data: targets.check(name, data))
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
