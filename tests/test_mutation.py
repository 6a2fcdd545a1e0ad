"""The mutation suite (hpcio.testing.mutation): no damaged dataset crashes or hangs a
reader, and ``verify`` catches every silent corruption the default integrity data covers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcio.testing import mutation

TOOL = Path(__file__).resolve().parents[1] / "tools" / "mutation_suite.py"


def run_suite(tmp_path, *args) -> list[dict]:
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(TOOL), "--json", str(out), *args], capture_output=True, text=True,
                          timeout=3600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "total" in proc.stdout
    return json.loads(out.read_text())


def check(results: list[dict]) -> None:
    assert {r["case"]["format"] for r in results} == set(mutation.FORMATS)
    bad = [r for r in results if r["outcome"] in ("crash", "hang") or r["verify"] in ("crash", "hang")]
    assert not bad, bad
    missed = [r for r in results if r["outcome"] == "silent" and r["verify"] != "caught"
              and mutation.covered(mutation.Case(**r["case"]))]
    assert not missed, missed


def test_small_mutation_run(tmp_path):
    check(run_suite(tmp_path, "--truncations", "2", "--flips", "3", "--rewrites", "2", "--seed", "1"))


@pytest.mark.slow
def test_large_mutation_run(tmp_path):
    check(run_suite(tmp_path, "--truncations", "20", "--flips", "30", "--rewrites", "20", "--seed", "7"))


def test_cases_are_seeded_and_cover_every_kind(tmp_path):
    mutation.write_datasets(str(tmp_path), {"mds": mutation.FORMATS["mds"]})
    files = set(os.listdir(tmp_path / "mds" / "data"))
    n = len(files)
    cases = mutation.make_cases(str(tmp_path), "mds", truncations=n, flips=4, rewrites=n, seed=3)
    assert cases == mutation.make_cases(str(tmp_path), "mds", truncations=n, flips=4, rewrites=n, seed=3)
    assert {c.kind for c in cases} == {"truncate", "flip", "number", "u32"}
    assert {c.file for c in cases if c.kind == "truncate"} == files
