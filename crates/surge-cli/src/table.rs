//! Plain-text tables for people: columns padded to their widest cell, numbers right-aligned.

pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table { header: header.iter().map(|s| s.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let numeric = |s: &str| s.chars().next().is_some_and(|c| c.is_ascii_digit()) && !s.contains(':');
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate().take(columns) {
                let pad = widths[i] - cell.chars().count();
                if i > 0 {
                    out.push_str("  ");
                }
                if numeric(cell) {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(cell);
                } else {
                    out.push_str(cell);
                    out.push_str(&" ".repeat(pad));
                }
            }
            out.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.header);
        out.push_str(&line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>()));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }
}

/// Bytes as a short human figure with binary units: 1536 -> "1.5 KiB".
pub fn human_bytes(bytes: u64) -> String {
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

/// Parses sizes such as `4096`, `512K`, `1M`, `1MiB`, `10G`, `1.5GB` (all binary multiples).
/// How sizes are written on the command line (the help of every size option says so).
pub const SIZE_HELP: &str = "bytes, or a number with a unit: K, M, G, T (or KiB, MiB, GiB, TiB) are powers of 1024, \
                             KB, MB, GB, TB powers of 1000";

/// Parses a size as [`SIZE_HELP`] describes it. A lower-case `b` after a unit (`Gb`, `Mib`)
/// names bits, which no size here is in: refused rather than guessed.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("bad size '{text}': expected {SIZE_HELP}"))?;
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
        _ => return Err(format!("bad size unit in '{text}': expected {SIZE_HELP}")),
    };
    let base: f64 = match rest {
        _ if power == 0 => 1.0,
        "" | "i" | "iB" => 1024.0,
        "B" => 1000.0,
        "b" | "ib" => return Err(format!("'{text}' is in bits; sizes are bytes: {SIZE_HELP}")),
        _ => return Err(format!("bad size unit in '{text}': expected {SIZE_HELP}")),
    };
    let bytes = number * base.powi(power);
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size '{text}' is too large"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert!(parse_size("12Q").is_err());
        // 10G, 10g and 10GiB are binary; 10GB decimal; 10Gb (bits) is refused, not guessed.
        assert_eq!(parse_size("10G").unwrap(), 10 << 30);
        assert_eq!(parse_size("10g").unwrap(), 10 << 30);
        assert_eq!(parse_size("10GiB").unwrap(), 10 << 30);
        assert_eq!(parse_size("10GB").unwrap(), 10_000_000_000);
        assert_eq!(parse_size("64KB").unwrap(), 64_000);
        assert_eq!(parse_size("512B").unwrap(), 512);
        assert!(parse_size("10Gb").unwrap_err().contains("bits"));
        assert!(parse_size("20000P").is_err(), "beyond 64 bits");
        assert!(parse_size("G").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn tables_align() {
        let mut t = Table::new(&["name", "size"]);
        t.row(vec!["a".into(), "10".into()]);
        t.row(vec!["long-name".into(), "1000".into()]);
        let text = t.render();
        assert!(text.contains("a            10\n"), "{text}");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
