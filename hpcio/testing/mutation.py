"""The mutation suite: damaged copies of small datasets of every format, each read in a
memory-capped child process, each outcome classified.

A case is one mutation of one file of a dataset written with hpcio's defaults: a
truncation, a seeded byte flip, or the rewrite of a count or offset (a decimal number
in a text file, a little-endian u32 near either end of a binary file).  A child process
forked for the case caps its address space (``RLIMIT_AS``), reads every sample three
ways (``ds[i]``, iteration, ``get_batch``) and then runs the format's ``verify``; the
parent kills it at a timeout.  Outcomes (:data:`OUTCOMES`):

``detected``   a typed :class:`~hpcio.errors.HpcioError` (the contract);
``identical``  every sample read back unchanged (the mutation hit bytes nothing reads);
``silent``     no error, but wrong samples or a wrong length;
``crash``      the child died of a signal;  ``hang``  it passed the timeout;
``untyped``    another exception (its type and innermost hpcio frame are kept);
``overalloc``  ``MemoryError`` under the address-space cap.

Cases fork from a process that has imported every backend but opened nothing (zarr's
event loop thread and h5py's state must not cross a fork), so :func:`run_suite` is
meant to run in a fresh interpreter: ``tools/mutation_suite.py`` is its command line.
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import select
import shutil
import signal
import time
import traceback
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import SelfCheckError

__all__ = ["FORMATS", "OUTCOMES", "Case", "Result", "make_cases", "run_suite", "summarize", "table"]

OUTCOMES = ("detected", "identical", "silent", "crash", "hang", "untyped", "overalloc")

_SAMPLES = 24


def _sample(i: int, binary: bool = True) -> dict:
    sample = {"id": i, "text": f"sample {i} " + "lorem ipsum " * (i % 9)}
    if binary:
        sample["blob"] = bytes((i * 7 + k) % 256 for k in range(i % 41 + 1))
    return sample


@dataclass(frozen=True)
class _Format:
    """How the suite writes one format variant: ``format`` and writer ``options``, the
    file opened inside the variant's directory (None: the directory), whether values
    include bytes, and which of its files the integrity data written by default covers
    (a regular expression over their relative paths)."""

    format: str
    file: str | None = None
    options: dict = field(default_factory=dict)
    binary: bool = True
    covered: str | None = None  # regular expression over relative paths


FORMATS = {
    "mds": _Format("mds", None, {"size_limit": 700}, covered=r"shard\.\d+\.mds$"),
    "mds-zstd": _Format("mds", None, {"size_limit": 700, "compression": "sample::zstd"},
                        covered=r"shard\.\d+\.mds$"),
    "mds-blosc2": _Format("mds", None, {"size_limit": 700, "compression": "sample::blosc2"},
                          covered=r"shard\.\d+\.mds$"),
    "jinx": _Format("jinx", "data.jinx", covered=r"\.[bj]inx$"),
    "webdataset": _Format("webdataset", covered=r"\.tar$"),
    "zarr": _Format("zarr", covered=r"/c/"),
    "hdf5": _Format("hdf5"),
    "parquet": _Format("parquet"),  # page CRCs: the footer is not covered
    "msgpack": _Format("msgpack", covered=r"\.msgpack$"),
    "jsonl": _Format("jsonl", "data.jsonl", binary=False, covered=r"\.jsonl$"),
}


@dataclass(frozen=True)
class Case:
    """One mutation: ``kind`` (truncate, flip, number, u32) of file ``file`` (relative to
    the dataset) at byte ``offset``; ``value`` is the xor mask, the new number or word."""

    format: str
    kind: str
    file: str
    offset: int
    value: int = 0
    length: int = 0  # bytes replaced (number rewrites)

    def label(self) -> str:
        return f"{self.format}:{self.kind}:{self.file}@{self.offset}={self.value}"


@dataclass
class Result:
    case: Case
    outcome: str
    detail: str = ""
    verify: str = ""  # "caught", "missed", or an outcome of verify itself
    seconds: float = 0.0


# --- writing the datasets --------------------------------------------------------------
def write_datasets(root: str, formats=FORMATS) -> None:
    """The pristine dataset of each format variant, in ``root/<variant>/data``."""
    import hpcio

    warnings.simplefilter("ignore")
    for variant, spec in formats.items():
        directory = os.path.join(root, variant, "data")
        os.makedirs(directory if spec.file else os.path.dirname(directory), exist_ok=True)
        path = os.path.join(directory, spec.file) if spec.file else directory
        with hpcio.open_writer(path, format=spec.format, **spec.options) as w:
            for i in range(_SAMPLES):
                w.write(_sample(i, spec.binary))


def _dataset(root: str, variant: str) -> str:
    """The directory holding a variant's files."""
    return os.path.join(root, variant, "data")


