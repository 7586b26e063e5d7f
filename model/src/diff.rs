//! What differs between two specs (as JSON), field by field: what `etcronctl apply` and `edit`
//! print before they write, and what `GET /api/jobs/{job}/history/diff` answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One field that differs between two specs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// Dotted path (`task.command`, `labels.team`, `notify[0].on`); a list of objects compares
    /// element by element, one of plain values as a whole.
    pub path: String,
    /// The value before; `null`/absent when the field is new (or a secret).
    pub old: Option<Value>,
    /// The value after; `null`/absent when the field is gone (or a secret).
    pub new: Option<Value>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render(""))
    }
}

/// A string longer than this (or of several lines) is shown as a diff of its own, not as
/// `old → new` on one line.
const LONG: usize = 60;
/// Most lines of a multi-line value compared line by line (beyond: shown whole, both).
const MAX_DIFF_LINES: usize = 400;

impl Difference {
    /// The difference for people, whole values and nothing cut: `~ path: old → new` on one
    /// line, or, for long and multi-line strings, the old and new value on lines of their own
    /// (`- …`, `+ …`) with a `^` under where a line starts to differ. Each line starts with
    /// `indent`; no newline at the end.
    #[must_use]
    pub fn render(&self, indent: &str) -> String {
        match (&self.old, &self.new) {
            (Some(Value::String(old)), Some(Value::String(new))) if long(old) || long(new) => {
                let mut out = format!("{indent}~ {}:", self.path);
                for line in text_diff(old, new) {
                    out.push('\n');
                    out.push_str(indent);
                    out.push_str("    ");
                    out.push_str(&line);
                }
                out
            }
            (Some(old), Some(new)) => format!("{indent}~ {}: {old} → {new}", self.path),
            (None, Some(new)) => format!("{indent}+ {}: {new}", self.path),
            (Some(old), None) => format!("{indent}- {}: {old}", self.path),
            // A secret: its values are never shown, only that it changed.
            (None, None) => format!("{indent}~ {}: (secret value changed)", self.path),
        }
    }
}

fn long(s: &str) -> bool {
    s.chars().count() > LONG || s.contains('\n')
}

/// Two strings line by line: unchanged lines next to a change as `  line`, removed ones as
/// `- line`, added ones as `+ line`, runs of unchanged lines further away as `…`; a line
/// replaced by one other gets a `^` line under where they start to differ.
fn text_diff(old: &str, new: &str) -> Vec<String> {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.split('\n').collect(), new.split('\n').collect());
    if a.len() > MAX_DIFF_LINES || b.len() > MAX_DIFF_LINES {
        return a.iter().map(|l| format!("- {l}")).chain(b.iter().map(|l| format!("+ {l}"))).collect();
    }
    let ops = line_ops(&a, &b);
    let changed = |op: &Op| !matches!(op, Op::Same(_));
    let near = |i: usize| ops[i.saturating_sub(1)..(i + 2).min(ops.len())].iter().any(changed);
    let mut out = Vec::new();
    let mut skipped = false;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Same(line) if near(i) => out.push(format!("  {line}")),
            Op::Same(_) => {
                if !skipped {
                    out.push("…".to_owned());
                }
                skipped = true;
                continue;
            }
            Op::Gone(line) => out.push(format!("- {line}")),
            Op::Added(line) => {
                out.push(format!("+ {line}"));
                if let Some(before) = replaced(&ops, i) {
                    out.push(caret(before, line));
                }
            }
        }
        skipped = false;
    }
    out
}

/// The one line that the added line at `i` replaces: a single removed line right before it,
/// with no other removed or added line beside them.
fn replaced<'a>(ops: &[Op<'a>], i: usize) -> Option<&'a str> {
    let before = i.checked_sub(1).and_then(|k| ops.get(k));
    let two_before = i.checked_sub(2).and_then(|k| ops.get(k));
    match (two_before, before, ops.get(i + 1)) {
        (Some(Op::Gone(_)), _, _) | (_, _, Some(Op::Added(_))) => None,
        (_, Some(Op::Gone(line)), _) => Some(line),
        _ => None,
    }
}

/// `^` under the characters of `new` that differ from `old` (between their common start and
/// common end), aligned with a `+ ` line.
fn caret(old: &str, new: &str) -> String {
    let (a, b): (Vec<char>, Vec<char>) = (old.chars().collect(), new.chars().collect());
    let start = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let room = a.len().min(b.len()) - start;
    let end = a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count().min(room);
    let width = (b.len() - start - end).max(1);
    format!("  {}{} from character {}", " ".repeat(start), "^".repeat(width), start + 1)
}

