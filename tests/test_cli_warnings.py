"""Every ``hpcio`` command runs quiet: no Python warnings with source lines on stderr.

The commands run with ``PYTHONWARNINGS=default``, so warnings Python hides by default
(deprecations in libraries) would show too.  A warning the user must read is one line,
``hpcio: warning: <message>``.
"""

from __future__ import annotations

import re

import pytest

# "path/to/module.py:123: SomeWarning: ..." and the source line Python prints under it.
SOURCE_LINE = re.compile(r"\.py:\d+: ")
WARNINGS_SHOWN = {"PYTHONWARNINGS": "default"}


def python_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "Warning" in line or SOURCE_LINE.search(line)]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """The demo tour's vlm shards (every format), written by ``hpcio demo run``."""
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
               **WARNINGS_SHOWN)
    out = tmp_path_factory.mktemp("quiet") / "vlm"
    proc = subprocess.run([sys.executable, "-m", "hpcio.cli", "demo", "run", "-n", "8", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert python_warnings(proc.stderr) == [], proc.stderr
    return out


COMMANDS = {
    "demo-text": ["demo", "run", "--profile", "text", "-n", "20", "--out", "{tmp}/text"],
    "demo-generate": ["demo", "generate", "-n", "2", "{tmp}/raw.jsonl.zst"],
    "convert-zarr": ["convert", "{demo}/vlm.jsonl", "{tmp}/zarr", "--to", "zarr", "--no-progress"],
    "convert-hdf5": ["convert", "{demo}/mds", "{tmp}/hdf5", "--to", "hdf5", "--no-progress"],
    "convert-webdataset": ["convert", "{demo}/jinx", "{tmp}/wds", "--to", "webdataset", "--no-progress"],
    "split": ["split", "{demo}/mds", "{tmp}/parts", "--parts", "2", "--no-progress"],
    "join": ["join", "{demo}/zarr", "{demo}/zarr", "{tmp}/joined", "--no-progress"],
    "inspect": ["inspect", "{demo}/hdf5"],
    "verify": ["verify", "{demo}/webdataset"],
    "plan": ["plan", "{demo}/mds", "--ngpus", "2", "--nworkers", "2"],
    "stage": ["stage", "{demo}/jinx", "{tmp}/staged", "--no-mpi", "--quiet"],
    "info": ["info"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_prints_no_python_warnings(run_hpcio, demo_dir, tmp_path, name):
    args = [a.format(demo=demo_dir, tmp=tmp_path) for a in COMMANDS[name]]
    proc = run_hpcio(*args, env=WARNINGS_SHOWN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert python_warnings(proc.stderr) == [], proc.stderr


def test_a_warning_the_user_must_read_is_one_line(run_hpcio, demo_dir, tmp_path):
    proc = run_hpcio("convert", f"{demo_dir}/mds", f"{tmp_path}/out", "--to", "mds",
                     "--compression", "sample::zstd", "--no-progress", env=WARNINGS_SHOWN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert python_warnings(proc.stderr) == [], proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(notes) == 1 and notes[0].startswith("hpcio: warning: compression='sample::zstd'"), proc.stderr
    assert "register_streaming_reader()" in notes[0]


def test_traceback_keeps_pythons_warning_format(run_hpcio, demo_dir, tmp_path):
    proc = run_hpcio("--traceback", "convert", f"{demo_dir}/mds", f"{tmp_path}/out", "--to", "mds",
                     "--compression", "sample::zstd", "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "UserWarning: compression='sample::zstd'" in proc.stderr
