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

#[cfg(test)]
mod tests {
    use super::*;

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
}
