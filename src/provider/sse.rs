//! An incremental Server-Sent-Events parser, pure: bytes in, frames out.
//!
//! Bytes may be split anywhere (inside a line, inside a UTF-8 character, between `\r` and
//! `\n`); an incomplete line is "not yet", not an error. Lines end with LF, CRLF or CR;
//! lines starting with `:` are comments (keep-alive pings); `data:` lines of one event are
//! joined with `\n`; a blank line dispatches the event. A line or an event over
//! [`MAX_SSE_FRAME_BYTES`] is an error, so a provider sending garbage without newlines
//! cannot grow our memory without bound.

/// The largest line or event accepted.
pub const MAX_SSE_FRAME_BYTES: usize = 1024 * 1024;

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The `event:` field, when one was given.
    pub event: Option<String>,
    pub data: String,
}

/// Why the byte stream is not SSE.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an event is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the stream is not UTF-8")]
    NotUtf8,
}

/// Parser state between chunks.
#[derive(Debug)]
pub struct SseParser {
    /// The largest line or event accepted.
    limit: usize,
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting the next one belongs to it.
    after_cr: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
    failed: Option<SseError>,
}

impl Default for SseParser {
    fn default() -> SseParser {
        SseParser::new()
    }
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::with_limit(MAX_SSE_FRAME_BYTES)
    }

    /// A parser accepting lines and events up to `limit` bytes (an MCP server's tool
    /// result may be larger than a provider's chunk).
    pub fn with_limit(limit: usize) -> SseParser {
        SseParser {
            limit,
            line: Vec::new(),
            after_cr: false,
            data: String::new(),
            has_data: false,
            event: None,
            failed: None,
        }
    }

    /// Feeds bytes; appends every event they complete to `out`. After an error the parser
    /// stays failed (a stream that broke the format once is not trusted again).
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Frame>) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.feed_inner(bytes, out);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn feed_inner(&mut self, bytes: &[u8], out: &mut Vec<Frame>) -> Result<(), SseError> {
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&line, out)?;
                }
                _ => {
                    if self.line.len() >= self.limit {
                        return Err(SseError::TooLarge(self.limit));
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<Frame>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(Frame {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.has_data = false;
            self.event = None;
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                if self.data.len() + value.len() > self.limit {
                    return Err(SseError::TooLarge(self.limit));
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {} // id, retry and unknown fields mean nothing to a chat stream
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(chunks: &[&[u8]]) -> Result<Vec<Frame>, SseError> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out)?;
        }
        Ok(out)
    }

    fn data(frames: &[Frame]) -> Vec<&str> {
        frames.iter().map(|f| f.data.as_str()).collect()
    }

    #[test]
    fn lf_crlf_and_cr_line_ends() {
        let s = b"data: a\n\ndata: b\r\n\r\ndata: c\r\rdata: d\n\n";
        assert_eq!(data(&parse_all(&[s]).unwrap()), vec!["a", "b", "c", "d"]);
    }

    #[test]
    fn comments_fields_and_multiline_data() {
        let s = b": ping\n\nevent: x\nid: 7\nretry: 10\ndata: one\ndata:two\ndata\n\n";
        let frames = parse_all(&[s]).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].data, "one\ntwo\n");
        assert_eq!(frames[0].event.as_deref(), Some("x"));
    }

    #[test]
    fn an_incomplete_event_is_not_yet() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.feed(b"data: {\"a\":", &mut out).unwrap();
        assert!(out.is_empty());
        p.feed(b"1}\n", &mut out).unwrap();
        assert!(out.is_empty());
        p.feed(b"\n", &mut out).unwrap();
        assert_eq!(data(&out), vec!["{\"a\":1}"]);
    }

    #[test]
    fn a_split_crlf_is_one_line_end() {
        let frames = parse_all(&[b"data: a\r", b"\n\r", b"\ndata: b\n\n"]).unwrap();
        assert_eq!(data(&frames), vec!["a", "b"]);
    }

    #[test]
    fn oversized_lines_and_events_are_errors_and_stay_errors() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let big = vec![b'x'; MAX_SSE_FRAME_BYTES + 1];
        assert_eq!(
            p.feed(&big, &mut out),
            Err(SseError::TooLarge(MAX_SSE_FRAME_BYTES))
        );
        assert_eq!(
            p.feed(b"data: ok\n\n", &mut out),
            Err(SseError::TooLarge(MAX_SSE_FRAME_BYTES))
        );
        let half = format!("data: {}\n", "y".repeat(MAX_SSE_FRAME_BYTES / 2 + 1));
        let mut p = SseParser::new();
        p.feed(half.as_bytes(), &mut out).unwrap();
        assert_eq!(
            p.feed(half.as_bytes(), &mut out),
            Err(SseError::TooLarge(MAX_SSE_FRAME_BYTES))
        );
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        assert_eq!(parse_all(&[b"data: \xff\xfe\n\n"]), Err(SseError::NotUtf8));
    }

    proptest! {
        /// Any split of a valid stream parses to the same frames.
        #[test]
        fn any_split_parses_the_same(
            datas in proptest::collection::vec("[a-z{}\":, é🦓]{0,12}", 1..6),
            ends in proptest::collection::vec(0usize..3, 6),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let eol = ["\n", "\r\n", "\r"];
            let mut stream = String::from(": hello\n");
            for (i, d) in datas.iter().enumerate() {
                let e = eol[ends[i % ends.len()]];
                stream.push_str(&format!("data: {d}{e}{e}"));
            }
            stream.push_str("data: [DONE]\n\n");
            let bytes = stream.as_bytes();
            let whole = parse_all(&[bytes]).unwrap();
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut prev = 0;
            for p in points {
                chunks.push(&bytes[prev..p]);
                prev = p;
            }
            chunks.push(&bytes[prev..]);
            prop_assert_eq!(parse_all(&chunks).unwrap(), whole.clone());
            let mut expected: Vec<&str> = datas.iter().map(String::as_str).collect();
            expected.push("[DONE]");
            prop_assert_eq!(data(&whole), expected);
        }

        /// Garbage never panics; it is frames or an error.
        #[test]
        fn garbage_never_panics(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..10)) {
            let mut p = SseParser::new();
            let mut out = Vec::new();
            for c in &chunks {
                let _ = p.feed(c, &mut out);
            }
        }
    }
}
