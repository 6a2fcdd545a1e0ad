"""Tests that need an environment this machine may lack (Slurm, Open MPI, the interop
Python): skipped where it is missing, failed where CI says it must be there."""

from __future__ import annotations

import os

__all__ = ["missing"]


def missing(requirement: str, reason: str):
    """Skip the calling test for ``reason``, or fail it when ``HPCIO_REQUIRE_<requirement>=1``
    (set by the make target that installs that environment), so CI never reports a test it
    could not run as passed."""
    import pytest

    variable = f"HPCIO_REQUIRE_{requirement}"
    if os.environ.get(variable) == "1":
        pytest.fail(f"{variable}=1 but {reason}", pytrace=False)
    pytest.skip(reason)
