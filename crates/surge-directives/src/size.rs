//! Sizes as users write them on command lines and in `#DW capacity=` values.

/// How sizes are written on the command line (the help of every size option says so).
pub const HELP: &str = "bytes, or a number with a unit: K, M, G, T (or KiB, MiB, GiB, TiB) are powers of 1024, \
                             KB, MB, GB, TB powers of 1000";

/// Parses a size as [`HELP`] describes it. A lower-case `b` after a unit (`Gb`, `Mib`)
/// names bits, which no size here is in: refused rather than guessed.
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("bad size '{text}': expected {HELP}"))?;
    let unit = unit.trim();
    let (prefix, rest) = unit.split_at(unit.chars().next().map_or(0, char::len_utf8));
    let power = match prefix.to_ascii_uppercase().as_str() {
        "" => 0,
        "B" if rest.is_empty() => 0,
        "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        "P" => 5,
        _ => return Err(format!("bad size unit in '{text}': expected {HELP}")),
    };
    let base: f64 = match rest {
        _ if power == 0 => 1.0,
        "" | "i" | "iB" => 1024.0,
        "B" => 1000.0,
        "b" | "ib" => return Err(format!("'{text}' is in bits; sizes are bytes: {HELP}")),
        _ => return Err(format!("bad size unit in '{text}': expected {HELP}")),
    };
    let bytes = number * base.powi(power);
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size '{text}' is too large"));
    }
    Ok(bytes as u64)
}

/// A size for people to read: `512 B`, `1.5 GiB` (powers of 1024, one decimal).
pub fn format(bytes: u64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse("4096").unwrap(), 4096);
        assert_eq!(parse("1M").unwrap(), 1 << 20);
        assert_eq!(parse("1.5GiB").unwrap(), 3 << 29);
        assert!(parse("12Q").is_err());
        // 10G, 10g and 10GiB are binary; 10GB decimal; 10Gb (bits) is refused, not guessed.
        assert_eq!(parse("10G").unwrap(), 10 << 30);
        assert_eq!(parse("10g").unwrap(), 10 << 30);
        assert_eq!(parse("10GiB").unwrap(), 10 << 30);
        assert_eq!(parse("10GB").unwrap(), 10_000_000_000);
        assert_eq!(parse("64KB").unwrap(), 64_000);
        assert_eq!(parse("512B").unwrap(), 512);
        assert!(parse("10Gb").unwrap_err().contains("bits"));
        assert!(parse("20000P").is_err(), "beyond 64 bits");
        assert!(parse("G").is_err());
        assert!(parse("").is_err());
    }
}
