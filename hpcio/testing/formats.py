"""``FormatTests``: the conformance suite every format's tests subclass.

A subclass names the format and supplies samples the format can hold; every test here
then runs against it.  Capabilities a format lacks skip with the reason, never pass
silently::

    class TestMDS(FormatTests):
        format_name = "mds"
        writer_options = {"compression": "sample::zstd"}

        def make_sample(self, i):
            return {"id": i, "text": f"t{i}", "blob": bytes([i % 256]) * i}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np
import pytest

import hpcio
from hpcio.errors import CapabilityError, HpcioError, IndexOutOfRangeError
from hpcio.formats._checksums import MANIFEST_NAME
from hpcio.formats.reports import InspectReport, VerifyProblem, VerifyReport
from hpcio.registry import check_format, format_hook

from ..distributed.order import GlobalOrder

__all__ = ["FormatTests", "normalize", "assert_sample_equal", "replace_bytes", "stored_bytes"]


class _UserCodeError(RuntimeError):
    """Stands for an error of the caller's code inside a ``with open_writer(...)`` block."""


def normalize(value):
    """A value in a comparable canonical form (bytes-likes become bytes, arrays lists)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    return value


def assert_sample_equal(got: Mapping, expected: Mapping, where: str = "") -> None:
    """Every field of ``expected`` is in ``got`` with an equal value and type class."""
    assert set(got.keys()) == set(expected.keys()), (
        f"{where}: fields {sorted(got.keys())} != {sorted(expected.keys())}"
    )
    for key, exp in expected.items():
        val = got[key]
        assert normalize(val) == normalize(exp), f"{where}: field {key!r}: {val!r} != {exp!r}"
        if isinstance(exp, (bytes, bytearray)):
            # bytes-like is fine (zero-copy views), but never a decoded object
            assert isinstance(val, (bytes, bytearray, memoryview)), f"{where}: {key!r}"
        elif isinstance(exp, str):
            assert isinstance(val, str), f"{where}: field {key!r} is {type(val).__name__}"


def replace_bytes(path, old: bytes, new: bytes) -> list[str]:
    """Replace ``old`` by ``new`` (same length: the structure stays intact) in every file
    of the dataset at ``path``; returns the files changed.  Corrupts one value."""
    assert len(old) == len(new)
    paths = [os.fspath(path)] if os.path.isfile(path) else sorted(
        os.path.join(root, n) for root, _dirs, names in os.walk(path) for n in names)
    changed = []
    for file in paths:
        with open(file, "rb") as f:
            data = f.read()
        if old in data:
            with open(file, "wb") as f:
                f.write(data.replace(old, new))
            changed.append(file)
    assert changed, f"{old!r} is in no file of {path}"
    return changed


def stored_bytes(path) -> int:
    """Bytes of the data files of the dataset at ``path`` (a file, or a directory tree;
    hash manifests, which inspect does not count, left out)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, n)) for root, _dirs, names in os.walk(path) for n in names
               if n != MANIFEST_NAME)


