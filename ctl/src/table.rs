//! Plain-text tables (a header row, columns aligned with two spaces, no trailing blanks) and
//! the short forms of values they show: durations, lists, maps.

use std::collections::BTreeMap;

use serde_json::Value;

/// Rows of cells under a header.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    #[must_use]
    pub fn new(header: &[&str]) -> Self {
        Self { header: header.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The column widths (in characters) that fit the header and every row.
    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(width(cell));
                }
            }
        }
        widths
    }

    /// The table as text, one line per row, each ending in `\n`.
    #[must_use]
    pub fn render(&self) -> String {
        let widths = self.widths();
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            out.push_str(&line(row, &widths));
            out.push('\n');
        }
        out
    }
}

/// One row padded to `widths`, without trailing blanks.
#[must_use]
pub fn line(cells: &[String], widths: &[usize]) -> String {
    let mut text = String::new();
    for (i, cell) in cells.iter().enumerate() {
        let cell = one_line(cell);
        if i > 0 {
            text.push_str("  ");
        }
        text.push_str(&cell);
        if let Some(w) = widths.get(i) {
            if i + 1 < cells.len() {
                text.push_str(&" ".repeat(w.saturating_sub(width(&cell))));
            }
        }
    }
    text.trim_end().to_owned()
}

/// Characters (not bytes) of a cell.
fn width(s: &str) -> usize {
    one_line(s).chars().count()
}

/// A cell never breaks the row: line breaks and tabs become spaces.
fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// Shortens `s` to at most `max` characters, ending in `…` when cut.
#[must_use]
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A string field of a JSON object, `-` when absent or null.
#[must_use]
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) if s.is_empty() => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `k=v,k=v` of a JSON object (sorted by key), `-` when empty.
#[must_use]
pub fn pairs(v: &Value) -> String {
    let map: BTreeMap<&String, String> = v
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_owned))).collect())
        .unwrap_or_default();
    if map.is_empty() {
        return "-".to_owned();
    }
    map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// A duration in ms the way people read it: `850ms`, `4.2s`, `3m05s`, `2h10m`, `3d4h`.
#[must_use]
pub fn duration_ms(ms: u64) -> String {
    let secs = ms / 1000;
    match ms {
        0..=999 => format!("{ms}ms"),
        1000..=59_999 => format!("{}.{}s", secs, (ms % 1000) / 100),
        60_000..=3_599_999 => format!("{}m{:02}s", secs / 60, secs % 60),
        3_600_000..=86_399_999 => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
        _ => format!("{}d{}h", secs / 86_400, (secs % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_align_under_the_header() {
        let mut t = Table::new(&["NAME", "SCHEDULE", "ENABLED"]);
        t.row(vec!["a".into(), "* * * * *".into(), "true".into()]);
        t.row(vec!["longer-name".into(), "@hourly".into(), "false".into()]);
        assert_eq!(
            t.render(),
            "NAME         SCHEDULE   ENABLED\na            * * * * *  true\nlonger-name  @hourly    false\n"
        );
    }

    #[test]
    fn cells_stay_on_one_line_and_rows_have_no_trailing_blanks() {
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["x\ny".into(), String::new()]);
        assert_eq!(t.render(), "A    B\nx y\n");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
        assert_eq!(line(&["ü".into(), "b".into()], &[3, 1]), "ü    b");
    }

    #[test]
    fn values_in_short_form() {
        assert_eq!(text(&json!(null)), "-");
        assert_eq!(text(&json!("x")), "x");
        assert_eq!(text(&json!(3)), "3");
        assert_eq!(pairs(&json!({"zone": "b", "region": "eu"})), "region=eu,zone=b");
        assert_eq!(pairs(&json!({})), "-");
        assert_eq!(duration_ms(850), "850ms");
        assert_eq!(duration_ms(4_250), "4.2s");
        assert_eq!(duration_ms(185_000), "3m05s");
        assert_eq!(duration_ms(7_800_000), "2h10m");
        assert_eq!(duration_ms(3 * 86_400_000 + 4 * 3_600_000), "3d4h");
    }
}
