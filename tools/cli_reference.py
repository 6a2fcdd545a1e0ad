"""Write the reference section of docs/cli.md: the ``--help`` of every ``hpcio`` command.

The page is committed with the help in it, so it reads the same on the repository's web
view as in the built site, and ``tests/test_cli_reference.py`` fails when the committed
text is not what this script writes from the current parser::

    python tools/cli_reference.py            # rewrite the section of docs/cli.md
    python tools/cli_reference.py --check    # exit 1 when it is out of date

Everything between the BEGIN and END comments of the page is replaced; the rest of the
page is written by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
BEGIN = "<!-- cli-reference: begin. Written by tools/cli_reference.py from the hpcio parser; do not edit. -->"
END = "<!-- cli-reference: end -->"
REGENERATE = "python tools/cli_reference.py"
# argparse wraps to $COLUMNS and colours on a terminal (3.14): fixed, so the text depends
# on neither.
ENVIRONMENT = {"COLUMNS": "88", "NO_COLOR": "1"}


@contextlib.contextmanager
def _environment() -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in ENVIRONMENT}
    os.environ.update(ENVIRONMENT)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _section(words: list[str], parser: argparse.ArgumentParser, depth: int) -> list[str]:
    out = [f"{'#' * depth} `{' '.join(words)}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, sub in _subcommands(parser).items():
        out.extend(_section([*words, name], sub, min(depth + 1, 4)))
    return out


def reference() -> str:
    """The Markdown of the reference: one section with the help of each (sub)command."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # the tree's hpcio, when run as a script
    from hpcio.cli.main import build_parser

    with _environment():
        parser = build_parser()
        lines = []
        for name, sub in _subcommands(parser).items():
            lines.extend(_section(["hpcio", name], sub, 3))
    return "\n".join(lines).rstrip("\n") + "\n"


def page_with_reference(text: str, generated: str) -> str:
    """``text`` (docs/cli.md) with its reference section replaced by ``generated``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"{PAGE}: needs one {BEGIN!r} line, then one {END!r} line")
    head = text[: text.index(BEGIN) + len(BEGIN)]
    tail = text[text.index(END):]
    return f"{head}\n\n{generated}\n{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is out of date; write nothing")
    args = parser.parse_args(argv)
    text = PAGE.read_text(encoding="utf-8")
    new = page_with_reference(text, reference())
    if args.check:
        if new != text:
            print(f"{PAGE.relative_to(ROOT)}: the command reference is out of date: run {REGENERATE}",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
        print(f"wrote the command reference of {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
