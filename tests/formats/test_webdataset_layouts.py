"""WebDataset layouts other writers produce, read as the webdataset library reads them.

Each case builds the tar with ``tarfile`` (or webdataset's own ``TarWriter``), reads it
with ``webdataset.WebDataset`` and with ``hpcio.open(..., decode=False)``, and compares.
"""

from __future__ import annotations

import gzip
import os

import pytest
import webdataset as wds
from test_webdataset import tar_bytes  # tests/formats is on sys.path, as for mds_helpers

import hpcio
from hpcio.errors import CorruptShardError, SchemaError, TruncatedShardError
from hpcio.formats import webdataset as wdsfmt

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(60))


def reference(urls):
    """webdataset's samples without its bookkeeping fields."""
    out = []
    for s in wds.WebDataset([str(u) for u in urls], shardshuffle=False, empty_check=False):
        out.append({k: v for k, v in s.items() if k not in ("__url__", "__local_path__")})
    return out


def ours(path, **options):
    return [dict(s) for s in hpcio.open(path, format="webdataset", decode=False,
                                        include_key=True, **options)]


def samples_tar(first, count):
    return tar_bytes([m for i in range(first, first + count)
                      for m in ((f"{i:06d}.txt", f"text {i}".encode()),
                                (f"{i:06d}.json", f'{{"i": {i}}}'.encode()))])


@pytest.mark.parametrize("suffix", [".tar.gz", ".tgz"])
def test_gzip_shards_in_a_directory(tmp_path, suffix):
    ds = tmp_path / "ds"
    ds.mkdir()
    urls = []
    for k in range(3):
        url = ds / f"shard-{k:06d}{suffix}"
        url.write_bytes(gzip.compress(samples_tar(10 * k, 10)))
        urls.append(url)
    assert wdsfmt.sniff(ds)
    assert ours(ds) == reference(urls)
    cache = tmp_path / "cache"
    assert ours(ds, cache_dir=cache) == reference(urls)
    assert len(os.listdir(cache)) == 3  # kept decompressed for the next reader
    assert ours(ds, cache_dir=cache) == reference(urls)
    assert hpcio.open(ds)[25] == {"txt": "text 25", "json": {"i": 25}}


def test_one_gzip_shard_and_mixed_plain(tmp_path):
    gz = tmp_path / "a.tgz"
    gz.write_bytes(gzip.compress(samples_tar(0, 4)))
    plain = tmp_path / "b.tar"
    plain.write_bytes(samples_tar(4, 4))
    assert ours(gz) == reference([gz])
    assert ours([gz, plain]) == reference([gz, plain])


def test_damaged_gzip_shard_is_located(tmp_path):
    gz = tmp_path / "a.tar.gz"
    data = gzip.compress(samples_tar(0, 50))
    gz.write_bytes(data[: len(data) // 2])
    with pytest.raises(TruncatedShardError, match=r"^gzip stream ends early.*a\.tar\.gz"):
        hpcio.open(gz, format="webdataset")
    gz.write_bytes(data[:10] + bytes(len(data) - 10))
    with pytest.raises(CorruptShardError, match=r"^gzip stream is damaged.*a\.tar\.gz"):
        hpcio.open(gz, format="webdataset")


def test_upper_case_extensions_are_lower_cased(tmp_path):
    path = tmp_path / "upper.tar"
    path.write_bytes(tar_bytes([("k0.JPG", JPEG), ("k0.Caption.TXT", b"a"),
                                ("k1.jpg", JPEG), ("k1.caption.txt", b"b")]))
    assert ours(path) == reference([path])
    decoded = hpcio.open(path, format="webdataset")
    assert decoded[0] == {"jpg": JPEG, "caption": "a"} == {**decoded[1], "caption": "a"}


def test_writer_refuses_fields_that_would_change_case(tmp_path):
    with pytest.raises(SchemaError, match=r"^field 'Caption' has upper-case letters: webdataset "
                                          r"lower-cases member suffixes, so it would read back as "
                                          r"'caption'; rename the field"):
        with hpcio.open_writer(tmp_path / "w", format="webdataset") as w:
            w.write({"Caption": "x"})
    assert not os.path.exists(tmp_path / "w" / "shard-000000.tar")


def test_duplicate_member_is_refused_as_webdataset_does(tmp_path):
    path = tmp_path / "dup.tar"
    path.write_bytes(tar_bytes([("k0.txt", b"a"), ("k1.txt", b"b"), ("k1.TXT", b"c")]))
    with pytest.raises(ValueError, match="duplicate file name"):
        reference([path])
    with pytest.raises(CorruptShardError,
                       match=r"^sample 'k1' has the member 'txt' twice \(.*dup\.tar, byte offset 2048, sample 1\)$"):
        hpcio.open(path, format="webdataset")
    with pytest.raises(CorruptShardError, match=r"duplicate field 'txt' in sample 'k1'"):
        list(wdsfmt.iter_tar(open(path, "rb"), path=str(path)))


def test_meta_members_follow_webdataset(tmp_path):
    path = tmp_path / "meta.tar"
    path.write_bytes(tar_bytes([
        ("__index__", b"skipped: top-level __x__"),
        ("__meta__/info.json", b"skipped: under an __x__ directory"),
        ("__meta__.json", b"{}"),  # a sample with key __meta__ to webdataset
        ("k0.txt", b"a"),
        ("d/__x__", b"kept by webdataset's rules? no suffix: skipped"),
        ("d/__y__.txt", b"a sample in d/"),
        ("k1.txt", b"b"),
    ]))
    assert ours(path) == reference([path])
    assert [s["__key__"] for s in ours(path)] == ["__meta__", "k0", "d/__y__", "k1"]
