"""Every command and Python snippet in README.md and docs/**/*.md runs as a reader runs it.

Fenced blocks labelled ``bash``, ``sh`` or ``python`` are executed, in page order, in one
temporary directory per page, as a reader copies them into one terminal and one Python
session: a page's blocks build on one another, its Python blocks share one namespace in
one fresh interpreter, and each shell block starts in the page's directory with the
variables earlier shell blocks exported. Blocks labelled ``text``, ``json`` or ``toml``
show output, layouts or configuration and are not run; an unlabelled block fails the
test, so no command hides from it.

Nothing a reader does not see is run: whatever a snippet needs (data, ``rank``, an
import) is made by an earlier block of its page or by lines of the block itself. HTML
comments directly above a fence only say how far the test runs a block:

* ``<!-- test: replace OLD => NEW -->`` edits the block before it runs. Only for what has
  no honest small form (a cluster's partition names; the clone a command runs in, which
  the test's directory is not): the page says in visible text next to the block what a
  reader changes, and ``test_few_replacements`` bounds their number. Sizes and paths
  are not replaced: a block shows what runs here in seconds, and says how to scale up;
* ``<!-- test: slow REASON -->`` runs the block in the ``slow`` suite only;
* ``<!-- test: slurm REASON -->`` runs it in the ``slurm`` suite only, with a running Slurm
  (``tools/slurm/cluster.sh``, see tests/test_slurm.py);
* ``<!-- test: skip REASON -->`` never runs it: a few commands that cannot run on a test
  machine (installing into the environment, a site's module system).

The page says in visible text, too, why a ``slow``, ``slurm`` or ``skip`` block is not run
here; the comment only tells the test.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpcio.testing.environment import missing

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = {"bash": "shell", "sh": "shell", "python": "python"}
SHOWN = {"text", "json", "toml"}
TIERS = ("default", "slow", "slurm")
# At most this many 'test: replace' comments over all pages (see test_few_replacements).
MAX_REPLACEMENTS = 3
# A command a block of output must not start with: such a block is a command to run.
COMMAND_WORDS = ("hpcio ", "$ ", "make ", "sbatch ", "srun ", "mpiexec ", "pip ", "python ")

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
DIRECTIVE = re.compile(r"<!--\s*test:\s*(\w+)\s?(.*?)-->\s*$", re.S)


@dataclass
class Block:
    page: str
    line: int
    language: str
    code: str
    tier: str = "default"
    reason: str = ""
    replacements: list[tuple[str, str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def runnable_code(self) -> str:
        code = self.code
        for old, new in self.replacements:
            assert old in code, f"{self.where}: 'replace {old}' matches nothing"
            code = code.replace(old, new)
        return code


def _directives(text: str, fence_start: int) -> list[tuple[str, str]]:
    """The ``<!-- test: ... -->`` comments directly above the fence at ``fence_start``."""
    found = []
    before = text[:fence_start].rstrip("\n")
    while before.endswith("-->"):
        start = before.rfind("<!--")
        match = DIRECTIVE.match(before[start:])
        if start < 0 or not match:
            break
        found.append((match.group(1), match.group(2).strip()))
        before = before[:start].rstrip("\n")
    return found[::-1]


def _apply(block: Block, name: str, value: str) -> None:
    if name in ("skip", "slow", "slurm"):
        assert value, f"{block.where}: 'test: {name}' needs a reason"
        block.tier, block.reason = name, value
    elif name == "replace":
        old, sep, new = value.partition(" => ")
        assert sep, f"{block.where}: write 'replace OLD => NEW'"
        block.replacements.append((old, new))
    elif name == "setup":
        # hidden set-up passes where a reader fails (a NameError, a missing file)
        raise AssertionError(f"{block.where}: no hidden 'test: setup': make what the block needs "
                             "in a visible block above it, or in the block itself")
    else:
        raise AssertionError(f"{block.where}: unknown directive 'test: {name}'")


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    rel = page.relative_to(ROOT).as_posix()
    found = []
    for match in FENCE.finditer(text):
        block = Block(rel, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2))
        for name, value in _directives(text, match.start()):
            _apply(block, name, value)
        found.append(block)
    return found


# The start of a page's program. A reader's terminal keeps what a block exports: each shell
# block's exported variables, dumped when it exits, are the environment of the blocks after it.
PRELUDE = """\
import os, subprocess, sys, tempfile
ns = {'__name__': '__main__'}
KEEP_OUT = {'PWD', 'OLDPWD', 'SHLVL', '_', 'DOC_ENV_OUT'}
def shell(code, where):
    fd, dump = tempfile.mkstemp(prefix='.doc-env-')
    os.close(fd)
    env = dict(os.environ, DOC_ENV_OUT=dump)
    code = 'trap \\'env -0 > "$DOC_ENV_OUT"\\' EXIT\\n' + code
    proc = subprocess.run(['bash', '-euo', 'pipefail', '-c', code], env=env)
    with open(dump, 'rb') as f:
        items = [item.decode().partition('=') for item in f.read().split(b'\\0') if item]
    os.unlink(dump)
    if proc.returncode:
        sys.exit(f'{where}: exit status {proc.returncode}')
    if not items:  # the block replaced the trap: keep the environment as it was
        return
    exported = {k: v for k, _, v in items if k not in KEEP_OUT}
    for k in [k for k in os.environ if k not in exported and k not in KEEP_OUT]:
        del os.environ[k]
    os.environ.update(exported)\
