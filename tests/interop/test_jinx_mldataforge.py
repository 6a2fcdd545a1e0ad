"""JINX interop with mldataforge 0.6.10, both directions, over every writer option.

mldataforge needs Python >= 3.12, so it runs in its own interpreter
(``$HPCIO_INTEROP_PYTHON``, created by ``tools/interop-env.sh``); one subprocess per
module does all of its writes and reads (``jinx_mdf_tool.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

import hpcio
from hpcio.errors import UnsupportedValueError
from hpcio.formats import jinx

pytestmark = pytest.mark.interop

HERE = Path(__file__).resolve().parent
SAMPLES_PY = HERE.parent / "fixtures" / "jinx" / "samples.py"
TOOL = HERE / "jinx_mdf_tool.py"

_spec = importlib.util.spec_from_file_location("jinx_samples", SAMPLES_PY)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)

N = 9
#: hpcio writer options (mldataforge gets the same, with the shard writer's defaults)
CONFIGS = {
    "plain": {},
    "b64": {"encoding": "b64"},
    "bin": {"binary_threshold": 64},
    "bin_b64": {"binary_threshold": 150, "encoding": "b64", "compress_threshold": 10},
    "sharded_plain": {"shard_size": 3000, "binary_threshold": 200, "split": "train"},
    "zst": {"compression": "zst", "index_compression": "zst"},
    "gz": {"compression": "gz", "index_compression": "gz"},
    "bz2": {"compression": "bz2", "index_compression": "bz2"},
    "xz": {"compression": "xz", "index_compression": "xz"},
    "lzma": {"compression": "lzma"},
    "lz4": {"compression": "lz4", "index_compression": "lz4"},
    "br": {"compression": "br", "index_compression": "br", "encoding": "b64"},
    "snappy": {"compression": "snappy", "index_compression": "snappy"},
    "bin_zst": {"compression": "zst", "index_compression": "zst", "binary_threshold": 64,
                "compress_threshold": 128, "compress_ratio": 0.67},
    "sharded_zst": {"compression": "zst", "index_compression": "zst", "binary_threshold": 128,
                    "shard_size": 2500},
    # every byte value and the index in the .binx sidecar, nothing base-encoded
    # (mldataforge's own test suite writes this layout)
    "none_bin": {"encoding": None, "binary_threshold": 0},
}
IDENTICAL = ["plain", "b64", "bin", "bin_b64", "sharded_plain"]
#: sample options per config (a sidecar-only layout cannot hold an empty byte value)
SAMPLE_OPTIONS = {"none_bin": {"min_bytes": 1}}


def _target(name: str) -> str:
    return "ds" if "shard_size" in CONFIGS[name] else "ds.jinx"


def _write_hpcio(directory: Path, name: str, **extra) -> None:
    directory.mkdir(parents=True)
    cwd = os.getcwd()
    os.chdir(directory)  # relative paths, so the shard_prev/next footers compare equal
    try:
        with hpcio.open_writer(_target(name), format="jinx", **CONFIGS[name], **extra) as w:
            for s in S.make_samples(N, **SAMPLE_OPTIONS.get(name, {})):
                w.write(s)
    finally:
        os.chdir(cwd)


def run_mdf(interop: str, jobs: list[dict]) -> list[dict]:
    proc = subprocess.run(
        [interop, str(TOOL)],
        input=json.dumps({"samples_py": str(SAMPLES_PY), "jobs": jobs}),
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def exchange(tmp_path_factory, interop_python):
    base = tmp_path_factory.mktemp("jinx_interop")
    jobs, keys = [], []

    def add(key, job):
        keys.append(key)
        jobs.append(job)

    for name, opts in CONFIGS.items():
        hp, md = base / "hpcio" / name, base / "mdf" / name
        md.mkdir(parents=True)
        _write_hpcio(hp, name)  # with the footer hashes hpcio records by default
        if name in IDENTICAL:
            _write_hpcio(base / "hpcio-no-hashes" / name, name, hashes=[])
        add(("write", name), {"op": "write", "path": _target(name), "cwd": str(md), "options": opts,
                              "n": N, **SAMPLE_OPTIONS.get(name, {})})
        for lazy in (False, True):
            add(("read", name, lazy), {"op": "read", "path": str(hp / _target(name)), "lazy": lazy})
    for kind in S.HAZARDS + S.TYPED_LISTS:
        path = base / "hazard" / f"{kind}.jinx"
        path.parent.mkdir(exist_ok=True)
        add(("hazard_write", kind), {"op": "write", "path": str(path), "hazard": kind})
        add(("hazard_read", kind), {"op": "read", "path": str(path), "lazy": False})
    # mldataforge's own reading of its sidecar-only file (it drops list items' types)
    add(("read_mdf", "none_bin"), {"op": "read", "path": str(base / "mdf" / "none_bin" / "ds.jinx")})
    for kind in S.TYPED_LISTS:  # hpcio's typed lists, read by mldataforge
        path = base / "hazard" / f"hpcio-{kind}.jinx"
        with hpcio.open_writer(path, format="jinx") as w:
            for s in S.hazard_samples(kind):
                w.write(s)
        add(("typed_list_read", kind), {"op": "read", "path": str(path), "lazy": False})
    # hex: hpcio writes it (with a warning); mldataforge cannot read the inline index
    hexfile = base / "hex.jinx"
    with pytest.warns(UserWarning, match="mldataforge cannot read the index"):
        with hpcio.open_writer(hexfile, format="jinx", encoding="hex") as w:
            for s in S.make_samples(3):
                w.write(s)
    add(("read_hex",), {"op": "read", "path": str(hexfile)})
    # lazy join that changes the encoding (mldataforge corrupts this, hpcio re-encodes)
    src = base / "join_src.jinx"
    with hpcio.open_writer(src, format="jinx", encoding="b64", binary_threshold=200,
                           compression="zst", compress_threshold=32) as w:
        for s in S.make_samples(N):
            w.write(s)
    joined = base / "joined.jinx"
    jinx.join([src, src], joined, encoding="a85")
    add(("read_joined",), {"op": "read", "path": str(joined), "lazy": True})
    results = run_mdf(interop_python, jobs)
    return base, dict(zip(keys, results))


def expected(n=N, name=None):
    return [S.to_jsonable(s) for s in S.make_samples(n, **SAMPLE_OPTIONS.get(name, {}))]


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", IDENTICAL)
def test_default_output_adds_only_the_footer_hashes(exchange, name):
    """hpcio's default files are mldataforge's but for the footer's ``binx_hash`` and
    ``hash``, appended last (the footer offset line is the same: it points before them)."""
    base, res = exchange
    hp, md = base / "hpcio" / name, base / "mdf" / name
    assert _files(hp) == _files(md)
    for rel in _files(hp):
        ours, theirs = (hp / rel).read_bytes(), (md / rel).read_bytes()
        if rel.endswith(".binx"):
            assert ours == theirs, rel
            continue
        *our_lines, our_footer, our_offset, _ = ours.split(b"\n")
        *their_lines, their_footer, their_offset, _ = theirs.split(b"\n")
        assert (our_lines, our_offset) == (their_lines, their_offset), rel
        footer = json.loads(our_footer)
        assert footer.pop("hash").startswith("xxh3_64:")
        assert footer.pop("binx_hash", "xxh3_64:").startswith("xxh3_64:")
        assert footer == json.loads(their_footer), rel
    report = jinx.verify(str(hp / _target(name)))
    assert report["ok"] and report["hashes_checked"] == len(_files(hp))  # a hash per .jinx and .binx


@pytest.mark.parametrize("name", IDENTICAL)
def test_uncompressed_output_is_byte_identical(exchange, name):
    """With ``hashes=[]`` hpcio writes mldataforge's bytes exactly."""
    base, res = exchange
    assert res[("write", name)] == {"ok": True}
    hp, md = base / "hpcio-no-hashes" / name, base / "mdf" / name
    hp_files = sorted(str(p.relative_to(hp)) for p in hp.rglob("*") if p.is_file())
    md_files = sorted(str(p.relative_to(md)) for p in md.rglob("*") if p.is_file())
    assert hp_files == md_files
    for rel in hp_files:
        assert (hp / rel).read_bytes() == (md / rel).read_bytes(), rel


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_mldataforge_reads_hpcio(exchange, name, lazy):
    _, res = exchange
    got = res[("read", name, lazy)]
    assert got["ok"], got.get("error")
    assert got["samples"] == expected(name=name)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_hpcio_reads_mldataforge(exchange, name, lazy):
    base, res = exchange
    assert res[("write", name)] == {"ok": True}
    with hpcio.open(base / "mdf" / name / _target(name), format="jinx", lazy=lazy) as ds:
        got = [S.to_jsonable(s) for s in ds]
    if name == "none_bin":
        # mldataforge moves the strings of a list into the sidecar without a type suffix,
        # so they read back as {"offset", "length"} objects, in mldataforge and in hpcio
        theirs = res[("read_mdf", name)]
        assert theirs["ok"] and theirs["samples"] != expected(name=name)
        assert got == theirs["samples"]
        return
    assert got == expected(name=name)


