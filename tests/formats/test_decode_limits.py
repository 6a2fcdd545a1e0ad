"""Decompression is bounded per read and per batch, before allocating; running out of
memory is never reported as corrupt data."""

from __future__ import annotations

import json
import os
import struct
import tracemalloc

import numpy as np
import pytest

import hpcio
from hpcio import codecs
from hpcio.errors import DecodeError, DecompressionLimitError, OutOfMemoryError
from hpcio.formats.mds.compression import Compression

GiB = 1 << 30
# sample-level compression warns (once per process) about stock streaming
pytestmark = pytest.mark.filterwarnings("ignore:compression=:UserWarning")


def zstd_rle_frame(size: int, byte: bytes = b"a") -> bytes:
    """A valid zstd frame of ``size`` copies of ``byte``, declared in its header, made of
    RLE blocks of 128 KiB: 4 bytes of frame per 128 KiB of output (32 KiB for 1 GiB)."""
    frame = bytearray(struct.pack("<IBBI", 0xFD2FB528, 0x80, 0x38, size))  # FCS 4 bytes, 128 KiB window
    left = size
    while left:
        n = min(1 << 17, left)
        left -= n
        frame += ((left == 0) | (1 << 1) | (n << 3)).to_bytes(3, "little") + byte
    return bytes(frame)


def blosc2_zeros_chunk(size: int) -> bytes:
    """A blosc2 chunk of ``size`` zero bytes: 32 bytes, all header (a special-value chunk)."""
    from hpcio._core import _codecs

    chunk = bytearray(_codecs.blosc2_compress(b"\0" * 4096))
    assert len(chunk) == 32
    chunk[4:8] = struct.pack("<I", size)  # nbytes
    return bytes(chunk)


BOMBS = {"sample::zstd": zstd_rle_frame, "sample::blosc2": blosc2_zeros_chunk}


@pytest.fixture(params=sorted(BOMBS))
def bombs(request, tmp_path, monkeypatch):
    """An MDS dataset of 8 sample-compressed records, each declaring 1 GiB."""
    record = BOMBS[request.param](GiB)
    path = tmp_path / "bombs"
    with monkeypatch.context() as patch:
        patch.setattr(Compression, "compress", lambda self, data, **options: record)
        with hpcio.open_writer(path, format="mds", columns={"text": "str"}, compression=request.param) as w:
            for i in range(8):
                w.write({"text": str(i)})
    return str(path)


def _peak_bytes(read) -> int:
    tracemalloc.start()
    try:
        read()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("how", ["get_batch", "get_columns", "iterate"])
def test_batch_of_bombs_fails_before_allocating(bombs, how):
    ds = hpcio.open(bombs)
    read = {"get_batch": lambda: ds.get_batch(range(8)), "get_columns": lambda: ds.get_columns(range(8)),
            "iterate": lambda: list(ds)}[how]
    with pytest.raises(DecompressionLimitError) as info:
        assert _peak_bytes(read) < 64 << 20
    exc = info.value
    assert exc.path.endswith("shard.00000.mds") and exc.sample == 1 and exc.offset is not None
    assert "1073741824" in str(exc) and "one batch" in str(exc) and "HPCIO_MAX_DECODED_BYTES" in str(exc)


def zstd_undeclared_frame(size: int) -> bytes:
    """:func:`zstd_rle_frame` without the content size in its header (as streaming
    compressors write): only decoding it tells how large it is."""
    frame = zstd_rle_frame(size)
    return struct.pack("<IBB", 0xFD2FB528, 0x00, 0x38) + frame[10:]


