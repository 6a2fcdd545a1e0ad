"""Byte sizes: the one parser and the one formatter every option and variable uses.

Prefixes follow SI and IEC, as ``dd``, ``df -H`` and the Lustre and Slurm docs do:
``k``/``kB`` is 1000, ``M``/``MB`` 10**6, ``G`` 10**9, ``T`` 10**12, ``P`` 10**15; ``KiB``,
``MiB``, ``GiB``, ``TiB``, ``PiB`` (or ``Ki``, ``Mi``, ...) are powers of 1024.  Case does
not matter and a trailing ``B`` is optional.  The one exception is MDS ``size_limit``,
which keeps mosaicml-streaming's reading of ``"64mb"`` as 64 MiB
(``decimal_base=1024``) so a limit copied from a streaming script writes the same shards.

>>> parse_bytes("256MB"), parse_bytes("1GiB"), parse_bytes("4096"), parse_bytes(512)
(256000000, 1073741824, 4096, 512)
>>> parse_bytes("1.5k"), parse_bytes("64mb", decimal_base=1024)
(1500, 67108864)
>>> format_bytes(1_500_000_000), format_bytes(512), format_bytes(None)
('1.50 GB', '512 B', '-')
"""

from __future__ import annotations

import re

from .errors import ByteSizeError

__all__ = ["ByteSizeError", "parse_bytes", "format_bytes"]

_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kmgtp]?)(i?)b?\s*", re.IGNORECASE)
_POWERS = "kmgtp"


def parse_bytes(value, *, what: str = "byte size", decimal_base: int = 1000) -> int:
    """The number of bytes ``value`` (an int or a string such as ``"256MB"``) stands for.

    ``what`` names the option or environment variable in the error message.  Negative and
    fractional byte counts are refused; ``bool`` is not a size.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ByteSizeError(f"{what}: expected a byte size such as 4096, 256MB or 1GiB, got {value!r}")
    if isinstance(value, (int, float)):
        number, factor = value, 1
    else:
        m = _SIZE.fullmatch(value)
        if not m:
            raise ByteSizeError(f"{what}: not a byte size: {value!r} (e.g. 4096, 256MB, 1GiB; "
                                f"k/M/G/T/P are powers of 1000, Ki/Mi/Gi/Ti/Pi of 1024)")
        digits, prefix, binary = m.groups()
        power = _POWERS.find(prefix.lower()) + 1 if prefix else 0
        number, factor = float(digits), (1024 if binary else decimal_base) ** power
    size = number * factor
    if size < 0 or size != int(size):
        raise ByteSizeError(f"{what}: expected a whole, non-negative number of bytes, got {value!r}")
    return int(size)


def format_bytes(n: float | None) -> str:
    """``n`` bytes with an SI prefix and two decimals (``'1.50 GB'``); ``'-'`` for None."""
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} PB"