def _opened(directory: str, variant: str) -> str:
    """What ``hpcio.open`` is given for a variant's dataset in ``directory``."""
    name = FORMATS[variant].file
    return os.path.join(directory, name) if name else directory


def _files(path: str) -> list[str]:
    out = []
    for base, _dirs, names in os.walk(path):
        out += [os.path.relpath(os.path.join(base, n), path) for n in names]
    return sorted(out)


# --- making the cases ------------------------------------------------------------------
_NUMBER = re.compile(rb"(?<![0-9A-Za-z.])[0-9]{1,20}(?![0-9A-Za-z])")


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def make_cases(root: str, variant: str, *, truncations: int, flips: int, rewrites: int,
               seed: int = 0) -> list[Case]:
    """Seeded cases over every file of a variant's pristine dataset: truncations at
    offsets spread over each file (both ends included), byte flips anywhere, and count
    or offset rewrites (numbers of text files, u32 words within 256 bytes of either end
    of binary files), split between the files."""
    rng = random.Random(f"{seed}:{variant}")
    path = _dataset(root, variant)
    files = _files(path)
    sizes = {f: os.path.getsize(os.path.join(path, f)) for f in files}
    cases = []
    for k in range(truncations):
        f = files[k % len(files)]
        size = sizes[f]
        at = (0, size - 1, size // 2)[k // len(files)] if k < 3 * len(files) else rng.randrange(size)
        cases.append(Case(variant, "truncate", f, max(at, 0)))
    weights = [sizes[f] for f in files]
    for _ in range(flips):
        f = rng.choices(files, weights)[0]
        cases.append(Case(variant, "flip", f, rng.randrange(max(sizes[f], 1)), rng.randrange(1, 256)))
    for k in range(rewrites):
        f = files[k % len(files)]
        with open(os.path.join(path, f), "rb") as fh:
            data = fh.read()
        cases.append(_rewrite(variant, f, data, rng))
    return cases


def _rewrite(variant: str, name: str, data: bytes, rng: random.Random) -> Case:
    if _is_text(data):
        numbers = list(_NUMBER.finditer(data))
        if numbers:
            m = rng.choice(numbers)
            v = int(m.group())
            new = rng.choice([0, v + 1, max(v - 1, 0), 2**31, 2**32, 2**63, 2**64])
            return Case(variant, "number", name, m.start(), new, m.end() - m.start())
    ends = [o for o in range(0, min(len(data) - 3, 256), 4)]
    ends += [o for o in range(max(len(data) - 256, 0) & ~3, len(data) - 3, 4)]
    if not ends:
        return Case(variant, "flip", name, 0, 1)
    at = rng.choice(ends)
    v = int.from_bytes(data[at : at + 4], "little")
    return Case(variant, "u32", name, at, rng.choice([0, (v + 1) % 2**32, (v + 8) % 2**32, 2**32 - 1, v ^ 2**31]))


def apply(case: Case, path: str) -> None:
    """Damage file ``case.file`` of the dataset copy at ``path``."""
    target = os.path.join(path, case.file)
    if case.kind == "truncate":
        os.truncate(target, case.offset)
        return
    with open(target, "r+b") as f:
        data = bytearray(f.read())
        if case.kind == "flip":
            data[case.offset] ^= case.value
        elif case.kind == "number":
            data[case.offset : case.offset + case.length] = str(case.value).encode()
        else:
            data[case.offset : case.offset + 4] = case.value.to_bytes(4, "little")
        f.seek(0)
        f.truncate()
        f.write(data)


# --- one case, in a child --------------------------------------------------------------
def _plain(value):
    """A value in a form that compares equal across formats' return types."""
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict) or hasattr(value, "keys"):
        return {k: _plain(value[k]) for k in value.keys()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _read_all(path: str, fmt: str) -> list:
    """Every sample of the dataset, read by index, by iteration and by batch; the three
    must agree (else the case is reported as silent)."""
    import hpcio

    ds = hpcio.open(path, format=fmt)
    n = len(ds)
    if n > 10 * _SAMPLES:
        return [f"<{n} samples>"]  # a wrong length, told without reading 2**64 samples
    by_index = [_plain(ds[i]) for i in range(n)]
    by_iter = [_plain(s) for s in ds]
    by_batch = [_plain(s) for s in ds.get_batch(np.arange(n))] if n else []
    if not by_index == by_iter == by_batch:
        return ["<paths disagree>"]
    return by_index


def _classify(exc: BaseException) -> tuple[str, str]:
    from ..errors import HpcioError

    if isinstance(exc, HpcioError):
        return "detected", f"{type(exc).__name__}: {str(exc)[:160]}"
    if isinstance(exc, MemoryError):
        return "overalloc", "MemoryError"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/hpcio/" in f.filename]
    where = ""
    if frames:
        f = frames[-1]
        where = f" at {f.filename[f.filename.rfind('/hpcio/') + 1:]}:{f.lineno} {f.name}"
    return "untyped", f"{type(exc).__name__}{where}: {str(exc)[:120]}"


def _child(case: Case, path: str, expected: list, memory: int, out_fd: int) -> None:
    """Run in the forked child: cap memory, read, verify, report a JSON line per phase."""
    from .. import registry

    def send(**msg):
        os.write(out_fd, (json.dumps(msg) + "\n").encode())

    size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + memory, resource.RLIM_INFINITY))
    warnings.simplefilter("ignore")
    fmt = FORMATS[case.format].format
    try:
        got = _read_all(path, fmt)
        outcome, detail = ("identical", "") if got == expected else ("silent", f"{len(got)} samples read")
    except BaseException as exc:  # noqa: BLE001 - classifying every exception is the point
        outcome, detail = _classify(exc)
    send(phase="read", outcome=outcome, detail=detail)
    try:
        report = registry.format_hook(registry.get_format(fmt), "verify")(path)
        send(phase="verify", outcome="missed" if report["ok"] else "caught")
    except BaseException as exc:  # noqa: BLE001
        kind, detail = _classify(exc)
        send(phase="verify", outcome="caught" if kind == "detected" else kind, detail=detail)


