"""One conversion at a time into an output: the second run names the first and stops,
before it touches anything; a lock left by a dead holder is taken over."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
from convert_helpers import BOOT, env, run_command, tree_bytes

from hpcio.convert.lock import OutputLock, lock_path
from hpcio.convert.resume import staging_path
from hpcio.errors import ConversionLockedError


def test_a_second_conversion_into_the_same_output_names_the_first_and_stops(sources, tmp_path):
    out = tmp_path / "out"
    args = [*sources, out, "--to", "lines", "--num-shards", "8", "--no-progress"]
    e = env()
    e["HPCIO_CONVERT_SLOW_SHARD_SECONDS"] = "0.5"
    first = subprocess.Popen([sys.executable, "-c", BOOT, "convert", *map(str, args)], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parts = os.path.join(staging_path(out), ".hpcio", "parts")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (os.path.isdir(parts) and os.listdir(parts)):
        time.sleep(0.05)
    for extra in ([], ["--resume"]):
        second = run_command("convert", [*args, *extra])
        assert second.returncode == 1
        assert re.fullmatch(
            rf"hpcio: error: another conversion is writing this output \(pid {first.pid} on "
            rf"{re.escape(socket.gethostname())}, since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\); wait for it to end, or "
            r"stop it and run this command again \(with --resume to keep what it wrote\) "
            rf"\({re.escape(lock_path(str(out)))}\)", second.stderr.strip()), second.stderr
    _out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert not os.path.exists(lock_path(str(out))) and not os.path.exists(staging_path(out))
    ref = tmp_path / "ref"
    assert run_command("convert", [*sources, ref, "--to", "lines", "--num-shards", "8"]).returncode == 0
    assert tree_bytes(out) == tree_bytes(ref)  # the refused runs changed nothing of the first's output


def test_without_flock_the_lock_is_a_file_made_once(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    dst = str(tmp_path / "out")
    with OutputLock(dst):
        with pytest.raises(ConversionLockedError, match=rf"^another conversion is writing this output \(pid "
                                                        rf"{os.getpid()} on "):
            OutputLock(dst).acquire()
    assert not os.path.exists(lock_path(dst))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    with open(lock_path(dst), "w") as f:  # left by a process of this host that is gone
        json.dump({"host": socket.gethostname(), "pid": int(dead), "started": 0}, f)
    with OutputLock(dst) as lock:
        with open(lock.path) as f:
            assert json.load(f)["pid"] == os.getpid()
    with open(lock_path(dst), "w") as f:  # another host's: its liveness cannot be known here
        json.dump({"host": "elsewhere", "pid": 1, "started": 0}, f)
    with pytest.raises(ConversionLockedError, match=r"\(pid 1 on elsewhere, since "):
        OutputLock(dst).acquire()


def test_a_lock_whose_holder_died_is_free(tmp_path):
    """flock is dropped by the kernel when its holder dies: the file left behind is no lock."""
    dst = str(tmp_path / "out")
    code = f"from hpcio.convert.lock import OutputLock; OutputLock({dst!r}).acquire(); import os; os._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert os.path.exists(lock_path(dst))
    with OutputLock(dst):
        pass