"""


def _script(page_blocks: list[Block], tier: str) -> str:
    """One Python program running the page's blocks of ``tier`` (and lower) in order."""
    wanted = TIERS[: TIERS.index(tier) + 1]
    lines = [PRELUDE]
    for block in page_blocks:
        kind = RUN.get(block.language)
        if kind is None or block.tier not in wanted:
            continue
        lines.append(f"print('--- {block.where}', flush=True)")
        if kind == "shell":
            lines.append(f"shell({block.runnable_code()!r}, {block.where!r})")
        else:
            lines.append(f"exec(compile({block.runnable_code()!r}, {block.where!r}, 'exec'), ns)")
    return "\n".join(lines) + "\n"


def _cases():
    for page in PAGES:
        try:
            page_blocks = blocks(page)
        except AssertionError:  # a bad directive: the page's test fails, saying which
            yield pytest.param(page, "default", id=f"{page.relative_to(ROOT)}-default")
            continue
        tiers = {b.tier for b in page_blocks if b.language in RUN}
        for tier in TIERS:
            if tier == "default" and any(t in ("default", "slow") for t in tiers) or tier in tiers:
                marks = [getattr(pytest.mark, tier)] if tier != "default" else []
                yield pytest.param(page, tier, marks=marks, id=f"{page.relative_to(ROOT)}-{tier}")


def _run_page(page: Path, tier: str, tmp_path: Path) -> None:
    # a reader runs the pages from a clone's root: these are the paths of one that they name
    for name in ("slurm", "tools", "asv_bench", "hpcio"):
        (tmp_path / name).symlink_to(ROOT / name)
    script = tmp_path / "doc_blocks.py"
    script.write_text(_script(blocks(page), tier), encoding="utf-8")
    # USER too, which every login shell has and a CI job may not (`/local/$USER`)
    env = dict(os.environ, HPCIO_REPO=str(ROOT), USER=os.environ.get("USER") or getpass.getuser(),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    # its own session, so a timeout ends the page's DataLoader workers and servers too
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # a hang guard for every tier: a default page takes up to about 30 s on a loaded
        # 2-core node, and a tighter limit fails a slow machine rather than a hang
        out, err = proc.communicate(timeout=1800)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{page.name} ({tier}) timed out:\n{out[-6000:]}\n{err[-6000:]}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the page left running
    assert proc.returncode == 0, f"{page.name} ({tier}):\n{out[-6000:]}\n{err[-6000:]}"


@pytest.mark.parametrize("page, tier", list(_cases()))
def test_page_commands_run(page, tier, tmp_path):
    if tier == "slurm" and not os.environ.get("SLURM_CONF"):
        missing("SLURM", "no Slurm cluster: run `tools/slurm/cluster.sh start` and export SLURM_CONF "
                         "(make test-slurm does both)")
    _run_page(page, tier, tmp_path)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_is_labelled(page):
    for block in blocks(page):
        assert block.language in RUN or block.language in SHOWN, (
            f"{block.where}: label the block bash, python or one of {sorted(SHOWN)}")
        if block.language in SHOWN:
            first = block.code.lstrip().splitlines()[0] if block.code.strip() else ""
            assert not first.startswith(COMMAND_WORDS), f"{block.where}: a command in a '{block.language}' block"


def test_few_blocks_are_skipped():
    skipped = [b for page in PAGES for b in blocks(page) if b.tier == "skip"]
    assert len(skipped) <= 8, [b.where for b in skipped]


def test_few_replacements():
    """A replacement runs what a reader does not: each one left is named on its page (a
    cluster's partitions, the clone a command runs in), and there are few."""
    replaced = [(b.where, old) for page in PAGES for b in blocks(page) for old, _ in b.replacements]
    assert len(replaced) <= MAX_REPLACEMENTS, replaced


# ---- the "Coming from" page names only what exists --------------------------------

def _hpcio_cells() -> list[str]:
    """The code spans of the hpcio column of docs/coming-from.md's tables."""
    spans = []
    for line in (ROOT / "docs" / "coming-from.md").read_text(encoding="utf-8").splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) == 2:
            spans.extend(re.findall(r"`([^`]+)`", cells[1]))
    return spans


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def _check_command(span: str, subcommands: dict) -> None:
    words = span.replace("srun hpcio-convert", "hpcio convert").split()
    assert words[1] in subcommands, f"no command hpcio {words[1]}"
    known = {opt for action in subcommands[words[1]]._actions for opt in action.option_strings}
    for word in words[2:]:
        if word.startswith("-"):
            assert word in known, f"hpcio {words[1]} has no option {word}"


def test_coming_from_names_what_exists():
    from hpcio import Dataset
    from hpcio.cli.main import build_parser

    parser = build_parser()
    subcommands = next(a.choices for a in parser._actions if hasattr(a, "choices") and a.choices)
    spans = _hpcio_cells()
    assert len(spans) > 40
    for span in spans:
        head = span.split("(")[0]
        if span.startswith(("hpcio ", "srun hpcio-convert")):
            _check_command(span, subcommands)
        elif head.startswith("hpcio."):
            _resolve(head)
            for inner in re.findall(r"(hpcio(?:\.\w+)+)\(", span):
                _resolve(inner)
        elif head.startswith("ds."):
            for method in re.findall(r"ds\.(\w+)", span):
                assert hasattr(Dataset, method), f"hpcio.Dataset has no {method}: {span}"
        elif head.startswith("loader."):
            import hpcio.torch

            assert hasattr(hpcio.torch.DataLoader, head.split(".")[1]), span