def test_a_batch_of_frames_without_declared_sizes_stays_within_the_limit(tmp_path, monkeypatch):
    """Eight frames of 128 MiB that declare no size, under a limit of 256 MiB: they are
    decoded one after the other under what the batch has left, so the batch fails having
    held about the limit, not eight frames' worth (1 GiB) before their sum was checked."""
    import subprocess
    import sys

    record = zstd_undeclared_frame(128 << 20)
    path = tmp_path / "undeclared"
    with monkeypatch.context() as patch:
        patch.setattr(Compression, "compress", lambda self, data, **options: record)
        with hpcio.open_writer(path, format="mds", columns={"text": "str"}, compression="sample::zstd") as w:
            for i in range(8):
                w.write({"text": str(i)})
    code = f"""
import resource, sys, hpcio
from hpcio.errors import DecompressionLimitError
ds = hpcio.open({str(path)!r}, max_decoded_bytes="256MiB")
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    ds.get_batch(range(8))
except DecompressionLimitError as exc:
    print(exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) >> 10)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("3 zstd frames of one batch decode to more than 268435456 bytes in all, the limit for "
                             "one batch"), out
    assert int(out[1]) < 400  # MiB of peak growth: the limit and one growth step, not 1 GiB


def test_one_value_is_bounded_by_the_option_and_the_variable(bombs, monkeypatch):
    with pytest.raises(DecompressionLimitError, match="more than the limit of 1048576") as info:
        hpcio.open(bombs, max_decoded_bytes="1MiB")[3]
    assert info.value.sample == 3 and info.value.path.endswith("shard.00000.mds")
    monkeypatch.setenv(codecs.MAX_DECODED_ENV, "64KiB")
    with pytest.raises(DecompressionLimitError, match="more than the limit of 65536"):
        hpcio.open(bombs).get_batch([5])
    monkeypatch.setenv(codecs.MAX_DECODED_ENV, "lots")
    with pytest.raises(hpcio.units.ByteSizeError, match=codecs.MAX_DECODED_ENV):
        hpcio.open(bombs)


def test_a_batch_within_the_limit_still_reads(tmp_path):
    path = tmp_path / "ok"
    with hpcio.open_writer(path, format="mds", columns={"text": "str"}, compression="sample::zstd") as w:
        for i in range(8):
            w.write({"text": "x" * 1000 + str(i)})
    ds = hpcio.open(path, max_decoded_bytes=8 * 1010)
    assert [s["text"][-1] for s in ds.get_batch(range(8))] == [str(i) for i in range(8)]
    with pytest.raises(DecompressionLimitError, match="one batch"):
        hpcio.open(path, max_decoded_bytes=7 * 1010).get_batch(range(8))


def _out_of_memory(data, limit):
    raise MemoryError()


def test_out_of_memory_is_not_reported_as_corruption():
    codec = codecs.Codec("test", None, None, _out_of_memory)
    with pytest.raises(OutOfMemoryError, match="out of memory decompressing a test value") as info:
        codec.decompress(b"abc", path="f.mds", offset=8, sample=3)
    assert isinstance(info.value, MemoryError) and not isinstance(info.value, DecodeError)
    assert (info.value.path, info.value.offset, info.value.sample) == ("f.mds", 8, 3)


def test_out_of_memory_in_a_batch_decode_is_typed(bombs, monkeypatch):
    from hpcio._core import _codecs

    for name in ("zstd_decode_many", "blosc2_decode_many"):
        monkeypatch.setattr(_codecs, name, lambda *args, **kwargs: _out_of_memory(None, None))
    with pytest.raises(OutOfMemoryError, match="out of memory decompressing 8") as info:
        hpcio.open(bombs).get_batch(np.arange(8))
    assert info.value.path.endswith("shard.00000.mds")


def npy_bomb(shape: str = "(4398046511104,)") -> bytes:
    """A .npy value whose header declares 4 TiB of uint8, followed by 4 bytes."""
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (63 - 10 - len(header)) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 4


def test_webdataset_npy_declaring_4_tib_is_refused_before_allocating(tmp_path):
    import io
    import tarfile

    (tmp_path / "wds").mkdir()
    with tarfile.open(tmp_path / "wds" / "shard-000000.tar", "w") as tar:
        for name, data in [("000.txt", b"ok"), ("000.npy", npy_bomb())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ds = hpcio.open(tmp_path / "wds")
    with pytest.raises(DecodeError, match=r"declares shape \(4398046511104,\) of uint8") as info:
        assert _peak_bytes(lambda: ds[0]) < 64 << 20
    assert info.value.sample == 0 and info.value.path.endswith("shard-000000.tar")


def test_jinx_npy_declaring_4_tib_is_refused_before_allocating(tmp_path, monkeypatch):
    path = tmp_path / "bomb.jinx"
    with monkeypatch.context() as patch:
        patch.setattr(np, "save", lambda buf, value, allow_pickle=False: buf.write(npy_bomb()))
        with hpcio.open_writer(path, format="jinx") as w:
            w.write({"x": np.zeros(4, np.uint8)})
    sample = hpcio.open(path)[0]
    with pytest.raises(DecodeError, match=r"declares shape \(4398046511104,\) of uint8") as info:
        assert _peak_bytes(lambda: sample["x"]) < 64 << 20
    assert info.value.sample == 0 and info.value.path == str(path)


def test_npy_shapes_whose_product_wraps_int64_are_refused():
    from hpcio.formats._values import load_npy

    with pytest.raises(ValueError, match="declares shape"):
        load_npy(npy_bomb("(4294967296, 4294967296)"))


def _hdf5_declaring(tmp_path, n: int, chunks) -> str:
    """A small hpcio HDF5 file whose layout declares ``n`` samples of a ragged text field,
    its offsets dataset shaped for them but holding only its first chunk, if any."""
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "h5"
    with hpcio.open_writer(path, format="hdf5", hashes=[]) as w:  # no manifest: checked as it opens
        w.write({"text": "small"})
    (name,) = os.listdir(path)
    with h5py.File(path / name, "r+") as f:
        layout = json.loads(f.attrs["hpcio"])
        layout["num_samples"] = n
        f.attrs["hpcio"] = json.dumps(layout)
        del f["text/offsets"]
        off = f["text"].create_dataset("offsets", shape=(n + 1,), dtype=np.uint64, chunks=chunks,
                                       compression="gzip")
        if chunks:
            off[: chunks[0]] = 0
    assert os.path.getsize(path / name) < 64 << 10
    return str(path / name)


def test_hdf5_declaring_2_27_offsets_is_refused_at_open(tmp_path):
    path = _hdf5_declaring(tmp_path, 1 << 27, (1 << 10,))
    with pytest.raises(DecompressionLimitError, match="offsets of 134217728 samples take 1073741832 bytes") as info:
        assert _peak_bytes(lambda: hpcio.open(path)) < 64 << 20
    assert info.value.path == path


def test_hdf5_offsets_missing_chunks_are_refused_before_reading(tmp_path):
    path = _hdf5_declaring(tmp_path, 1 << 24, (1 << 10,))
    with pytest.raises(hpcio.CorruptShardError, match="fill 16385 chunks, the file .* stores 1") as info:
        assert _peak_bytes(lambda: hpcio.open(path)) < 64 << 20
    assert info.value.path == path


def test_mds_counts_are_checked_against_file_sizes_before_shuffling(tmp_path):
    """Two shard entries declaring 2**30 - 8 samples each (2**31 in all), their files a
    few hundred bytes: refused at open, not a 16 GiB permutation in shuffle()."""
    path = tmp_path / "mds"
    with hpcio.open_writer(path, format="mds", columns={"text": "str"}, size_limit=200) as w:
        for i in range(8):
            w.write({"text": "x" * 60 + str(i)})
    with open(path / "index.json") as f:
        index = json.load(f)
    assert len(index["shards"]) >= 2
    for shard in index["shards"][:2]:
        shard["samples"] = (1 << 30) - 8
        shard["raw_data"]["bytes"] = (1 << 32) - 1
    with open(path / "index.json", "w") as f:
        json.dump(index, f)
    with pytest.raises(hpcio.CorruptShardError, match="samples") as info:
        assert _peak_bytes(lambda: hpcio.open(path).shuffle(seed=0)) < 64 << 20
    assert info.value.path == str(path / "index.json")


def test_jinx_sidecar_batch_is_bounded_together(tmp_path):
    path = tmp_path / "big.jinx"
    with hpcio.open_writer(path, format="jinx", compression="zst", binary_threshold=64) as w:
        for i in range(4):
            w.write({"text": np.random.default_rng(i).bytes(50_000).hex()})  # zst.bin in the sidecar
    ds = hpcio.open(path, max_decoded_bytes=250_000)
    assert list(ds.reader.shards[0].raw(0)) == ["text.str.zst.bin"]
    assert ds[3]["text"] == np.random.default_rng(3).bytes(50_000).hex()
    assert [len(v) for v in ds.reader.read_field([0, 1], "text")] == [100_000, 100_000]
    with pytest.raises(DecompressionLimitError, match="one batch") as info:
        ds.reader.read_field([0, 1, 2, 3], "text")
    assert info.value.sample == 2 and info.value.path.endswith(".binx")


@pytest.mark.parametrize("name", codecs.codec_names())
def test_every_codec_refuses_a_truncated_stream(name):
    """A value cut short is a DecodeError, never the part decoded so far (lz4 and framed
    snappy decompressors return that and wait for more)."""
    codec = codecs.get_codec(name)
    data = bytes(range(256)) * 64
    stream = codec.compress(data)
    assert codec.decompress(stream, len(data)) == data
    with pytest.raises(DecodeError):
        codec.decompress(stream[:len(stream) - 3], len(data))
