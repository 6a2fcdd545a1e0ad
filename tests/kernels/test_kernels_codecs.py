"""zstd and blosc2 kernels against the zstandard and blosc2 Python packages."""

import re
import struct

import blosc2
import numpy as np
import pytest
import zstandard

from hpcio._core import _codecs
from hpcio.errors import DecodeError, DecompressionLimitError, TruncatedShardError

SEEDS = range(4)
HOSTILE_SIZE = 2**40


def sample_values(seed, n=40):
    """Compressible values of varied sizes, empty ones included."""
    rng = np.random.default_rng(seed)
    words = [b"token", b"shard", b"{\"text\": ", b"\n", b"\x00\x01"]
    return [b"".join(words[i] for i in rng.integers(0, len(words), size=int(rng.integers(0, 3000))))
            for _ in range(n)]


def hostile_zstd_frame(declared=HOSTILE_SIZE):
    """A frame header declaring ``declared`` bytes, followed by one tiny raw block."""
    magic = struct.pack("<I", 0xFD2FB528)
    descriptor = bytes([0xC0])  # 8-byte content size, not single-segment
    window = bytes([0x58])
    block = bytes([0x19, 0x00, 0x00]) + b"abc"  # last raw block of 3 bytes
    return magic + descriptor + window + struct.pack("<Q", declared) + block


def concat(frames):
    starts = np.cumsum([0] + [len(f) for f in frames[:-1]]).astype(np.uint64)
    ends = starts + np.array([len(f) for f in frames], dtype=np.uint64)
    return b"".join(frames), starts, ends


def split(data, pos):
    return [bytes(data[pos[j]:pos[j + 1]]) for j in range(len(pos) - 1)]


# ---- zstd -------------------------------------------------------------------------------

@pytest.mark.parametrize("content_size", [True, False])
@pytest.mark.parametrize("seed", SEEDS)
def test_zstd_round_trip_against_zstandard(seed, content_size):
    for value in sample_values(seed, 10):
        ours = _codecs.zstd_compress(value, level=3, content_size=content_size)
        params = zstandard.get_frame_parameters(ours)
        assert params.content_size == (len(value) if content_size else zstandard.CONTENTSIZE_UNKNOWN)
        assert zstandard.ZstdDecompressor().decompressobj().decompress(ours) == value
        theirs = zstandard.ZstdCompressor(write_content_size=content_size).compress(value)
        assert _codecs.zstd_decompress(theirs) == value


def test_zstd_empty_and_one_byte_values():
    for value in (b"", b"x"):
        for cs in (True, False):
            assert _codecs.zstd_decompress(_codecs.zstd_compress(value, content_size=cs)) == value


