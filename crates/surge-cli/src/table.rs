//! Plain-text tables for people: columns padded to their widest cell, numbers right-aligned.
//! Widths follow the cells, so a column's position is not fixed: for reading, not for parsing.

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
    surge_units::format_size(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
