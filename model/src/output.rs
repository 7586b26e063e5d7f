//! Bounded task output: keeps the first and the last bytes of a stream and counts what was cut.

use std::collections::VecDeque;

/// Default bound of captured output.
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;

/// Keeps up to `limit / 2` bytes from the start and `limit - limit / 2` from the end.
#[derive(Debug, Clone)]
pub struct BoundedOutput {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_limit: usize,
    tail_limit: usize,
    total: u64,
}

impl BoundedOutput {
    #[must_use]
    pub fn new(limit: usize) -> Self {
        let head_limit = limit / 2;
        Self { head: Vec::new(), tail: VecDeque::new(), head_limit, tail_limit: limit - head_limit, total: 0 }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_limit - self.head.len();
        if room > 0 {
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if self.tail_limit == 0 {
            return;
        }
        if bytes.len() >= self.tail_limit {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_limit..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_limit);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Bytes seen in total.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.total
    }

    #[must_use]
    pub fn truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// Head, a marker saying how much was cut (if anything), then tail; lossy UTF-8.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let kept = (self.head.len() + self.tail.len()) as u64;
        if self.total > kept {
            out.push_str(&format!("\n[... {} bytes omitted ...]\n", self.total - kept));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

/// A part of the output stream, read from some offset on: bytes, or bytes the bound cut out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Bytes(Vec<u8>),
    /// This many bytes were produced here but are no longer kept.
    Gap(u64),
}

impl BoundedOutput {
    /// What was produced from stream offset `from` on (offsets count every byte ever pushed),
    /// as kept bytes and gaps, and the offset to read from next (`total()`). A follower that
    /// read up to `from` calls this to catch up; what the bound dropped in between is a gap.
    #[must_use]
    pub fn read_from(&self, from: u64) -> (Vec<Piece>, u64) {
        let mut pieces = Vec::new();
        let head_len = self.head.len() as u64;
        // The head holds offsets [0, head_len), the tail [tail_start, total); between them,
        // when the tail overflowed, lies what was cut.
        let tail_start = self.total - self.tail.len() as u64;
        let mut at = from.min(self.total);
        if at < head_len {
            pieces.push(Piece::Bytes(self.head[usize::try_from(at).unwrap_or(usize::MAX)..].to_vec()));
            at = head_len;
        }
        if at < tail_start {
            pieces.push(Piece::Gap(tail_start - at));
            at = tail_start;
        }
        if at < self.total {
            let skip = usize::try_from(at - tail_start).unwrap_or(usize::MAX);
            pieces.push(Piece::Bytes(self.tail.iter().skip(skip).copied().collect()));
        }
        (pieces, self.total)
    }
}

/// What a record's output (as [`BoundedOutput::render`] wrote it) holds from stream offset `from`
/// on: the pieces a follower that read up to `from` live has not seen. Untruncated, the output is
/// the stream itself; truncated, it is the head, the marker telling how many bytes were cut, and
/// the tail, which maps back to stream offsets through the marker's count.
#[must_use]
pub fn rendered_from(rendered: &str, truncated: bool, from: u64) -> Vec<Piece> {
    let rest = |text: &str, at: u64| {
        let start = char_ceil(text, usize::try_from(at).unwrap_or(usize::MAX));
        (start < text.len()).then(|| Piece::Bytes(text.as_bytes()[start..].to_vec()))
    };
    let cut = truncated.then(|| omitted_marker(rendered)).flatten();
    let Some((head_end, omitted, tail_start)) = cut else {
        return rest(rendered, from).into_iter().collect();
    };
    let (head, tail) = (&rendered[..head_end], &rendered[tail_start..]);
    let head_len = head.len() as u64;
    // The count is read from text a task printed too: saturating, a made-up marker cannot
    // overflow it.
    let tail_offset = head_len.saturating_add(omitted);
    let mut pieces: Vec<Piece> = rest(head, from).into_iter().collect();
    if from < tail_offset {
        pieces.push(Piece::Gap(tail_offset - from.max(head_len)));
    }
    pieces.extend(rest(tail, from.saturating_sub(tail_offset)));
    pieces
}

/// Where the marker of [`BoundedOutput::render`] is in `rendered`: the end of the head, the
/// bytes it says were cut, and the start of the tail.
fn omitted_marker(rendered: &str) -> Option<(usize, u64, usize)> {
    let start = rendered.find("\n[... ")?;
    let after = &rendered[start + "\n[... ".len()..];
    let (count, after) = after.split_once(" bytes omitted ...]\n")?;
    let omitted = count.parse().ok()?;
    Some((start, omitted, rendered.len() - after.len()))
}

/// Turns a byte stream cut into arbitrary chunks into text: a character split between two
/// chunks is held back until its end arrives; invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Chunks {
    pending: Vec<u8>,
}

impl Utf8Chunks {
    /// The text `bytes` complete (with what was held back before).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        // An incomplete character at the end: wait for the rest of it.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Drops what was held back (a gap follows, or the stream ended): U+FFFD if anything was.
    pub fn flush(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary: its
/// length.
#[must_use]
pub fn char_floor(text: &str, max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// The first character boundary of `text` at or after byte `min` (its length past the end).
#[must_use]
pub fn char_ceil(text: &str, min: usize) -> usize {
    if min >= text.len() {
        return text.len();
    }
    let mut start = min;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    start
}

/// `text` cut to at most `max` bytes (on a character boundary), marked with `…` when cut.
#[must_use]
pub fn clipped(text: &str, max: usize) -> String {
    let end = char_floor(text, max);
    if end == text.len() {
        return text.to_owned();
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_read_from_an_offset_gives_what_the_follower_has_not_seen() {
        let whole = "first\nsecond\n";
        assert_eq!(rendered_from(whole, false, 6), vec![Piece::Bytes(b"second\n".to_vec())]);
        assert_eq!(rendered_from(whole, false, 0), vec![Piece::Bytes(whole.as_bytes().to_vec())]);
        assert!(rendered_from(whole, false, 13).is_empty());
        assert!(rendered_from(whole, false, 99).is_empty());
        // Truncated: 4 head bytes, 10 cut, 4 tail bytes (stream offsets 14..18).
        let mut out = BoundedOutput::new(8);
        out.push(b"abcd0123456789wxyz");
        let rendered = out.render();
        let both = |from| (rendered_from(&rendered, true, from), out.read_from(from).0);
        for from in [0, 2, 4, 9, 14, 16, 18] {
            let (from_record, live) = both(from);
            assert_eq!(from_record, live, "from {from}");
        }
        // A made-up marker with a count near u64::MAX in a truncated output: no overflow.
        let forged = format!("ab\n[... {} bytes omitted ...]\ncd", u64::MAX);
        assert_eq!(rendered_from(&forged, true, 1)[0], Piece::Bytes(b"b".to_vec()));
        // A marker-like text in an untruncated output is output.
        let fake = "a\n[... 5 bytes omitted ...]\nb";
        assert_eq!(rendered_from(fake, false, 1), vec![Piece::Bytes(fake.as_bytes()[1..].to_vec())]);
    }

    #[test]
    fn small_output_is_kept_whole() {
        let mut o = BoundedOutput::new(16);
        o.push(b"hello ");
        o.push(b"world");
        assert_eq!(o.render(), "hello world");
        assert!(!o.truncated());
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let mut o = BoundedOutput::new(8);
        for chunk in [&b"abc"[..], b"defgh", b"ijklmnop", b"qr"] {
            o.push(chunk);
        }
        assert!(o.truncated());
        assert_eq!(o.total(), 18);
        assert_eq!(o.render(), "abcd\n[... 10 bytes omitted ...]\nopqr");
    }

    #[test]
    fn a_follower_reads_what_is_kept_and_gaps_for_what_was_cut() {
        let mut o = BoundedOutput::new(8);
        o.push(b"abc");
        assert_eq!(o.read_from(0), (vec![Piece::Bytes(b"abc".to_vec())], 3));
        assert_eq!(o.read_from(3), (vec![], 3));
        o.push(b"defgh");
        // head "abcd", tail "efgh": nothing cut yet.
        assert_eq!(o.read_from(3), (vec![Piece::Bytes(b"d".to_vec()), Piece::Bytes(b"efgh".to_vec())], 8));
        o.push(b"ijklmnop");
        // 16 bytes: head "abcd", tail "mnop"; offsets 4..12 were cut.
        assert_eq!(o.read_from(8), (vec![Piece::Gap(4), Piece::Bytes(b"mnop".to_vec())], 16));
        assert_eq!(o.read_from(13), (vec![Piece::Bytes(b"nop".to_vec())], 16));
        assert_eq!(
            o.read_from(0),
            (vec![Piece::Bytes(b"abcd".to_vec()), Piece::Gap(8), Piece::Bytes(b"mnop".to_vec())], 16)
        );
        // An offset beyond the end reads nothing.
        assert_eq!(o.read_from(99), (vec![], 16));
    }

    #[test]
    fn reading_in_steps_equals_the_whole_when_nothing_is_cut() {
        let data: Vec<u8> = (0..100u8).collect();
        let mut o = BoundedOutput::new(1000);
        let mut read = Vec::new();
        let mut at = 0;
        for chunk in data.chunks(7) {
            o.push(chunk);
            let (pieces, next) = o.read_from(at);
            for p in pieces {
                match p {
                    Piece::Bytes(b) => read.extend(b),
                    Piece::Gap(n) => panic!("unexpected gap of {n}"),
                }
            }
            at = next;
        }
        assert_eq!(read, data);
    }

    #[test]
    fn characters_split_between_chunks_are_joined() {
        let text = "größe → ✓ 🦀";
        for split in 0..=text.len() {
            let mut d = Utf8Chunks::default();
            let mut out = d.push(&text.as_bytes()[..split]);
            out.push_str(&d.push(&text.as_bytes()[split..]));
            assert_eq!(out, text, "split at {split}");
            assert_eq!(d.flush(), "");
        }
        let mut d = Utf8Chunks::default();
        assert_eq!(d.push(b"a\xffb\xe2\x86"), "a\u{fffd}b");
        assert_eq!(d.flush(), "\u{fffd}");
    }

    #[test]
    fn byte_at_a_time_equals_one_push() {
        let data: Vec<u8> = (0..200u8).collect();
        let mut a = BoundedOutput::new(50);
        let mut b = BoundedOutput::new(50);
        a.push(&data);
        for byte in &data {
            b.push(std::slice::from_ref(byte));
        }
        assert_eq!(a.render(), b.render());
    }

    #[test]
    fn clipping_keeps_whole_characters() {
        assert_eq!(clipped("abc", 5), "abc");
        assert_eq!(clipped("ééé", 3), "é…");
        assert_eq!(char_floor("ééé", 5), 4);
        assert_eq!(char_floor("ab", 1), 1);
    }
}
