"""Test support shipped with hpcio: the format conformance suite (needs pytest)."""

from .formats import FormatTests, assert_sample_equal, normalize, replace_bytes, stored_bytes

__all__ = ["FormatTests", "assert_sample_equal", "normalize", "replace_bytes", "stored_bytes"]
