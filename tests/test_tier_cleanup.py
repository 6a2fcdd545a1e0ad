"""The emulated tier and the benchmark's memory cgroup leave nothing behind after an
exception, Ctrl-C or SIGTERM, and let the original exception through."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import hpcio
from hpcio.bench.tier import EmulatedTier

fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="this machine has no /dev/fuse")


def mounted(path) -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[1] == str(path) for line in f)


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.bin").write_bytes(b"x" * 4096)
    return root


@fuse
@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_an_exception_with_a_file_open_unmounts_and_comes_through(source, tmp_path, error):
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    held = None
    with pytest.raises(error, match="^the reader's own error$"):
        with EmulatedTier(source, latency_us=0, mountpoint=mountpoint) as tier:
            held = open(tier.path("a.bin"), "rb")  # keeps the mount busy
            held.read(10)
            raise error("the reader's own error")
    assert not mounted(mountpoint)
    held.close()


@fuse
def test_sigterm_unmounts_before_the_process_ends(source, tmp_path):
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    script = textwrap.dedent(f"""
        import os, signal
        from hpcio.bench.tier import EmulatedTier
        with EmulatedTier({str(source)!r}, latency_us=0, mountpoint={str(mountpoint)!r}) as tier:
            f = open(tier.path("a.bin"), "rb")
            print("mounted", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.stdout == "mounted\n", proc.stderr
    assert proc.returncode == 128 + signal.SIGTERM
    assert not mounted(mountpoint)


def test_a_memory_cgroup_is_removed_after_an_exception_and_lets_it_through():
    from hpcio.bench.cold import memory_cgroup

    try:
        cgroup = memory_cgroup(64 << 20)
        procs = cgroup.__enter__()
    except (hpcio.HpcioError, PermissionError) as exc:
        pytest.skip(f"no memory cgroup here: {exc}")
    group = os.path.dirname(procs)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             preexec_fn=lambda: open(procs, "w").write(str(os.getpid())))
    try:
        with pytest.raises(KeyboardInterrupt, match="^interrupted$"):
            try:
                raise KeyboardInterrupt("interrupted")  # a member still runs: the group is busy
            except BaseException as err:
                cgroup.__exit__(type(err), err, err.__traceback__)
                raise
        assert not os.path.exists(group)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        child.kill()
