"""surge.units against the table of docs/units.md (the one size rule the Rust side tests too)."""

import re
from pathlib import Path

import pytest

from surge.units import MAX_SIZE, format_size, parse_rate, parse_size

UNITS_MD = Path(__file__).resolve().parent / ".." / ".." / "docs" / "units.md"


def table_rows() -> list[tuple[str, int | None]]:
    """The rows of the ```text block after the `<!-- cases: ... -->` marker: (text, bytes),
    bytes None where the row says `error`."""
    doc = UNITS_MD.read_text()
    marker = doc.index("<!-- cases:")
    block = re.search(r"```text\n(.*?)```", doc[marker:], re.DOTALL)
    assert block, f"no ```text block after the cases marker in {UNITS_MD}"
    rows = []
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        parts = line.rsplit(maxsplit=1)
        text = parts[0].strip() if len(parts) == 2 else ""
        expected = parts[-1]
        rows.append((text, None if expected == "error" else int(expected)))
    return rows


ROWS = table_rows()


def test_the_table_is_read_whole():
    # A reader that finds no rows (or few) must not pass by checking nothing.
    assert len(ROWS) >= 20, ROWS
    assert ("669.41 MB", 669410000) in ROWS and ("", None) in ROWS


@pytest.mark.parametrize("text,expected", ROWS, ids=[repr(t) for t, _ in ROWS])
def test_every_row_of_the_table(text, expected):
    if expected is None:
        with pytest.raises(ValueError, match="cannot read a size"):
            parse_size(text)
    else:
        value = parse_size(text)
        assert type(value) is int and value == expected


@pytest.mark.parametrize("text,expected", [(t, b) for t, b in ROWS if b is not None])
def test_a_rate_is_a_size_per_second(text, expected):
    assert parse_rate(f"{text}/s") == float(expected)


def test_rates():
    assert parse_rate("25 GB/s") == 25e9
    assert parse_rate("2100 MiB/s") == 2100 * 2**20
    assert parse_rate("2G/s") == 2 * 2**30
    for bad in ("25 GB", "25 Gb/s", "/s", "25 GB/S", ""):
        with pytest.raises(ValueError, match="rate"):
            parse_rate(bad)


def test_errors_say_why():
    with pytest.raises(ValueError, match="bits"):
        parse_size("10Gb")
    with pytest.raises(ValueError, match="exponent"):
        parse_size("1e3")
    with pytest.raises(ValueError, match="2\\^64"):
        parse_size("20000P")
    with pytest.raises(ValueError, match="empty"):
        parse_size("   ")
    assert parse_size("16383P") <= MAX_SIZE


def test_exact_decimal_arithmetic():
    # 0.1 + 0.2 style float error would give 669409999 or 1.1 * 10^9 = 1100000000.0000002.
    assert parse_size("669.41MB") == 669_410_000
    assert parse_size("1.1GB") == 1_100_000_000
    assert parse_size("0.3KB") == 300
    assert parse_size("1.9") == 1
    assert parse_size("0.1K") == 102                  # 102.4 rounded down


def test_format_size_in_binary_units():
    assert format_size(512) == "512 B"
    assert format_size(0) == "0 B"
    assert format_size(1024) == "1 KiB"
    assert format_size(3 * 2**29) == "1.5 GiB"
    assert format_size(10 * 2**30) == "10 GiB"
    assert format_size(2**20 - 1) == "1 MiB"          # 1023.999 KiB rounds into the next unit
    for n in (512, 1536, 3 * 2**29, 10 * 2**30, 5 * 2**50):
        assert parse_size(format_size(n)) == n
    with pytest.raises(ValueError):
        format_size(-1)
