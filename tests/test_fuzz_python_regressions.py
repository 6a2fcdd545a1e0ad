"""Inputs that broke a Python byte parser under atheris (fuzz/python/regressions/TARGET/),
and the seed corpus (fuzz/python/corpus/TARGET/), replayed through the same targets
(fuzz/python/targets.py): each gives a result or an hpcio error, never another exception
nor an out-of-memory error."""

import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz" / "python"
sys.path.insert(0, str(FUZZ))
import targets  # noqa: E402


def inputs(kind):
    return [pytest.param(target.name, path, id=f"{target.name}/{path.name[:24]}")
            for target in sorted((FUZZ / kind).iterdir()) if target.is_dir()
            for path in sorted(target.iterdir())]


def test_every_target_has_seeds():
    assert {p.name for p in (FUZZ / "corpus").iterdir()} == set(targets.TARGETS)
    assert {p.name for p in (FUZZ / "regressions").iterdir()} <= set(targets.TARGETS)


@pytest.mark.parametrize(("target", "path"), inputs("regressions") + inputs("corpus"))
def test_fuzz_input_gives_a_result_or_an_hpcio_error(target, path):
    targets.check(target, path.read_bytes())


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_seeds_read_without_error(target, monkeypatch):
    """The seeds are real datasets: every one reads, inspects and verifies cleanly."""
    monkeypatch.setattr(targets, "allowing_errors", lambda fn, *args: fn(*args))
    for path in sorted((FUZZ / "corpus" / target).iterdir()):
        targets.TARGETS[target](path.read_bytes())