def test_hex_index_is_refused_by_mldataforge_not_misread(exchange):
    base, res = exchange
    assert res[("read_hex",)] == {
        "ok": False, "error": "ValueError: Unsupported encoding 'hex' for index data"
    }
    got = [S.to_jsonable(s) for s in hpcio.open(base / "hex.jinx")]
    assert got == expected(3)


@pytest.mark.parametrize("kind", S.TYPED_LISTS)
def test_typed_lists_mldataforge_misreads_are_refused_by_it(exchange, kind):
    """mldataforge reads back the items of these lists untyped; hpcio stores them under a
    'list' suffix, which mldataforge refuses instead of misreading, and reads them back."""
    base, res = exchange
    assert res[("hazard_write", kind)] == {"ok": True}
    original = [S.to_jsonable(s) for s in S.hazard_samples(kind)]
    back = res[("hazard_read", kind)]
    assert not back["ok"] or back["samples"] != original
    refused = res[("typed_list_read", kind)]
    assert not refused["ok"] and "Unsupported extension 'list' for key 'items.list'" in refused["error"], refused
    ours = base / "hazard" / f"hpcio-{kind}.jinx"
    assert [S.to_jsonable(s) for s in hpcio.open(ours, lazy=False)] == original


@pytest.mark.parametrize("kind", S.HAZARDS)
def test_values_mldataforge_misreads_are_refused(exchange, kind):
    """mldataforge writes these and reads back something else (or fails); hpcio refuses them."""
    base, res = exchange
    assert res[("hazard_write", kind)] == {"ok": True}
    back = res[("hazard_read", kind)]
    original = [S.to_jsonable(s) for s in S.hazard_samples(kind)]
    assert not back["ok"] or back["samples"] != original
    with pytest.raises(UnsupportedValueError):
        with hpcio.open_writer(base / "hazard" / f"hpcio-{kind}.jinx", format="jinx") as w:
            for s in S.hazard_samples(kind):
                w.write(s)
    assert not (base / "hazard" / f"hpcio-{kind}.jinx").exists()


