"""MkDocs hook: expand ``<!-- hpcio-cli-reference -->`` into the ``--help`` of every
``hpcio`` command, so docs/cli.md always matches the installed command line."""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- hpcio-cli-reference -->"
WIDTH = "88"  # argparse wraps to $COLUMNS; fixed so the page does not depend on a terminal


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _section(words: list[str], parser: argparse.ArgumentParser, depth: int) -> list[str]:
    out = [
        f"{'#' * depth} `{' '.join(words)}`",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    for name, sub in _subcommands(parser).items():
        out.extend(_section([*words, name], sub, min(depth + 1, 4)))
    return out


def reference() -> str:
    """Markdown sections with the help of ``hpcio`` and every (sub)command."""
    from hpcio.cli.main import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        lines = []
        for name, sub in _subcommands(parser).items():
            lines.extend(_section(["hpcio", name], sub, 3))
        return "\n".join(lines)
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown
