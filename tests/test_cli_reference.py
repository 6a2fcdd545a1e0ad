"""docs/cli.md's command reference is what the parser prints now.

The page is committed with every command's ``--help`` in it (tools/cli_reference.py
writes it), so that it reads complete on the repository's web view; a help text changed
without running the script fails here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "tools" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cli_reference", module)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_the_parsers_help():
    script = _script()
    text = script.PAGE.read_text(encoding="utf-8")
    assert text == script.page_with_reference(text, script.reference()), (
        f"docs/cli.md's command reference differs from the parser's --help: run `{script.REGENERATE}` "
        "and commit docs/cli.md")


def test_the_reference_depends_on_no_machine(monkeypatch, tmp_path):
    """The same text for every user, terminal and job: a help that printed a home
    directory or a CPU count would differ between the committed page and a test run."""
    script = _script()
    here = script.reference()
    for name, value in {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "COLUMNS": "40",
                        "SLURM_CPUS_PER_TASK": "3", "HPCIO_TIERS_CONFIG": str(tmp_path / "t.toml")}.items():
        monkeypatch.setenv(name, value)
    assert script.reference() == here