def test_lazy_join_with_encoding_change_is_read_correctly(exchange):
    base, res = exchange
    got = res[("read_joined",)]
    assert got["ok"], got.get("error")
    assert got["samples"] == expected() * 2


def test_sidecar_only_layout_refuses_an_inline_value(tmp_path):
    """mldataforge fails on an empty byte value with encoding=None; hpcio says why."""
    with pytest.raises(UnsupportedValueError, match=r"^a 0-byte value is not above binary_threshold=0, "
                       r"so it would be stored inline, and encoding=None has no text encoding"):
        with hpcio.open_writer(tmp_path / "x.jinx", format="jinx", encoding=None, binary_threshold=0) as w:
            w.write({"b": b""})
    assert not (tmp_path / "x.jinx").exists()


def test_sidecar_only_layout_matches_mldataforge_but_list_strings(exchange):
    """Both put every byte value and the index in the .binx; only mldataforge also moves
    the strings of lists there (losing their type), so the sidecars differ from there."""
    base, res = exchange
    hp, md = base / "hpcio" / "none_bin", base / "mdf" / "none_bin"
    ours, theirs = (hp / "ds.jinx").read_bytes(), (md / "ds.jinx").read_bytes()
    first_list_string = next(i for i, s in enumerate(S.make_samples(N, min_bytes=1)) if s["meta"]["tags"])
    assert ours.split(b"\n")[:first_list_string] == theirs.split(b"\n")[:first_list_string]
    assert b'"tags":["t0"]' in ours and b'"tags":[{"offset"' in theirs
