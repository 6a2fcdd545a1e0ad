"""``hpcio stage SRC DST`` is one command line for every resubmission: after a time limit
(SIGTERM, real signal, real process) it resumes, and on a complete copy it exits 0
without copying anything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from hpcio.staging import MANIFEST_NAME, stage

from .conftest import tree_bytes, write_tree
from .test_stage import KILLED_CHILD


def test_sigterm_mid_copy_then_the_same_command_completes_then_copies_nothing(tmp_path):
    rng = __import__("numpy").random.default_rng(5)
    files = {f"shard.{i}.bin": rng.bytes(3 * 2**20) for i in range(4)}
    src = tmp_path / "src"
    write_tree(src, files)
    dst = tmp_path / "dst"
    child = subprocess.Popen([sys.executable, "-c", KILLED_CHILD, str(src), str(dst)],
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        if dst.is_dir() and any(".tmp.killed" in n for n in os.listdir(dst)):
            break
        time.sleep(0.005)
    assert child.poll() is None, "the throttled copy ended before the signal"
    os.kill(child.pid, signal.SIGTERM)
    assert child.wait() == -signal.SIGTERM
    assert not (dst / MANIFEST_NAME).exists()

    again = stage(src, dst, tiers={}, progress=False)
    assert sorted(again.copied + again.kept) == sorted(files)
    staged = tree_bytes(dst)
    staged.pop(MANIFEST_NAME)
    assert staged == files

    requeued = stage(src, dst, tiers={}, progress=False)
    assert requeued.copied == [] and requeued.bytes_copied == 0 and sorted(requeued.kept) == sorted(files)
