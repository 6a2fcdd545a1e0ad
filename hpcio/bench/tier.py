"""An emulated remote storage tier: a directory seen through ``tierfs``, a FUSE passthrough
that makes every read request wait a fixed latency and share a bandwidth cap.

Machines without Lustre or Spectrum Scale (a laptop, CI) can then measure what a reader
does when each request costs a millisecond: how many requests it keeps in flight, and
whether it reaches the tier's bandwidth.  It emulates latency and bandwidth only, not a
parallel filesystem's striping, locking or metadata server, and every figure taken
through it is to be reported as coming from the emulation.

>>> with EmulatedTier("/data/shards", latency_us=1000, bandwidth=500e6) as tier:  # doctest: +SKIP
...     ds = hpcio.open(tier.path("mds"))
...     tier.stats()                     # {"requests": ..., "bytes": ...} served so far
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from importlib import resources

from ..errors import MissingDependencyError, TierEmulatorError

__all__ = ["EmulatedTier", "build_tierfs", "tier_stats"]

_SOURCE = "tierfs.c"
_PACKAGES = "libfuse3-dev fuse3 pkg-config gcc (Debian: apt-get install libfuse3-dev fuse3)"


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hpcio")


def build_tierfs() -> str:
    """Path of the ``tierfs`` executable, compiled from the shipped source on first use."""
    source = resources.files("hpcio.bench").joinpath(_SOURCE).read_bytes()
    binary = os.path.join(_cache_dir(), f"tierfs-{hashlib.sha256(source).hexdigest()[:12]}")
    if os.path.exists(binary):
        return binary
    cc = shutil.which(os.environ.get("CC", "cc"))
    pkg = shutil.which("pkg-config")
    flags = subprocess.run([pkg, "--cflags", "--libs", "fuse3"], capture_output=True, text=True) if pkg else None
    if not cc or flags is None or flags.returncode != 0:
        raise MissingDependencyError(f"building the tier emulator needs {_PACKAGES}")
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, _SOURCE)
        with open(src, "wb") as f:
            f.write(source)
        out = os.path.join(tmp, "tierfs")
        proc = subprocess.run([cc, "-O2", "-o", out, src, *flags.stdout.split()], capture_output=True, text=True)
        if proc.returncode != 0:
            raise TierEmulatorError(f"compiling {_SOURCE} failed:\n{proc.stderr.strip()}")
        os.replace(out, binary)
    return binary


def cache_source(files: list[str]) -> float:
    """Read the emulated tier's source files ``files`` into the page cache when they fit in
    half the memory available, and return the fraction of them resident.  The tier's
    latency and bandwidth cap stand for its servers: reading the source from the local
    disk as well would charge this machine's disk and CPU for work a parallel
    filesystem's servers do elsewhere."""
    from .._memory import available_bytes
    from .pagecache import load, resident

    before = resident(files)
    if before.fraction == 1.0:
        return 1.0  # cached already (each run and epoch asks again)
    available = available_bytes()
    if available is not None and before.total_bytes <= available // 2:
        load(files)
    return resident(files).fraction


def tier_stats(mountpoint: str) -> dict:
    """Read requests served and their bytes since the tier at ``mountpoint`` was mounted
    (the counters of :meth:`EmulatedTier.stats`, for a process that did not mount it)."""
    with open(os.path.join(mountpoint, ".tierfs-stats")) as f:
        pairs = (line.split() for line in f if line.strip())
        return {k: int(v) for k, v in pairs}


