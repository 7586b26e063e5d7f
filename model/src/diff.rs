//! What differs between two specs (as JSON), field by field: what `etcronctl apply` and `edit`
//! print before they write, and what `GET /api/jobs/{job}/history/diff` answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One field that differs between two specs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// Dotted path (`task.command`, `labels.team`); lists compare as a whole.
    pub path: String,
    /// The value before; `null`/absent when the field is new (or a secret).
    pub old: Option<Value>,
    /// The value after; `null`/absent when the field is gone (or a secret).
    pub new: Option<Value>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Value| clip(&v.to_string(), 60);
        match (&self.old, &self.new) {
            (Some(old), Some(new)) => write!(f, "~ {}: {} → {}", self.path, show(old), show(new)),
            (None, Some(new)) => write!(f, "+ {}: {}", self.path, show(new)),
            (Some(old), None) => write!(f, "- {}: {}", self.path, show(old)),
            // A secret: its values are never shown, only that it changed.
            (None, None) => write!(f, "~ {}: (secret value changed)", self.path),
        }
    }
}

/// At most `max` characters, the last one `…` when cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
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
        let long = diff(&json!({"c": "x".repeat(100)}), &json!({"c": "y"}))[0].to_string();
        assert!(long.starts_with("~ c: \"xxx") && long.contains("… → \"y\""), "{long}");
    }
}
