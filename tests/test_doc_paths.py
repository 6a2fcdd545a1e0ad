"""Every repository path a docstring or a documentation page names exists: a reader who
follows ``formats/contract.py`` or ``docs/formats/spec.md`` finds the file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hpcio"

SUFFIXES = "py|pyx|pyi|pxd|pxi|md|h|c|sh|toml|json|txt|yml|yaml|cfg|in|sbatch"
# A relative path of two or more parts ending in a known suffix, or starting at a top
# directory of the repository.
PATH = re.compile(
    rf"(?<![\w./:~$<{{-])((?:[\w-]+/)+[\w.-]*\.(?:{SUFFIXES})|"
    rf"(?:hpcio|docs|tests|tools|csrc|fuzz|slurm|asv_bench|specs)/[\w./-]*[\w/])(?![\w{{<*>])"
)
# Paths of other projects (the libraries hpcio reads or is compared with), and
# placeholders written as uppercase words.
FOREIGN = re.compile(r"^(streaming|litdata|webdataset|zarr|numcodecs|mpi4py|h5py|torch|msgspec|site-packages)/")
PLACEHOLDER = re.compile(r"\b[A-Z]{3,}\b|\.\.\.")
# Paths of a user's files in examples and layouts, and "hpcio/peer" (a ratio).
EXAMPLES = {
    "hpcio/peer",
    "bench-output/results.json",
    "store/zarr.json",
    "store/part-00000/zarr.json",
    "out/index.json",
}
# A page's fenced blocks and its test directives (HTML comments) are commands and
# outputs, which name the files they make.
FENCED = re.compile(r"^```.*?^```|<!--.*?-->", re.M | re.S)


def _texts():
    """``(name, text, directory)`` of every docstring of the package and every page."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), rel)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield rel, doc, path.parent
    for path in sorted(PACKAGE.rglob("*.pyi")):
        yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"), path.parent
    for path in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        text = FENCED.sub("", path.read_text(encoding="utf-8"))
        yield path.relative_to(ROOT).as_posix(), text, path.parent


def _exists(name: str, directory: Path) -> bool:
    """Whether ``name`` is a file or directory from the repository root, the package, or
    the naming file's own directory or one of its parents."""
    bases = [ROOT, PACKAGE, *[d for d in [directory, *directory.parents] if ROOT in [d, *d.parents]]]
    return any((base / name).exists() for base in bases)


def missing_paths(text: str, directory: Path) -> list[str]:
    out = []
    for m in PATH.finditer(text):
        name = m.group(1).rstrip("/.")
        if FOREIGN.match(name) or PLACEHOLDER.search(name) or name in EXAMPLES or name in out:
            continue
        if not _exists(name, directory):
            out.append(name)
    return out


TEXTS = list(_texts())


def test_the_scan_reads_docstrings_and_pages():
    names = {name for name, _, _ in TEXTS}
    assert "docs/development.md" in names and "hpcio/errors.py" in names
    assert missing_paths("see formats/contract.py and docs/nowhere.md", PACKAGE / "formats") == ["docs/nowhere.md"]


@pytest.mark.parametrize("name", sorted({name for name, _, _ in TEXTS}))
def test_every_path_named_exists(name):
    missing = [p for n, text, directory in TEXTS if n == name for p in missing_paths(text, directory)]
    assert missing == [], f"{name} names paths that are not in the repository"