def _run_case(case: Case, root: str, scratch: str, expected: list, *, memory: int, timeout: float) -> Result:
    copy = os.path.join(scratch, "data")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(_dataset(root, case.format), copy)
    apply(case, copy)
    path = _opened(copy, case.format)
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        try:
            _child(case, path, expected, memory, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    messages, status = _collect(pid, read_fd, start + timeout)
    result = _result(case, messages, status)
    result.seconds = time.monotonic() - start
    shutil.rmtree(copy, ignore_errors=True)
    return result


def _collect(pid: int, fd: int, deadline: float) -> tuple[dict, int | None]:
    """The child's messages by phase and its wait status (None: killed at the deadline)."""
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(fd, 65536)
            buf += chunk
            if chunk:
                continue
            status = os.waitpid(pid, 0)[1]
            break
    os.close(fd)
    messages = {}
    for line in buf.decode(errors="replace").splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        messages[msg["phase"]] = msg
    return messages, status


def _result(case: Case, messages: dict, status: int | None) -> Result:
    def ended() -> tuple[str, str]:
        if status is None:
            return "hang", "killed at the timeout"
        if os.WIFSIGNALED(status):
            return "crash", signal.Signals(os.WTERMSIG(status)).name
        return "crash", f"exit status {os.WEXITSTATUS(status)}"

    read = messages.get("read")
    outcome, detail = (read["outcome"], read["detail"]) if read else ended()
    verify = messages.get("verify")
    verify_outcome = verify["outcome"] if verify else ended()[0]
    if verify and verify["outcome"] not in ("caught", "missed"):
        detail = detail or f"verify: {verify.get('detail', '')}"
    return Result(case, outcome, detail, verify_outcome)


# --- the suite -------------------------------------------------------------------------
def _expected(root: str, variant: str) -> list:
    """What the pristine dataset reads back, compared with the source samples once."""
    got = _read_all(_opened(_dataset(root, variant), variant), FORMATS[variant].format)
    want = [_plain(_sample(i, FORMATS[variant].binary)) for i in range(_SAMPLES)]
    if [dict(sorted(s.items())) for s in got] != [dict(sorted(s.items())) for s in want]:
        raise SelfCheckError(f"the pristine {variant} dataset does not read back as written")
    return got


def run_suite(root: str, *, variants=None, truncations: int = 8, flips: int = 8, rewrites: int = 8,
              seed: int = 0, memory: int = 1 << 30, timeout: float = 30.0, progress=None) -> list[Result]:
    """Write the pristine datasets under ``root`` (in a child), make the cases and run
    each in its own forked child; returns every :class:`Result`."""
    variants = list(variants or FORMATS)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            write_datasets(root, {v: FORMATS[v] for v in variants})
            code = 0
        finally:
            os._exit(code)
    if os.waitpid(pid, 0)[1] != 0:
        raise SelfCheckError("writing the pristine datasets failed")
    scratch = os.path.join(root, "scratch")
    os.makedirs(scratch, exist_ok=True)
    results = []
    for variant in variants:
        expected = _expected_in_child(root, variant)
        for case in make_cases(root, variant, truncations=truncations, flips=flips, rewrites=rewrites, seed=seed):
            results.append(_run_case(case, root, scratch, expected, memory=memory, timeout=timeout))
            if progress is not None:
                progress(results[-1])
    return results


def _expected_in_child(root: str, variant: str) -> list:
    """:func:`_expected`, computed in a forked child (the parent opens no dataset)."""
    import pickle

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        code = 1
        try:
            os.write(write_fd, pickle.dumps(_expected(root, variant)))
            code = 0
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_fd)
    data = b""
    while chunk := os.read(read_fd, 1 << 20):
        data += chunk
    os.close(read_fd)
    if os.waitpid(pid, 0)[1] != 0:
        raise SelfCheckError(f"reading the pristine {variant} dataset failed")
    return pickle.loads(data)


