"""Sizes and rates as people write them, by the one rule of docs/units.md.

* a bare number is bytes (``4096``); a fraction is allowed and rounded down to whole bytes;
* ``K``, ``M``, ``G``, ``T``, ``P`` alone, or followed by ``i`` or ``iB``, are powers of 1024
  (``10G`` = ``10GiB`` = 10 x 2^30), as in Slurm and DataWarp directives;
* the same letters followed by ``B`` are powers of 1000 (``10GB`` = 10^10); ``kB`` = ``KB``;
* the prefix letter may be either case, but a lower-case ``b`` after it names bits
  (``10Gb``, ``10Mib``) and is refused, as is anything else (``12Q``, ``G``, ``1e3``, ``-1G``);
* a space between number and unit is allowed (``669.41 MB``);
* a rate is a size followed by ``/s`` (``25 GB/s``, ``2100 MiB/s``).

The arithmetic is exact (``669.41 MB`` is 669,410,000 bytes, not a float's neighbour of it),
and a size must fit in 64 bits (at most 2^64 - 1 bytes), as Surge's Rust side stores it.
Sizes are printed in binary units (:func:`format_size`). The Rust side parses with the
``surge-units`` crate; both test themselves against the table in docs/units.md.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["parse_size", "parse_rate", "format_size", "MAX_SIZE"]

#: The largest size there is: what fits in 64 bits.
MAX_SIZE = 2**64 - 1

_PREFIXES = "KMGTP"
_NUMBER = re.compile(r"(\d+(?:\.\d+)?|\.\d+)[ \t]*(.*)", re.DOTALL)
_EXAMPLES = "e.g. 4096, 64KB, 1.5GiB, 10G (= 10GiB), 669.41 MB"


def _multiplier(unit: str) -> int | None:
    """Bytes per ``unit`` (the text after the number), None when it is not a unit of the rule."""
    if unit in ("", "B"):
        return 1
    prefix, suffix = unit[:1], unit[1:]
    if not prefix.isalpha() or prefix.upper() not in _PREFIXES:
        return None
    power = _PREFIXES.index(prefix.upper()) + 1
    if suffix in ("", "i", "iB"):
        return 1024**power
    if suffix == "B":
        return 1000**power
    return None


def _exact(text: str, what: str = "size") -> Fraction:
    """``text`` in bytes, exactly (a fraction is kept)."""
    if not isinstance(text, str):
        raise TypeError(f"a {what} is text, not {type(text).__name__}")
    stripped = text.strip()
    match = _NUMBER.fullmatch(stripped)
    if not match:
        if not stripped:
            raise ValueError(f"cannot read a {what} from an empty text ({_EXAMPLES})")
        raise ValueError(f"cannot read a {what} from {text!r}: it must start with a number "
                         f"(no sign, no exponent; {_EXAMPLES})")
    number, unit = match.groups()
    multiplier = _multiplier(unit)
    if multiplier is None:
        if re.fullmatch(r"[eE][-+]?\d+.*", unit):
            why = "an exponent is not read; write the digits or use a unit (1e3 -> 1000 or 1KB)"
        elif unit.endswith("b"):
            why = f"a lower-case 'b' names bits ({unit!r}); write B for bytes"
        else:
            why = f"{unit!r} is not a unit (B; K, M, G, T, P alone or with i/iB: powers of 1024; " \
                  "with B: powers of 1000)"
        raise ValueError(f"cannot read a {what} from {text!r}: {why}")
    value = Fraction(number) * multiplier
    if value > MAX_SIZE:
        raise ValueError(f"cannot read a {what} from {text!r}: more than 2^64 - 1 bytes")
    return value


def parse_size(text: str) -> int:
    """``text`` (e.g. ``"10G"``, ``"669.41 MB"``) -> bytes, a fraction rounded down.

    Raises ValueError, saying why, for a text the rule does not read."""
    return int(_exact(text))        # int() of a non-negative Fraction rounds down


def parse_rate(text: str) -> float:
    """``text`` (e.g. ``"25 GB/s"``, ``"2100 MiB/s"``) -> bytes per second.

    Raises ValueError, saying why, for a text that is not a size followed by ``/s``."""
    if not isinstance(text, str):
        raise TypeError(f"a rate is text, not {type(text).__name__}")
    stripped = text.strip()
    if not stripped.endswith("/s"):
        raise ValueError(f"cannot read a rate from {text!r}: a rate is a size followed by /s "
                         "(e.g. 25 GB/s, 2100 MiB/s, 2G/s)")
    # The size before /s follows the size rule, whole bytes included.
    return float(int(_exact(stripped[:-2], "rate")))


_BINARY = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]      # the units parse_size reads


def format_size(n: int | float) -> str:
    """Bytes in binary units for people: ``512 B``, ``1.5 GiB``, ``10 GiB``, ``1.23 TiB``
    (two decimals below 10, one below 100, none above; in the units :func:`parse_size` reads)."""
    value = Fraction(n)
    if value < 0:
        raise ValueError(f"a size is not negative: {n!r}")
    power = 0
    while power + 1 < len(_BINARY) and value >= 1024 ** (power + 1):
        power += 1
    if power == 0:
        return f"{int(value)} B"
    scaled = float(value / 1024**power)
    decimals = 2 if scaled < 10 else 1 if scaled < 100 else 0
    text = f"{scaled:.{decimals}f}"
    if decimals:
        text = text.rstrip("0").rstrip(".")
    if text == "1024" and power + 1 < len(_BINARY):      # rounded up into the next unit
        power, text = power + 1, "1"
    return f"{text} {_BINARY[power]}"
