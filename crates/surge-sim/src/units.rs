//! Human-readable quantities in configuration files: sizes ("128 KiB", "669.41 MB"),
//! rates ("25 GB/s", "2100 MiB/s") and durations ("45 us", "40 s").
//!
//! Sizes and rates follow Surge's one rule (`surge_units`, docs/units.md): `KiB`, `MiB` and a
//! bare `K`, `M` are powers of 1024, `kB`, `MB` powers of 1000, so a config can quote a vendor
//! sheet or a paper exactly as printed. A bare number is taken as bytes, bytes/s or seconds.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;

fn time_multiplier(unit: &str) -> Option<f64> {
    Some(match unit {
        "" | "s" | "sec" => 1.0,
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "min" => 60.0,
        "h" => 3600.0,
        _ => return None,
    })
}

fn split_number(text: &str) -> Result<(f64, &str), String> {
    let text = text.trim();
    let end = text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+')).unwrap_or(text.len());
    // "1e3" is a number but "1 EB" is not a unit we know; a trailing 'e'/'E' would be caught below.
    let (num, unit) = text.split_at(end);
    let value: f64 = num.trim().parse().map_err(|_| format!("'{text}' does not start with a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("'{text}' must be a finite, non-negative quantity"));
    }
    Ok((value, unit.trim()))
}

/// Parses a size such as "1 GiB" into bytes.
pub fn parse_size(text: &str) -> Result<f64, String> {
    surge_units::parse_size(text).map(|bytes| bytes as f64)
}

/// Parses a rate such as "25 GB/s" into bytes per second.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    surge_units::parse_rate(text).map(|rate| rate as f64)
}

/// Parses a duration such as "45 us" into seconds.
pub fn parse_time(text: &str) -> Result<f64, String> {
    let (value, unit) = split_number(text)?;
    let mult = time_multiplier(unit).ok_or_else(|| format!("unknown time unit '{unit}' in '{text}' (use ns, us, ms, s, min, h)"))?;
    Ok(value * mult)
}

macro_rules! quantity {
    ($name:ident, $parse:ident, $what:literal) => {
        #[doc = concat!("A ", $what, " read from a config file (number or string with unit).")]
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
        pub struct $name(pub f64);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        write!(f, "a {} (a number or a string with a unit)", $what)
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$name, E> {
                        if v.is_finite() && v >= 0.0 {
                            Ok($name(v))
                        } else {
                            Err(E::custom(format!("{} must be non-negative", $what)))
                        }
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$name, E> {
                        self.visit_f64(v as f64)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$name, E> {
                        self.visit_f64(v as f64)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        $parse(v).map($name).map_err(E::custom)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

quantity!(Bytes, parse_size, "size");
quantity!(Rate, parse_rate, "rate");
quantity!(Seconds, parse_time, "duration");

/// Formats a byte count with a binary prefix for tables.
pub fn fmt_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2} {}", UNITS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("1 GiB").unwrap(), 1073741824.0);
        assert_eq!(parse_size("669.41 MB").unwrap(), 669.41e6);
        assert_eq!(parse_rate("2100 MiB/s").unwrap(), 2100.0 * 1048576.0);
        assert_eq!(parse_rate("25GB/s").unwrap(), 25e9);
        assert!((parse_time("45 us").unwrap() - 45e-6).abs() < 1e-15);
        assert_eq!(parse_time("2 min").unwrap(), 120.0);
    }

    #[test]
    fn rejects_bad_quantities() {
        assert!(parse_size("12 furlongs").unwrap_err().contains("bad size unit"));
        assert_eq!(parse_size("1G").unwrap(), 1073741824.0, "one rule: a bare G is binary");
        assert!(parse_rate("25 GB").unwrap_err().contains("/s"));
        assert!(parse_time("fast").is_err());
        assert!(parse_size("-3 MB").is_err());
    }
}