class EmulatedTier:
    """Mount ``source`` through ``tierfs`` for the ``with`` block.

    ``latency_us`` is added to every read request; ``bandwidth`` (bytes/s, 0 for none) is
    shared by all requests; ``threads`` bounds the requests served at once, as a tier's
    server-side concurrency does.  ``mountpoint`` defaults to a new temporary directory.

    The client side is FUSE's: by default the kernel sends read-ahead requests of at most
    128 KiB and keeps at most 12 in flight.  ``read_ahead_kb`` (the mount's read-ahead
    window, so the size of its requests, up to 1024) and ``max_background`` (requests in
    flight) bring it closer to a parallel filesystem's client: Lustre sends RPCs of
    1-4 MiB, 8 in flight per storage target.  Setting ``read_ahead_kb`` needs root (it is
    the mount's ``/sys/class/bdi`` entry).

    ``client_cache=False`` drops a file's pages from the client's page cache whenever the
    file is opened, so that every fetch of a whole file (a node cache's, a peer's download)
    reaches the tier, as on a node whose memory is far smaller than the datasets it reads.
    """

    def __init__(self, source, *, latency_us: int = 1000, bandwidth: float = 0, threads: int = 64,
                 max_background: int = 0, read_ahead_kb: int = 0, client_cache: bool = True, mountpoint=None):
        if latency_us < 0 or bandwidth < 0 or threads < 1:
            raise TierEmulatorError(f"latency_us and bandwidth must be >= 0 and threads >= 1, got "
                             f"{latency_us}, {bandwidth}, {threads}")
        if not 0 <= max_background <= 65535 or not 0 <= read_ahead_kb <= 1024:
            raise TierEmulatorError(f"max_background must be 0 (FUSE's default) to 65535 and read_ahead_kb "
                                    f"0 (the default) to 1024, got {max_background}, {read_ahead_kb}")
        self.max_background, self.read_ahead_kb = int(max_background), int(read_ahead_kb)
        self.client_cache = bool(client_cache)
        self.source = os.path.realpath(os.fspath(source))
        if not os.path.isdir(self.source):
            raise TierEmulatorError(f"the tier's source {self.source} is not a directory")
        self.latency_us, self.bandwidth, self.threads = int(latency_us), int(bandwidth), int(threads)
        self._given_mountpoint = mountpoint
        self.mountpoint: str | None = None

    def path(self, *parts) -> str:
        """``parts`` below the mounted tier."""
        if self.mountpoint is None:
            raise TierEmulatorError("the emulated tier is not mounted")
        return os.path.join(self.mountpoint, *parts)

    def stats(self) -> dict:
        """Read requests served and their bytes since the mount."""
        return tier_stats(self.path())

    def __enter__(self) -> EmulatedTier:
        binary = build_tierfs()
        if not os.path.exists("/dev/fuse"):
            raise TierEmulatorError("/dev/fuse does not exist: this machine cannot mount FUSE filesystems")
        self.mountpoint = os.fspath(self._given_mountpoint or tempfile.mkdtemp(prefix="hpcio-tier-"))
        options = f"latency_us={self.latency_us},bandwidth={self.bandwidth},max_threads={self.threads}"
        if self.max_background:
            options += f",max_background={self.max_background}"
        if not self.client_cache:
            options += ",client_cache=0"
        proc = subprocess.run([binary, self.source, self.mountpoint, "-o", options],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            self.mountpoint = None
            raise TierEmulatorError(f"mounting {self.source} through tierfs failed: {proc.stderr.strip()}")
        self._catch_sigterm()
        if self.read_ahead_kb:
            try:
                self._set_read_ahead_kb()
            except BaseException as err:
                self.__exit__(type(err), err, None)
                raise
        return self

    def _set_read_ahead_kb(self) -> None:
        dev = os.stat(self.mountpoint).st_dev
        entry = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
        try:
            with open(entry, "w") as f:
                f.write(str(self.read_ahead_kb))
        except OSError as exc:
            raise TierEmulatorError(f"setting the emulated tier's read-ahead window ({entry}) failed: "
                                    f"{exc.strerror} (it needs root)") from None

    def __exit__(self, exc_type=None, exc=None, tb=None) -> None:
        """Unmount, also after an exception, Ctrl-C or SIGTERM (see :meth:`__enter__`).
        A mount a file keeps busy is detached lazily (``fusermount3 -u -z``): it goes
        when the last file closes.  An exception in flight is never replaced: a failure
        to clean up is then a warning."""
        self._restore_sigterm()
        mountpoint, self.mountpoint = self.mountpoint, None
        if mountpoint is None:
            return
        failure = None
        for _attempt in range(20):  # a file still open in this process keeps the mount busy briefly
            proc = subprocess.run(["fusermount3", "-u", mountpoint], capture_output=True, text=True)
            if proc.returncode == 0:
                break
            time.sleep(0.05)
        else:
            lazy = subprocess.run(["fusermount3", "-u", "-z", mountpoint], capture_output=True, text=True)
            if lazy.returncode != 0:
                failure = f"unmounting {mountpoint} failed: {proc.stderr.strip()}; {lazy.stderr.strip()}"
        if failure is None and self._given_mountpoint is None:
            try:
                os.rmdir(mountpoint)
            except OSError as err:
                failure = f"removing the mount point {mountpoint} failed: {err.strerror}"
        if failure is not None:
            if exc_type is None:
                raise TierEmulatorError(failure)
            warnings.warn(f"{failure} (while handling {exc_type.__name__})", RuntimeWarning, stacklevel=2)

    def _catch_sigterm(self) -> None:
        """Turn SIGTERM into SystemExit while mounted, so a ``with`` block unwinds and
        unmounts; only when SIGTERM has its default action (nobody else handles it) and
        in the main thread, and restored on exit."""
        self._old_sigterm = None
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def terminate(signum, frame):
            raise SystemExit(128 + signum)

        self._old_sigterm = signal.signal(signal.SIGTERM, terminate)

    def _restore_sigterm(self) -> None:
        old = getattr(self, "_old_sigterm", None)
        if old is not None:
            signal.signal(signal.SIGTERM, old)
            self._old_sigterm = None
