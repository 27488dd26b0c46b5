//! # surge-units — sizes and rates as people write them
//!
//! One rule for every size Surge reads from a person (`#DW capacity=`, the command line, the
//! manager's configuration, the simulator's configurations) and one way of printing them. The
//! rule is stated in docs/units.md, whose table of cases this crate's tests read (and so do
//! the Python package's, for `surge.units`): `K`, `M`, `G`, `T`, `P` alone or with `i`/`iB` are
//! powers of 1024, with `B` powers of 1000; bits (`Gb`) are refused, never guessed.
//!
//! Parsing is exact: the number is read as a decimal fraction and multiplied in integers, so
//! `669.41 MB` is 669,410,000 bytes, not a float's neighbour; a fraction of a byte is dropped.

/// How sizes are written (for the help of every size option and for error messages).
pub const HELP: &str = "bytes, or a number with a unit: K, M, G, T, P (or KiB, MiB, GiB, TiB, PiB) are powers of 1024, \
                        KB, MB, GB, TB, PB powers of 1000";

/// Parses a size as [`HELP`] and docs/units.md describe it, into bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let (numerator, denominator) = decimal(number).ok_or_else(|| format!("bad size '{text}': expected {HELP}"))?;
    let multiplier = unit_multiplier(unit.trim()).ok_or_else(|| {
        if unit.trim().len() > 1 && unit.trim().ends_with(['b']) {
            format!("'{text}' is in bits; sizes are bytes: {HELP}")
        } else {
            format!("bad size unit in '{text}': expected {HELP}")
        }
    })?;
    let bytes = numerator.checked_mul(multiplier).map(|b| b / denominator);
    bytes.and_then(|b| u64::try_from(b).ok()).ok_or_else(|| format!("size '{text}' is too large"))
}

/// Parses a rate: a size followed by `/s` (`25 GB/s`, `2100 MiB/s`), into bytes per second.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let size = text.trim().strip_suffix("/s").ok_or_else(|| format!("rate '{text}' must end in /s, e.g. '25 GB/s'"))?;
    parse_size(size).map_err(|e| format!("rate '{text}': {e}"))
}

/// A size for people to read: `512 B`, `1.5 GiB` (powers of 1024, one decimal).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `digits[.digits]` as numerator / denominator (a power of ten); None when not a number.
fn decimal(number: &str) -> Option<(u128, u128)> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') || fraction.len() > 18 {
        return None;
    }
    let digits = |s: &str| -> Option<u128> {
        if s.is_empty() {
            Some(0)
        } else {
            s.parse().ok()
        }
    };
    let denominator = 10u128.pow(fraction.len() as u32);
    let numerator = digits(whole)?.checked_mul(denominator)?.checked_add(digits(fraction)?)?;
    Some((numerator, denominator))
}

/// The bytes one of `unit` stands for; None for what is no unit of bytes (bits among them).
fn unit_multiplier(unit: &str) -> Option<u128> {
    let mut chars = unit.chars();
    let Some(prefix) = chars.next() else { return Some(1) };
    let rest = chars.as_str();
    let power = match prefix.to_ascii_uppercase() {
        'B' if rest.is_empty() => return Some(1),
        'K' => 1,
        'M' => 2,
        'G' => 3,
        'T' => 4,
        'P' => 5,
        _ => return None,
    };
    let base: u128 = match rest {
        "" | "i" | "iB" => 1024,
        "B" => 1000,
        _ => return None,
    };
    Some(base.pow(power))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every case of docs/units.md's table, which the Python package checks too.
    #[test]
    fn the_documented_cases_hold() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/units.md")).expect("docs/units.md");
        let table = doc.split("<!-- cases:").nth(1).expect("the cases marker");
        let block = table.split("```text\n").nth(1).and_then(|b| b.split("```").next()).expect("the cases block");
        let mut checked = 0;
        for line in block.lines() {
            let (text, expected) = line.trim_end().rsplit_once(char::is_whitespace).unwrap_or(("", line.trim()));
            let got = parse_size(text.trim());
            match expected {
                "error" => assert!(got.is_err(), "'{text}' should be refused, got {got:?}"),
                bytes => assert_eq!(got, Ok(bytes.parse::<u64>().unwrap()), "'{text}'"),
            }
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} cases read from docs/units.md");
    }

    #[test]
    fn errors_say_why() {
        assert!(parse_size("10Gb").unwrap_err().contains("bits"));
        assert!(parse_size("12 furlongs").unwrap_err().contains("bad size unit"));
        assert!(parse_size("20000P").unwrap_err().contains("too large"));
    }

    #[test]
    fn rates_are_sizes_per_second() {
        assert_eq!(parse_rate("2100 MiB/s"), Ok(2100 << 20));
        assert_eq!(parse_rate("25GB/s"), Ok(25_000_000_000));
        assert!(parse_rate("25 GB").unwrap_err().contains("/s"));
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
    }
}
