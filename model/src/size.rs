//! Byte sizes as they appear in job specs: an integer of bytes, or a string with a unit
//! (`"256MiB"`, `"1GiB"`, `"64 KiB"`, `"10MB"`, `"4096"`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number of bytes, read from an integer or a human-readable string, written back as the
/// largest binary unit that divides it exactly (`268435456` is shown as `"256MiB"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

const KIB: u64 = 1 << 10;

/// Units by name (case-insensitive); binary (`KiB`) and decimal (`KB`) ones.
const UNITS: [(&str, u64); 13] = [
    ("b", 1),
    ("kib", KIB),
    ("mib", KIB * KIB),
    ("gib", KIB * KIB * KIB),
    ("tib", KIB * KIB * KIB * KIB),
    ("k", 1000),
    ("kb", 1000),
    ("m", 1_000_000),
    ("mb", 1_000_000),
    ("g", 1_000_000_000),
    ("gb", 1_000_000_000),
    ("t", 1_000_000_000_000),
    ("tb", 1_000_000_000_000),
];

/// Parses `"256MiB"`, `"1 GiB"`, `"10MB"`, `"4096"`; the error says what was expected.
pub fn parse(text: &str) -> Result<u64, String> {
    let hint = || format!("invalid size {text:?}; expected bytes or e.g. \"64KiB\", \"256MiB\", \"1GiB\"");
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() || number.len() > 20 {
        return Err(hint());
    }
    let number: u64 = number.parse().map_err(|_| hint())?;
    let unit = unit.trim().to_ascii_lowercase();
    let factor = if unit.is_empty() {
        1
    } else {
        UNITS.iter().find(|(name, _)| *name == unit).map(|(_, f)| *f).ok_or_else(hint)?
    };
    number.checked_mul(factor).ok_or_else(|| format!("size {text:?} is too large"))
}

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s).map(Self)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let binary = [("TiB", KIB * KIB * KIB * KIB), ("GiB", KIB * KIB * KIB), ("MiB", KIB * KIB), ("KiB", KIB)];
        match binary.iter().find(|(_, unit)| self.0 >= *unit && self.0.is_multiple_of(*unit)) {
            Some((name, unit)) => write!(f, "{}{name}", self.0 / unit),
            None => write!(f, "{}B", self.0),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of bytes or a size such as \"256MiB\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| E::custom(format!("size {v} is negative")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse(v).map(ByteSize).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_plain_bytes() {
        assert_eq!(parse("256MiB"), Ok(256 << 20));
        assert_eq!(parse(" 1 GiB "), Ok(1 << 30));
        assert_eq!(parse("64kib"), Ok(64 << 10));
        assert_eq!(parse("10MB"), Ok(10_000_000));
        assert_eq!(parse("4096"), Ok(4096));
        assert_eq!(parse("7B"), Ok(7));
        for bad in ["", "MiB", "-1MiB", "1.5GiB", "12 parsecs", "99999999999999999999999", "20000000TiB"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn prints_the_largest_exact_unit_and_reads_it_back() {
        for (bytes, text) in
            [(256 << 20, "256MiB"), (3072, "3KiB"), (1536, "1536B"), (1000, "1000B"), (1 << 40, "1TiB"), (0, "0B")]
        {
            assert_eq!(ByteSize(bytes).to_string(), text);
            assert_eq!(text.parse::<ByteSize>(), Ok(ByteSize(bytes)));
        }
        let json: ByteSize = serde_json::from_str("1048576").unwrap();
        assert_eq!(json, ByteSize(1 << 20));
        assert_eq!(serde_json::to_string(&json).unwrap(), "\"1MiB\"");
        assert!(serde_json::from_str::<ByteSize>("-5").is_err());
        assert!(serde_json::from_str::<ByteSize>("1.5").is_err());
        assert!(serde_json::from_str::<ByteSize>("\"lots\"").is_err());
    }
}