def summarize(results: list[Result]) -> dict:
    """Per variant: cases, each outcome's count, and how many silent cases ``verify``
    caught, of all and of those in files the default integrity data covers."""
    rows = {}
    for r in results:
        row = rows.setdefault(r.case.format, {"cases": 0, **dict.fromkeys(OUTCOMES, 0),
                                              "silent_caught": 0, "silent_covered": 0,
                                              "silent_covered_caught": 0, "verify_failures": 0})
        row["cases"] += 1
        row[r.outcome] += 1
        if r.verify not in ("caught", "missed"):
            row["verify_failures"] += 1
        if r.outcome == "silent":
            caught = r.verify == "caught"
            row["silent_caught"] += caught
            if covered(r.case):
                row["silent_covered"] += 1
                row["silent_covered_caught"] += caught
    return rows


def covered(case: Case) -> bool:
    """Whether the integrity data written by default covers the file ``case`` damages."""
    pattern = FORMATS[case.format].covered
    return pattern is not None and re.search(pattern, case.file) is not None


def table(rows: dict) -> str:
    """The per-variant table ``tools/mutation_suite.py`` prints."""
    cols = ["cases", "detected", "identical", "silent", "crash", "hang", "untyped", "overalloc"]
    head = f"{'format':<12}" + "".join(f"{c:>10}" for c in cols) + f"{'verify caught silent':>24}"
    lines = [head, "-" * len(head)]
    for variant, row in rows.items():
        caught = f"{row['silent_caught']}/{row['silent']}"
        lines.append(f"{variant:<12}" + "".join(f"{row[c]:>10}" for c in cols) + f"{caught:>24}")
    total = Counter()
    for row in rows.values():
        total.update(row)
    caught = f"{total['silent_caught']}/{total['silent']}"
    lines.append(f"{'total':<12}" + "".join(f"{total[c]:>10}" for c in cols) + f"{caught:>24}")
    return "\n".join(lines)


def result_json(result: Result) -> dict:
    return {**asdict(result), "case": asdict(result.case)}
