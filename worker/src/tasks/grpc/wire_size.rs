//! What decoding a protobuf message would cost in memory, estimated from its wire bytes and its
//! descriptor without decoding it: a few bytes on the wire can become a large structure (a
//! packed repeated `int32` is one byte per element on the wire, a whole `Value` once decoded;
//! an empty nested message is two bytes, a map node once decoded), so the bounds of gRPC tasks
//! count this estimate, not the bytes received.
//!
//! Every message counts [`Costs::message`], every field occurrence and every element of a
//! packed field [`Costs::value`], and string and bytes (and unknown length-delimited) fields
//! their length. Bytes that are not valid protobuf stop the walk early: decoding them fails
//! anyway.

use prost_reflect::{Kind, MessageDescriptor};

/// What one decoded element costs, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Costs {
    /// A message (its own allocation and the node of its field map).
    pub message: usize,
    /// One value: a field, an element of a repeated field.
    pub value: usize,
}

/// Deeper nesting is not walked (prost's own decoding stops at 100 too).
const MAX_DEPTH: u32 = 100;

/// The estimate passed `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Over;

/// The estimated memory of `bytes` decoded as `desc`, if it is at most `limit`.
///
/// # Errors
/// [`Over`] as soon as the estimate passes `limit`.
pub fn decoded_size(desc: &MessageDescriptor, bytes: &[u8], costs: Costs, limit: usize) -> Result<usize, Over> {
    let mut walk = Walk { costs, limit, total: 0 };
    let mut buf = bytes;
    match walk.message(Some(desc), &mut buf, None, 0) {
        Ok(()) | Err(Stop::Malformed) => Ok(walk.total),
        Err(Stop::Over) => Err(Over),
    }
}

enum Stop {
    Over,
    Malformed,
}

struct Walk {
    costs: Costs,
    limit: usize,
    total: usize,
}

impl Walk {
    fn add(&mut self, bytes: usize) -> Result<(), Stop> {
        self.total = self.total.saturating_add(bytes);
        if self.total > self.limit {
            return Err(Stop::Over);
        }
        Ok(())
    }

    /// One message from `buf`: to its end, or to the end-group tag of `group`.
    fn message(
        &mut self,
        desc: Option<&MessageDescriptor>,
        buf: &mut &[u8],
        group: Option<u64>,
        depth: u32,
    ) -> Result<(), Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop::Malformed);
        }
        self.add(self.costs.message)?;
        while !buf.is_empty() {
            let key = varint(buf)?;
            let (number, wire) = (key >> 3, key & 7);
            let field = desc.and_then(|d| u32::try_from(number).ok().and_then(|n| d.get_field(n)));
            let kind = field.map(|f| f.kind());
            match wire {
                0 => drop(varint(buf)?),
                1 => drop(take(buf, 8)?),
                5 => drop(take(buf, 4)?),
                2 => {
                    let len = usize::try_from(varint(buf)?).map_err(|_| Stop::Malformed)?;
                    let mut data = take(buf, len)?;
                    match &kind {
                        Some(Kind::Message(m)) => self.message(Some(m), &mut data, None, depth + 1)?,
                        Some(k) if per_element(k).is_some() => {
                            let n = per_element(k).map_or(0, |width| elements(data, width));
                            self.add(n.saturating_mul(self.costs.value))?;
                        }
                        _ => self.add(len)?,
                    }
                }
                3 => {
                    let inner = match &kind {
                        Some(Kind::Message(m)) => Some(m),
                        _ => None,
                    };
                    self.message(inner, buf, Some(number), depth + 1)?;
                }
                4 if group == Some(number) => return Ok(()),
                _ => return Err(Stop::Malformed),
            }
            self.add(self.costs.value)?;
        }
        if group.is_some() {
            return Err(Stop::Malformed);
        }
        Ok(())
    }
}