enum Op<'a> {
    Same(&'a str),
    Gone(&'a str),
    Added(&'a str),
}

/// The lines of `a` and `b` in order, each kept, removed or added (a longest common
/// subsequence), the removed lines of a change before the added ones.
fn line_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut ops) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push(Op::Same(a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(Op::Gone(a[i]));
            i += 1;
        } else {
            ops.push(Op::Added(b[j]));
            j += 1;
        }
    }
    ops
}

/// The fields that differ from `old` to `new`, objects compared key by key.
#[must_use]
pub fn diff(old: &Value, new: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    diff_at("", old, new, &mut out);
    out
}

fn diff_at(path: &str, old: &Value, new: &Value, out: &mut Vec<Difference>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let sub = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff_at(&sub, x, y, out),
                    (x, y) => out.push(Difference { path: sub, old: x.cloned(), new: y.cloned() }),
                }
            }
        }
        (a, b) if a == b => {}
        // A list of objects (or of lists) element by element (`notify[0].on`); one of plain
        // values as a whole (`on: ["failure"] → ["failure","long_running"]`).
        (Value::Array(a), Value::Array(b)) if a.iter().chain(b).any(|v| v.is_object() || v.is_array()) => {
            for i in 0..a.len().max(b.len()) {
                let sub = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => diff_at(&sub, x, y, out),
                    (x, y) => out.push(Difference { path: sub, old: x.cloned(), new: y.cloned() }),
                }
            }
        }
        (a, b) => out.push(Difference { path: path.to_owned(), old: Some(a.clone()), new: Some(b.clone()) }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn diffs_walk_objects_and_compare_lists_whole() {
        let old = json!({"a": 1, "m": {"x": 1, "y": 2}, "l": [1, 2], "gone": true});
        let new = json!({"a": 1, "m": {"x": 1, "y": 3, "z": 4}, "l": [1, 2, 3]});
        let d: Vec<String> = diff(&old, &new).iter().map(ToString::to_string).collect();
        assert_eq!(d, ["- gone: true", "~ l: [1,2] → [1,2,3]", "~ m.y: 2 → 3", "+ m.z: 4"]);
        assert!(diff(&old, &old).is_empty());
    }

    #[test]
    fn long_values_are_shown_whole_with_where_they_differ() {
        // A command changed at its end: both whole, a caret under the change.
        let old = "pg_dump --format=custom --file=/var/backups/db-nightly.dump production_db_main";
        let new = "pg_dump --format=custom --file=/var/backups/db-nightly.dump production_db_replica";
        let shown = diff(&json!({"task": {"command": old}}), &json!({"task": {"command": new}}))[0].render("  ");
        let at = old.find("main").unwrap();
        let caret = format!("        {}^^^^^^^ from character {}", " ".repeat(at), at + 1);
        assert_eq!(shown, format!("  ~ task.command:\n      - {old}\n      + {new}\n{caret}"));
        // Several lines: only the lines around a change, the rest as `…`.
        let script = |last: &str| format!("set -e\ncd /srv\nmake\nmake test\nmake install\n{last}");
        let shown = diff(&json!({"c": script("echo done")}), &json!({"c": script("echo finished")}))[0].render("");
        assert_eq!(
            shown,
            "~ c:\n    …\n      make install\n    - echo done\n    + echo finished\n           ^^^^^^^^ from character 6"
        );
        // Short values stay on one line, whole.
        assert_eq!(diff(&json!({"t": "5m"}), &json!({"t": "10m"}))[0].to_string(), "~ t: \"5m\" → \"10m\"");
        let long_list = json!([{"name": "oncall", "url": "https://hooks.example.com/services/T000/B000/XXXXXXXX", "on": ["failure"]}]);
        let mut wider = long_list.clone();
        wider[0]["on"] = json!(["failure", "long_running"]);
        let d: Vec<String> =
            diff(&json!({"notify": long_list}), &json!({"notify": wider})).iter().map(ToString::to_string).collect();
        assert_eq!(d, ["~ notify[0].on: [\"failure\"] → [\"failure\",\"long_running\"]"]);
        let grown: Vec<String> = diff(&json!({"l": [{"a": 1}]}), &json!({"l": [{"a": 1}, {"b": 2}]}))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(grown, ["+ l[1]: {\"b\":2}"]);
    }
}
