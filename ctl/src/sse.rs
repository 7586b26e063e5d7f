//! A server-sent events parser (the `text/event-stream` format of the WHATWG HTML standard),
//! pure: bytes in, whole events out, whatever the chunk boundaries. Lines end in LF, CRLF or CR
//! (a CRLF split between two chunks is one line end); `:` lines are comments; several `data:`
//! lines of one event are joined with `\n`; a blank line dispatches the event.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field; `message` when the event had none.
    pub event: String,
    pub data: String,
    /// The last `id:` seen on the stream, if any.
    pub id: Option<String>,
}

/// Parser state between chunks.
#[derive(Debug, Default)]
pub struct Parser {
    /// The bytes of a line not yet ended.
    line: Vec<u8>,
    /// The previous chunk ended in CR: a LF starting the next one belongs to that line end.
    after_cr: bool,
    /// Still at the start of the stream (a UTF-8 BOM there is skipped).
    started: bool,
    event: Option<String>,
    data: Option<String>,
    id: Option<String>,
}

impl Parser {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        let mut bytes = chunk;
        if !self.started && !bytes.is_empty() {
            self.started = true;
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(bytes);
        }
        for &b in bytes {
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue;
            }
            match b {
                b'\n' => self.end_line(&mut out),
                b'\r' => {
                    self.end_line(&mut out);
                    self.after_cr = true;
                }
                _ => self.line.push(b),
            }
        }
        out
    }

    /// The stream ended: an event without its blank line is dropped, as the standard says.
    pub fn finish(&mut self) {
        *self = Self { id: self.id.take(), started: true, ..Self::default() };
    }

    fn end_line(&mut self, out: &mut Vec<Event>) {
        let line = String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
        if line.is_empty() {
            let event = self.event.take();
            if let Some(data) = self.data.take() {
                out.push(Event { event: event.unwrap_or_else(|| "message".to_owned()), data, id: self.id.clone() });
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_str(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            // `retry` and unknown fields: nothing to do for a client that does not reconnect.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ev(event: &str, data: &str) -> Event {
        Event { event: event.to_owned(), data: data.to_owned(), id: None }
    }

    /// Feeds `text` split at every possible point (two chunks) and byte by byte; all must agree.
    fn parse_every_way(text: &str) -> Vec<Event> {
        let bytes = text.as_bytes();
        let mut whole = Parser::new();
        let expected = whole.push(bytes);
        for cut in 0..=bytes.len() {
            let mut p = Parser::new();
            let mut got = p.push(&bytes[..cut]);
            got.extend(p.push(&bytes[cut..]));
            assert_eq!(got, expected, "split at {cut} of {text:?}");
        }
        let mut p = Parser::new();
        let got: Vec<Event> = bytes.iter().flat_map(|b| p.push(std::slice::from_ref(b))).collect();
        assert_eq!(got, expected, "byte by byte");
        expected
    }

    #[test]
    fn events_with_names_and_data() {
        let text =
            "event: output\ndata: {\"text\":\"hello\\n\"}\n\nevent: status\ndata: {\"status\":\"succeeded\"}\n\n";
        assert_eq!(
            parse_every_way(text),
            vec![ev("output", "{\"text\":\"hello\\n\"}"), ev("status", "{\"status\":\"succeeded\"}")]
        );
    }

    #[test]
    fn multi_line_data_is_joined_with_newlines() {
        assert_eq!(parse_every_way("data: a\ndata:b\ndata:  c\n\n"), vec![ev("message", "a\nb\n c")]);
        assert_eq!(parse_every_way("data\n\n"), vec![ev("message", "")], "a field without colon");
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let text = ": keepalive\n\n: another\nevent: gap\nretry: 100\nfoo: bar\ndata: {\"skipped_bytes\":5}\n\n";
        assert_eq!(parse_every_way(text), vec![ev("gap", "{\"skipped_bytes\":5}")]);
        assert_eq!(parse_every_way(": only a comment\n\n"), vec![], "no data: nothing dispatched");
        assert_eq!(parse_every_way("event: x\n\ndata: y\n\n"), vec![ev("message", "y")], "type resets");
    }

    #[test]
    fn crlf_and_cr_line_ends_even_split_between_chunks() {
        let expected = vec![ev("output", "1"), ev("output", "2")];
        assert_eq!(parse_every_way("event: output\r\ndata: 1\r\n\r\nevent: output\r\ndata: 2\r\n\r\n"), expected);
        assert_eq!(parse_every_way("event: output\rdata: 1\r\revent: output\rdata: 2\r\r"), expected);
        // A CR ending one chunk and the LF starting the next are one line end, not two (which
        // would dispatch early).
        let mut p = Parser::new();
        assert_eq!(p.push(b"data: a\r"), vec![]);
        assert_eq!(p.push(b"\ndata: b\r\n\r\n"), vec![ev("message", "a\nb")]);
    }

    #[test]
    fn chunks_split_mid_line_and_mid_character() {
        let text = "event: output\ndata: {\"text\":\"gr\u{fc}\u{df}e \u{2713}\"}\n\n";
        let events = parse_every_way(text);
        assert_eq!(events, vec![ev("output", "{\"text\":\"gr\u{fc}\u{df}e \u{2713}\"}")]);
    }

    #[test]
    fn an_unterminated_event_is_not_dispatched_and_ids_stick() {
        let mut p = Parser::new();
        let got = p.push(b"\xEF\xBB\xBFid: 7\ndata: x\n\ndata: partial");
        assert_eq!(got, vec![Event { event: "message".into(), data: "x".into(), id: Some("7".into()) }]);
        p.finish();
        assert_eq!(p.push(b"\n\n"), vec![], "the partial event was dropped at the end");
    }
}