/// The width of a packed element of `kind`: `Some(0)` for varints; `None` when `kind` is not
/// packable.
fn per_element(kind: &Kind) -> Option<usize> {
    match kind {
        Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64 | Kind::Sint32 | Kind::Sint64 | Kind::Bool => Some(0),
        Kind::Enum(_) => Some(0),
        Kind::Fixed32 | Kind::Sfixed32 | Kind::Float => Some(4),
        Kind::Fixed64 | Kind::Sfixed64 | Kind::Double => Some(8),
        Kind::String | Kind::Bytes | Kind::Message(_) => None,
    }
}

/// How many packed elements `data` holds.
fn elements(data: &[u8], width: usize) -> usize {
    data.len().checked_div(width).unwrap_or_else(|| data.iter().filter(|b| **b < 0x80).count())
}

fn varint(buf: &mut &[u8]) -> Result<u64, Stop> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or(Stop::Malformed)?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(value);
        }
    }
    Err(Stop::Malformed)
}

fn take<'a>(buf: &mut &'a [u8], len: usize) -> Result<&'a [u8], Stop> {
    if buf.len() < len {
        return Err(Stop::Malformed);
    }
    let (data, rest) = buf.split_at(len);
    *buf = rest;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use prost_reflect::ReflectMessage as _;

    const COSTS: Costs = Costs { message: 1000, value: 10 };

    fn descriptor_proto() -> MessageDescriptor {
        prost_types::FileDescriptorProto::default().descriptor()
    }

    #[test]
    fn packed_elements_count_one_value_each() {
        // google.protobuf.SourceCodeInfo.Location.path: packed repeated int32.
        let location = prost_types::source_code_info::Location { path: vec![1; 1000], ..Default::default() };
        let desc = location.descriptor();
        let bytes = location.encode_to_vec();
        assert!(bytes.len() < 1010, "a byte per element on the wire");
        // The message, the field, and its 1000 elements.
        assert_eq!(decoded_size(&desc, &bytes, COSTS, usize::MAX), Ok(1000 + 10 + 1000 * 10));
        assert_eq!(decoded_size(&desc, &bytes, COSTS, 5000), Err(Over));
    }

    #[test]
    fn nested_messages_strings_and_unknown_fields_count() {
        let file = prost_types::FileDescriptorProto {
            name: Some("a.proto".to_owned()),
            message_type: vec![prost_types::DescriptorProto::default(); 3],
            ..Default::default()
        };
        let bytes = file.encode_to_vec();
        // The file, its name (7 bytes) and three empty messages.
        assert_eq!(decoded_size(&descriptor_proto(), &bytes, COSTS, usize::MAX), Ok(1000 + (10 + 7) + 3 * (10 + 1000)));
        // Fields the descriptor lacks count as values and bytes.
        let mut unknown = bytes.clone();
        unknown.extend([0xf8, 0x7f, 1]); // field 2047, varint 1
        unknown.extend([0xf2, 0x7f, 2, b'h', b'i']); // field 2046, 2 bytes
        let more = decoded_size(&descriptor_proto(), &unknown, COSTS, usize::MAX).unwrap();
        assert_eq!(more, 1000 + 17 + 3 * 1010 + 10 + (10 + 2));
        // Thousands of empty messages: two bytes each on the wire, a message each decoded.
        let many = prost_types::FileDescriptorProto {
            message_type: vec![prost_types::DescriptorProto::default(); 10_000],
            ..Default::default()
        };
        let bytes = many.encode_to_vec();
        assert_eq!(bytes.len(), 20_000);
        assert_eq!(decoded_size(&descriptor_proto(), &bytes, COSTS, 1_000_000), Err(Over));
    }

    #[test]
    fn malformed_bytes_stop_the_walk_without_a_verdict() {
        // A length past the end, a wrong end-group, a varint that never ends.
        for bytes in [&[0x22, 0x05, 0x01][..], &[0x0c][..], &[0x08, 0xff, 0xff, 0xff][..]] {
            assert!(decoded_size(&descriptor_proto(), bytes, COSTS, usize::MAX).is_ok(), "{bytes:?}");
        }
    }
}
