"""Fixtures of the converter tests."""

from __future__ import annotations

import pytest
from convert_helpers import linesfmt, write_sources


@pytest.fixture(scope="module", autouse=True)
def lines_format_registered():
    """The test format is known while a test module runs, and forgotten afterwards so
    tests elsewhere see only the shipped formats."""
    from hpcio import registry

    registry.register_format(linesfmt)
    yield
    registry._registered.pop(linesfmt.NAME, None)


@pytest.fixture
def sources(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    return write_sources(d)