@pytest.mark.parametrize("nthreads", [1, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_zstd_decode_many_mixed_frames(seed, nthreads):
    values = sample_values(seed)
    # Alternate frames with and without the size (JINX frames lack it).
    frames = [zstandard.ZstdCompressor(write_content_size=j % 2 == 0).compress(v)
              for j, v in enumerate(values)]
    src, starts, ends = concat(frames)
    data, pos = _codecs.zstd_decode_many(src, starts, ends, nthreads=nthreads)
    assert split(data, pos) == values
    known = [zstandard.ZstdCompressor().compress(v) for v in values]
    src, starts, ends = concat(known)
    data, pos = _codecs.zstd_decode_many(src, starts, ends, nthreads=nthreads)
    assert split(data, pos) == values


def test_zstd_decode_many_threads_equal_single_and_reorder():
    values = sample_values(7, 200)
    frames = [_codecs.zstd_compress(v, content_size=False) for v in values]
    src, starts, ends = concat(frames)
    order = np.random.default_rng(0).permutation(len(values))
    single = _codecs.zstd_decode_many(src, starts[order], ends[order], nthreads=1)
    multi = _codecs.zstd_decode_many(src, starts[order], ends[order], nthreads=4)
    assert single[0] == multi[0] and single[1].tolist() == multi[1].tolist()
    assert split(*single) == [values[i] for i in order]
    data, pos = _codecs.zstd_decode_many(src, [], [], nthreads=4)
    assert data == bytearray() and pos.tolist() == [0]


def test_zstd_hostile_declared_size_is_refused_before_allocation():
    frame = hostile_zstd_frame()
    with pytest.raises(DecompressionLimitError) as info:
        _codecs.zstd_decompress(frame, path="v.jinx", offset=100, sample=5)
    assert str(info.value) == ("zstd frame declares 1099511627776 decompressed bytes, more "
                               "than the limit of 1073741824 (v.jinx, byte offset 100, sample 5)")
    good = _codecs.zstd_compress(b"ok")
    src, starts, ends = concat([good, frame])
    with pytest.raises(DecompressionLimitError) as info:
        _codecs.zstd_decode_many(src, starts, ends, nthreads=2, path="v.jinx", sample_base=10)
    assert str(info.value) == ("zstd frame declares 1099511627776 decompressed bytes, more "
                               f"than the limit of 1073741824 (v.jinx, byte offset {len(good)}, "
                               "sample 11)")
    assert isinstance(info.value, DecodeError)


def test_zstd_limit_without_declared_size_stops_while_streaming():
    value = b"a" * 100_000
    frame = _codecs.zstd_compress(value, content_size=False)
    assert _codecs.zstd_decompress(frame, limit=100_000) == value
    with pytest.raises(DecompressionLimitError,
                       match=r"^zstd frame decodes to more than the limit of 99999 bytes "
                             r"\(f, sample 2\)$"):
        _codecs.zstd_decompress(frame, limit=99_999, path="f", sample=2)
    src, starts, ends = concat([_codecs.zstd_compress(b"x", content_size=False), frame])
    with pytest.raises(DecompressionLimitError,
                       match=re.escape(f"limit of 1000 bytes (byte offset {starts[1]}, sample 1)")):
        _codecs.zstd_decode_many(src, starts, ends, limit=1000, nthreads=2)
    assert _codecs.zstd_decompress(frame, limit=None) == value
    # With a declared size the same limit is checked from the header.
    with pytest.raises(DecompressionLimitError, match="declares 100000 decompressed bytes"):
        _codecs.zstd_decompress(_codecs.zstd_compress(value), limit=1000)


@pytest.mark.parametrize("data, message", [
    (b"", "empty input is not a zstd frame"),
    (b"garbage!", "not a zstd frame (header bytes 67 61 72 62)"),
    (b"\x28\xb5\x2f\xfd\xc0", "zstd frame header is truncated or invalid (5 bytes)"),
])
def test_zstd_garbage_has_typed_errors(data, message):
    with pytest.raises(DecodeError) as info:
        _codecs.zstd_decompress(data, path="x.jinx", offset=10, sample=3)
    assert str(info.value) == f"{message} (x.jinx, byte offset 10, sample 3)"


def test_zstd_truncated_and_trailing_bytes():
    value = bytes(range(256)) * 40
    with_size = zstandard.ZstdCompressor(write_content_size=True).compress(value)
    without = zstandard.ZstdCompressor(write_content_size=False).compress(value)
    with pytest.raises(DecodeError, match=r"^zstd frame does not decode: Src size is incorrect \(p\)$"):
        _codecs.zstd_decompress(with_size[:-3], path="p")
    with pytest.raises(DecodeError,
                       match=rf"^zstd frame truncated: input ends after {len(without) - 3} bytes "
                             rf"\(p, byte offset {len(without) - 3}\)$"):
        _codecs.zstd_decompress(without[:-3], path="p")
    with pytest.raises(DecodeError, match="Unknown frame descriptor"):
        _codecs.zstd_decompress(without + b"xx")
    # Concatenated frames without sizes decode as one stream, like zstd -d.
    assert _codecs.zstd_decompress(without + without) == value * 2


def test_zstd_decode_many_range_errors():
    frame = _codecs.zstd_compress(b"abc")
    with pytest.raises(TruncatedShardError,
                       match=re.escape("frame range passes the end of the data (s, byte offset 0, "
                                       "sample 4)")):
        _codecs.zstd_decode_many(frame, [0], [len(frame) + 1], path="s", sample_base=4)
    with pytest.raises(DecodeError, match=re.escape("(byte offset 3, sample 1)")):
        _codecs.zstd_decode_many(frame + b"bad" + frame, [0, 3], [len(frame), 6])


# ---- blosc2 -----------------------------------------------------------------------------

@pytest.mark.parametrize("codec", ["blosclz", "lz4", "lz4hc", "zlib", "zstd"])
@pytest.mark.parametrize("shuffle", [0, 1, 2])
def test_blosc2_round_trip_against_blosc2(codec, shuffle):
    rng = np.random.default_rng(shuffle)
    value = rng.integers(0, 1000, size=5000, dtype=np.int32).tobytes()
    ours = _codecs.blosc2_compress(value, codec=codec, clevel=5, typesize=4, shuffle=shuffle)
    assert blosc2.decompress2(ours) == value
    filters = [blosc2.Filter.NOFILTER, blosc2.Filter.SHUFFLE, blosc2.Filter.BITSHUFFLE][shuffle]
    theirs = blosc2.compress2(value, codec=getattr(blosc2.Codec, codec.upper()), typesize=4,
                              filters=[filters])
    assert _codecs.blosc2_decompress(theirs) == value


@pytest.mark.parametrize("nthreads", [1, 4])
def test_blosc2_decode_many(nthreads):
    values = sample_values(3, 60)
    chunks = [blosc2.compress2(v) for v in values]
    src, starts, ends = concat(chunks)
    data, pos = _codecs.blosc2_decode_many(src, starts, ends, nthreads=nthreads)
    assert split(data, pos) == values


def test_blosc2_limit_and_garbage():
    chunk = _codecs.blosc2_compress(b"z" * 10_000)
    with pytest.raises(DecompressionLimitError,
                       match=re.escape("blosc2 chunk declares 10000 decompressed bytes, more than "
                                       "the limit of 9999 (c.b2, byte offset 7, sample 1)")):
        _codecs.blosc2_decompress(chunk, limit=9999, path="c.b2", offset=7, sample=1)
    with pytest.raises(DecodeError,
                       match=re.escape("3 bytes are too short for a blosc2 chunk header (16 bytes) "
                                       "(c.b2)")):
        _codecs.blosc2_decompress(b"abc", path="c.b2")
    with pytest.raises(DecodeError, match=re.escape(f"blosc2 chunk truncated: header promises "
                                                    f"{len(chunk)} bytes, {len(chunk) - 1} present")):
        _codecs.blosc2_decompress(chunk[:-1])
    with pytest.raises(DecodeError):
        _codecs.blosc2_decompress(np.random.default_rng(0).bytes(64))
    src, starts, ends = concat([chunk, b"\xff" * 40])
    with pytest.raises(DecodeError, match=re.escape(f"(s, byte offset {len(chunk)}, sample 1)")):
        _codecs.blosc2_decode_many(src, starts, ends, path="s", nthreads=2)


def test_blosc2_bad_arguments():
    with pytest.raises(ValueError, match=r"^unknown blosc2 codec 'snappy' \(blosclz, lz4, lz4hc, "
                                         r"zlib, zstd\)$"):
        _codecs.blosc2_compress(b"abc", codec="snappy")
    with pytest.raises(ValueError, match=r"^shuffle must be 0 \(none\), 1 \(byte\) or 2 \(bit\), got 3$"):
        _codecs.blosc2_compress(b"abc", shuffle=3)


# ---- build description ------------------------------------------------------------------

def test_build_info_describes_the_build():
    info = _codecs.build_info()
    assert set(info) == {"kernels", "compiler", "cflags", "simd", "zstd", "blosc2", "debug",
                         "sanitize"}
    for kernel in ("bisect", "offset_ranges", "gather", "pread_records", "scan_lines",
                   "zstd_decode_known", "zstd_decode_stream", "blosc2_decode_known"):
        assert kernel in info["kernels"]
    assert info["blosc2"] == blosc2.blosclib_version.split()[0]
    assert re.fullmatch(r"\d+\.\d+\.\d+", info["zstd"])
    assert info["compiler"] and isinstance(info["simd"], list)
    assert isinstance(info["debug"], bool) and isinstance(info["sanitize"], bool)


# ---- corrupted input never crashes -------------------------------------------------------

@pytest.mark.parametrize("codec", ["zstd", "blosc2"])
def test_mutated_frames_raise_typed_errors_or_decode(codec):
    rng = np.random.default_rng(99)
    value = b"".join(sample_values(5, 8))
    if codec == "zstd":
        frames = [_codecs.zstd_compress(value, content_size=cs) for cs in (True, False)]
        decode = _codecs.zstd_decompress
    else:
        frames = [_codecs.blosc2_compress(value, codec=c) for c in ("zstd", "lz4", "blosclz")]
        decode = _codecs.blosc2_decompress
    outcomes = set()
    for _ in range(300):
        frame = bytearray(frames[int(rng.integers(0, len(frames)))])
        for pos in rng.integers(0, len(frame), size=int(rng.integers(1, 4))):
            frame[pos] = int(rng.integers(0, 256))
        cut = len(frame) if rng.random() < 0.7 else int(rng.integers(0, len(frame)))
        try:
            out = decode(bytes(frame[:cut]), limit=10 * len(value))
        except DecodeError:
            outcomes.add("error")
        else:
            assert isinstance(out, bytes) and len(out) <= 10 * len(value)
            outcomes.add("decoded")
    assert "error" in outcomes
