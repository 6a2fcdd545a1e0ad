"""Inputs that made a C kernel fail under libFuzzer (fuzz/regressions/TARGET/), and the
seed corpus (fuzz/corpus/TARGET/), replayed through the Python functions that reach the
same kernels with the arguments the fuzz target derives from them (fuzz/targets/*.c).

Each input must give a result or a typed error: no crash, no overrun, no untyped
exception from the kernel layer."""

import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest

from hpcio._core import _codecs, _index, _io, _jinx, _records, _tar
from hpcio.errors import HpcioError

FUZZ = Path(__file__).resolve().parents[2] / "fuzz"
LIMIT = 1 << 16  # fuzz/targets/frames.h


class Params:
    """The parameter bytes at the start of a fuzz input (fuzz/targets/fuzz_input.h)."""

    def __init__(self, data):
        self.data = bytes(data)

    def u8(self):
        if not self.data:
            return 0
        v, self.data = self.data[0], self.data[1:]
        return v

    def u16(self):
        return self.u8() | self.u8() << 8


def replay_json(data):
    offsets = _index.scan_lines(data).astype(np.int64)
    _records.json_wide_int(data)
    if len(offsets) > 1:
        _records.json_columns(data, offsets)


def replay_tar(data):
    p = Params(data)
    fix = p.u8() & 1
    p.u8(), p.u16()  # index buffer sizes: the Python layer grows its own
    buf = bytearray(p.data)
    for at in range(0, len(buf) - 511, 512) if fix else ():
        block = buf[at:at + 512]
        total = sum(block[:148]) + 8 * 32 + sum(block[156:])
        if total != 8 * 32:
            buf[at + 148:at + 156] = b"%06o\0 " % (total & 0o777777)
    for at in range(0, len(buf) - 511, 512):
        try:
            _tar.parse_header(bytes(buf[at:at + 512]), at)
        except HpcioError:
            pass
    _tar.scan(bytes(buf), partial=True)


def replay_a85(data):
    try:
        _jinx.a85decode(data)
    except HpcioError:
        pass
    assert _jinx.a85decode(_jinx.a85encode(data)) == data


def replay_jinx_footer(data):
    _jinx.locate_footer(data)


def frame_batch(data):
    p = Params(data)
    head = p.u8()
    m = 1 + head % 4
    threads = 1 + (head >> 4) % 2
    cuts = [p.u16() for _ in range(2 * m)]
    src = p.data
    if head & 0x80:
        starts, ends, at = [], [], 0
        for j in range(m):
            starts.append(at)
            at = len(src) if j + 1 == m else at + cuts[j] % (len(src) - at + 1)
            ends.append(at)
    else:
        starts, ends = cuts[0::2], cuts[1::2]
    return src, np.array(starts, np.uint64), np.array(ends, np.uint64), threads


def replay_zstd(data):
    src, starts, ends, threads = frame_batch(data)
    try:
        _codecs.zstd_decompress(src, LIMIT)
    except HpcioError:
        pass
    _codecs.zstd_decode_many(src, starts, ends, LIMIT, threads)


def replay_blosc2(data):
    src, starts, ends, threads = frame_batch(data)
    _codecs.blosc2_decode_many(src, starts, ends, LIMIT, threads)


def replay_offsets(data):
    p = Params(data)
    width = 8 if p.u8() & 1 else 4
    sel = [p.u16() for _ in range(p.u8() % 16)]
    nshards, n = 1 + p.u8() % 16, p.u8() % 32
    cum = np.cumsum([0] + [p.u8() % 8 for _ in range(nshards)]).astype(np.uint64)
    ids = np.array([p.u8() % (int(cum[-1]) + 2) for _ in range(n)], np.int64)
    try:
        _index.bisect_ids(cum, ids)
    except HpcioError:
        pass
    shard = p.data
    if len(shard) < width:
        return
    nrec = struct.unpack_from("<I" if width == 4 else "<Q", shard)[0]
    if nrec >= len(shard) // width or (nrec + 1) * width > len(shard) - width:
        return
    table = shard[width:width + (nrec + 1) * width]
    try:
        starts, ends = _index.offset_ranges(table, width, nrec, len(shard))
        _io.gather(shard, starts, ends)
    except HpcioError:
        pass
    indices = np.array([s % (nrec + 2) for s in sel], np.int64)
    _index.offset_ranges(table, width, nrec, len(shard), indices)


def replay_columns(data):
    p = Params(data)
    ncols = 1 + p.u8() % 8
    sizes = tuple(-1 if f >= 0x80 else 1 << (62 - (f & 0xF)) if f >= 0x70 else f % 16
                  for f in (p.u8() for _ in range(ncols)))
    sel = [p.u8() % (ncols + 1) for _ in range(p.u8() % 9)]
    lens = [p.u8() for _ in range(p.u8() % 17)]
    buf, starts, ends, at = p.data, [], [], 0
    for n in lens:
        n = min(n, len(buf) - at)
        starts.append(at)
        at += n
        ends.append(at)
    cols = tuple(c for c in sel if c < ncols)  # the Python layer checks the selection
    starts, ends = np.array(starts, np.int64), np.array(ends, np.int64)
    buf_of = np.zeros(len(starts), np.int32)
    _records.mds_columns([buf], buf_of, starts, ends, sizes, cols)
    for col in range(ncols):
        for utf8 in (False, True):
            _records.mds_lengths([buf], buf_of, starts, ends, sizes, col, utf8)


def replay_readplan(data):
    p = Params(data)
    m = p.u8() % 17
    dst_cap, max_gap, max_request, depth = p.u16() % 4096, p.u8() * 8, p.u16(), 1 + p.u8() % 3
    ext = [(p.u8() % 3, p.u16() % 8192, p.u8() * 4, p.u16() % 4096) for _ in range(m)]
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, "data"), os.path.join(tmp, "empty")]
        Path(paths[0]).write_bytes(p.data)
        Path(paths[1]).write_bytes(b"")
        fds = [os.open(path, os.O_RDONLY) for path in paths]
        try:
            ext = [e for e in ext if e[0] < 2]  # the Python layer names existing files only
            file, off, length, out = (np.array(c, dtype) for c, dtype in zip(
                zip(*ext) if ext else ([], [], [], []), (np.uint32, np.uint64, np.uint64, np.uint64)))
            _io.read_extents(np.array(fds, np.int32), paths, file, off, length, out,
                             np.zeros(dst_cap, np.uint8), max_gap=max_gap,
                             max_request=max_request, depth=depth)
        finally:
            for fd in fds:
                os.close(fd)


REPLAY = {name[len("replay_"):]: fn for name, fn in globals().items() if name.startswith("replay_")}
# json_columns reports a malformed document as ValueError (the reader wraps it);
# read_extents an extent that does not fit the caller's output as BufferError.
EXPECTED = {"json": (HpcioError, ValueError), "readplan": (HpcioError, BufferError)}


def inputs(kind):
    return [pytest.param(target.name, path, id=f"{target.name}/{path.name[:12]}")
            for target in sorted((FUZZ / kind).iterdir()) if target.is_dir()
            for path in sorted(target.iterdir())]


def test_every_target_replays():
    targets = {p.stem for p in (FUZZ / "targets").glob("*.c")}
    assert targets == set(REPLAY)


@pytest.mark.parametrize(("target", "path"), inputs("regressions") + inputs("corpus"))
def test_fuzz_input_gives_a_result_or_typed_error(target, path):
    try:
        REPLAY[target](path.read_bytes())
    except EXPECTED.get(target, HpcioError):
        pass