class FormatTests:
    """Conformance tests; subclass and set ``format_name`` (and maybe the hooks)."""

    format_name: str = ""
    writer_options: dict = {}
    reader_options: dict = {}
    num_samples: int = 57

    # The exact reports of a small dataset (REPORT_SAMPLES samples of make_report_sample,
    # written with report_options at report_path); the tests skip while they are None.
    # Strings of expected_problem may name the corrupted file as {file}, the dataset as {path}.
    REPORT_SAMPLES = 5
    report_path: str = "ds"
    report_options: dict = {}
    expected_inspect: dict | None = None      # shards, fields and details of inspect()
    expected_hashes_checked: int = 0
    corruption: tuple[bytes, bytes] | None = None  # (value bytes, same-length damage)
    expected_problem: dict | None = None      # the error verify reports then for the value
    expected_hash_problem: dict | None = None  # the one it reports first for the file's hash

    # --- hooks a subclass may override -------------------------------------------------
    def make_sample(self, i: int) -> dict:
        """Sample ``i`` of the test dataset: every value type the format supports."""
        rng = np.random.default_rng(i)
        return {
            "id": i,
            "text": f"sample {i} " + "é✓" * (i % 5),
            "blob": rng.integers(0, 256, size=int(rng.integers(0, 300)), dtype=np.uint8).tobytes(),
        }

    def dataset_path(self, tmp_path) -> str:
        """Where the writer writes (a directory or a file, as the format prefers)."""
        return os.path.join(tmp_path, "ds")

    def shard_files(self, path: str) -> list[str]:
        """The data files of a written dataset (for the corruption tests)."""
        if os.path.isfile(path):
            return [path]
        files = []
        for root, _dirs, names in os.walk(path):
            files += [os.path.join(root, n) for n in names if not n.endswith(".json")]
        return sorted(files)

    def make_report_sample(self, i: int) -> dict:
        """Sample ``i`` of the small dataset of the report tests."""
        return {"id": i, "text": f"t{i}", "meta": {"i": i}}

    def report_stored_bytes(self, path: str) -> int:
        """What inspect() says the small dataset stores."""
        return stored_bytes(path)

    @property
    def capabilities(self) -> hpcio.Capabilities:
        return hpcio.get_format(self.format_name).CAPABILITIES

    # --- helpers -----------------------------------------------------------------------
    def write(self, tmp_path, samples, **options) -> str:
        path = self.dataset_path(tmp_path)
        opts = {**self.writer_options, **options}
        with hpcio.open_writer(path, format=self.format_name, **opts) as w:
            for s in samples:
                w.write(s)
        return path

    def open(self, path, **options):
        return hpcio.open(path, format=self.format_name, **{**self.reader_options, **options})

    @pytest.fixture
    def samples(self):
        return [self.make_sample(i) for i in range(self.num_samples)]

    @pytest.fixture
    def written(self, tmp_path, samples):
        return self.write(tmp_path, samples)

    def require(self, capability: str):
        if not getattr(self.capabilities, capability):
            pytest.skip(f"format {self.format_name!r} lacks capability {capability!r}")

    def hook(self, name: str):
        """The format's optional hook ``name`` (its signature checked); skips without it."""
        try:
            return format_hook(hpcio.get_format(self.format_name), name)
        except CapabilityError:
            pytest.skip(f"format {self.format_name!r} has no {name}")

    def truncate_largest_shard(self, path: str) -> str:
        """Cut the largest data file of the dataset at ``path`` in half; returns it."""
        files = self.shard_files(path)
        assert files, "the writer produced no data files"
        victim = max(files, key=os.path.getsize)
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) // 2)
        return victim

    # --- the suite ---------------------------------------------------------------------
    def test_registered(self):
        module = hpcio.get_format(self.format_name)
        assert module.NAME == self.format_name
        for name in ("CAPABILITIES", "sniff", "Reader", "Writer"):
            assert hasattr(module, name)

    def test_contract(self):
        assert check_format(hpcio.get_format(self.format_name)) == []

    def test_inspect_report(self, written, samples):
        report = self.hook("inspect")(written)
        assert set(InspectReport.__annotations__) <= set(report)  # extra keys are the format's own
        assert (report["format"], report["samples"]) == (self.format_name, len(samples))
        assert report["shards"] >= 1
        assert set(report["fields"]) == set(samples[0])
        assert report["stored_bytes"] is None or report["stored_bytes"] > 0
        json.dumps(report)

    def test_verify_valid(self, written, samples):
        report = self.hook("verify")(written)
        assert set(VerifyReport.__annotations__) <= set(report)
        assert report["format"] == self.format_name
        assert report["ok"] is True, report["errors"]
        assert report["samples"] == report["checked"] == len(samples)
        assert report["errors"] == []
        json.dumps(report)

    def test_verify_truncated_shard(self, written):
        verify = self.hook("verify")
        self.truncate_largest_shard(written)
        report = verify(written, max_errors=3)
        assert report["ok"] is False
        assert 1 <= len(report["errors"]) <= 3
        first = report["errors"][0]
        assert set(first) == set(VerifyProblem.__annotations__)
        assert first["path"] is not None, first
        assert os.path.abspath(first["path"]).startswith(os.path.abspath(written)), first
        json.dumps(report)

    def write_report_dataset(self, tmp_path) -> str:
        path = os.path.join(tmp_path, self.report_path)
        with hpcio.open_writer(path, format=self.format_name, **self.report_options) as w:
            for i in range(self.REPORT_SAMPLES):
                w.write(self.make_report_sample(i))
        return path

    def test_report_values(self, tmp_path):
        if self.expected_inspect is None:
            pytest.skip("the subclass gives no expected_inspect")
        path = self.write_report_dataset(tmp_path)
        n = self.REPORT_SAMPLES
        assert self.hook("inspect")(path) == {
            "format": self.format_name, "path": path, "samples": n,
            "stored_bytes": self.report_stored_bytes(path), **self.expected_inspect}
        assert self.hook("verify")(path) == {
            "format": self.format_name, "path": path, "ok": True, "samples": n, "checked": n,
            "shards": self.expected_inspect["shards"],
            "hashes_checked": self.expected_hashes_checked, "errors": []}

    def test_verify_locates_a_corrupt_value(self, tmp_path):
        if self.corruption is None:
            pytest.skip("the subclass gives no corruption")
        path = self.write_report_dataset(tmp_path)
        [bad] = replace_bytes(path, *self.corruption)
        report = self.hook("verify")(path)
        assert (report["ok"], report["samples"], report["checked"]) == (
            False, self.REPORT_SAMPLES, self.REPORT_SAMPLES - 1)
        expected = [self.expected_problem] if self.expected_hash_problem is None else [
            self.expected_hash_problem, self.expected_problem]
        assert report["errors"] == [{
            key: value.replace("{file}", bad).replace("{path}", path) if isinstance(value, str) else value
            for key, value in problem.items()} for problem in expected]

    def test_sniff(self, written):
        assert hpcio.sniff_format(written).NAME == self.format_name
        assert len(hpcio.open(written, **self.reader_options)) == self.num_samples

    def test_round_trip_iteration(self, written, samples):
        with self.open(written) as ds:
            assert len(ds) == len(samples)
            got = list(ds)
        assert len(got) == len(samples)
        for i, (g, e) in enumerate(zip(got, samples)):
            assert_sample_equal(g, e, f"sample {i}")

    def test_random_access(self, written, samples):
        self.require("random_access")
        ds = self.open(written)
        for i in [0, len(samples) - 1, 7, 3, 7]:
            assert_sample_equal(ds[i], samples[i], f"ds[{i}]")
        assert_sample_equal(ds[-1], samples[-1], "ds[-1]")
        assert_sample_equal(ds[-len(samples)], samples[0], "ds[-n]")

    def test_out_of_range(self, written):
        self.require("random_access")
        ds = self.open(written)
        n = len(ds)
        for bad in (n, -n - 1, 10**12):
            with pytest.raises(IndexOutOfRangeError, match=f"index {bad} out of range"):
                ds[bad]

    def test_batch_equals_single(self, written, samples):
        self.require("random_access")
        ds = self.open(written)
        idx = np.random.default_rng(0).integers(0, len(samples), size=40)
        batch = ds.get_batch(idx)
        for j, i in enumerate(idx):
            assert_sample_equal(batch[j], samples[i], f"batch[{j}] = sample {i}")

    def test_columns_equal_samples(self, written, samples):
        self.require("random_access")
        ds = self.open(written)
        idx = np.random.default_rng(1).integers(0, len(samples), size=40)
        columns = ds.get_columns(idx)
        assert set(columns) == set(samples[0])
        for field, column in columns.items():
            values = column.to_pylist() if hasattr(column, "to_pylist") else list(column)
            assert len(values) == len(idx), field
            for j, i in enumerate(idx):
                assert normalize(values[j]) == normalize(samples[i][field]), (
                    f"column {field!r}[{j}] = sample {i}: {values[j]!r} != {samples[i][field]!r}")

    def test_shuffle_order(self, written, samples):
        self.require("random_access")
        ds = self.open(written)
        perm = GlobalOrder(len(samples), seed=42).tolist()
        got = [s["id"] for s in ds.shuffle(seed=42)]
        assert got == [samples[i]["id"] for i in perm]

    def test_sort_and_select(self, written, samples):
        self.require("random_access")
        ds = self.open(written)
        by_text = ds.sort("text").select(["id"])
        expected = sorted(range(len(samples)), key=lambda i: samples[i]["text"])
        assert [s["id"] for s in by_text] == [samples[i]["id"] for i in expected]
        assert all(set(s.keys()) == {"id"} for s in by_text)

    def test_split_equal_parts(self, written, samples):
        ds = self.open(written)
        parts = [ds.split(r, 4) for r in range(4)]
        assert {len(p) for p in parts} == {len(samples) // 4}
        ids = [s["id"] for p in parts for s in p]
        assert len(ids) == len(set(ids)) == 4 * (len(samples) // 4)

    def test_empty_dataset(self, tmp_path):
        path = self.write(tmp_path, [])
        ds = self.open(path)
        assert len(ds) == 0
        assert list(ds) == []

    def test_huge_sample(self, tmp_path):
        big = self.make_sample(1)
        payload = np.random.default_rng(1).integers(0, 256, 24 << 20, dtype=np.uint8).tobytes()
        big["blob"] = payload
        path = self.write(tmp_path, [self.make_sample(0), big, self.make_sample(2)])
        ds = self.open(path)
        got = list(ds)[1]["blob"]
        assert bytes(got) == payload

    def test_unicode_keys(self, tmp_path):
        sample = {**self.make_sample(0), "légende_文字": "ünïcødé ✓"}
        path = self.write(tmp_path, [sample])
        assert_sample_equal(list(self.open(path))[0], sample, "unicode key")

    def test_truncated_shard(self, written):
        self.truncate_largest_shard(written)
        with pytest.raises(HpcioError):
            ds = self.open(written)
            for _ in ds:
                pass

    def test_failed_write_leaves_nothing(self, tmp_path):
        path = self.dataset_path(tmp_path)
        with pytest.raises(_UserCodeError, match="boom"):
            with hpcio.open_writer(path, format=self.format_name, **self.writer_options) as w:
                w.write(self.make_sample(0))
                raise _UserCodeError("boom")
        leftovers = os.listdir(path) if os.path.isdir(path) else [path] * os.path.exists(path)
        assert leftovers == [], f"a failed write left {leftovers}"
