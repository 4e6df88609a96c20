//! A request's head, parsed and judged before anything acts on it (SPEC §12): pure
//! functions over bytes, tested without sockets.
//!
//! - [`parse_head`]: the request line and headers (httparse), refusing bare LF line ends.
//! - [`framing`]: how the body is delimited, refusing every ambiguity RFC 9112 §6.3 names
//!   (Content-Length with Transfer-Encoding, two lengths, a length that is not digits, an
//!   unknown coding, two `Host` headers).
//! - [`parse_target`]: the request-target as the one path routing and authorisation both
//!   read: origin-form only, no empty or dot segments, percent-decoding done once.

use std::collections::HashMap;

use super::error::ApiError;

/// The most header lines a request may carry.
pub const MAX_HEADERS: usize = 64;

/// A request's head, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub target: String,
    /// `0` for HTTP/1.0, `1` for HTTP/1.1.
    pub minor_version: u8,
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of a header (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the connection stays open after this request's answer.
    pub fn keep_alive(&self) -> bool {
        let tokens = || {
            self.all("Connection")
                .flat_map(|v| v.split(','))
                .map(str::trim)
        };
        if self.minor_version == 0 {
            tokens().any(|t| t.eq_ignore_ascii_case("keep-alive"))
        } else {
            !tokens().any(|t| t.eq_ignore_ascii_case("close"))
        }
    }

    /// Whether the client waits for `100 Continue` before sending its body.
    pub fn expects_continue(&self) -> bool {
        self.minor_version >= 1
            && self
                .header("Expect")
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("100-continue"))
    }
}

/// What parsing the bytes received so far gives.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The head is complete: it and its length in bytes.
    Complete(Head, usize),
    /// More bytes are needed.
    Partial,
}

/// Parses a request head. A malformed head is a 400 (the caller closes the connection).
pub fn parse_head(buf: &[u8]) -> Result<Parsed, ApiError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(ApiError::new(
                431,
                "too_large",
                format!("a request may carry at most {MAX_HEADERS} headers"),
            ));
        }
        Err(e) => return Err(ApiError::bad_request(format!("malformed request: {e}"))),
    };
    // httparse accepts a bare LF as a line end; a proxy in front may not, and two readers
    // disagreeing on where a header ends is how requests are smuggled.
    if has_bare_lf(&buf[..len]) {
        return Err(ApiError::bad_request(
            "malformed request: lines must end with CRLF",
        ));
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let head = Head {
        method: req.method.unwrap_or_default().to_owned(),
        target: req.path.unwrap_or_default().to_owned(),
        minor_version: req.version.unwrap_or(1),
        headers: req
            .headers
            .iter()
            // Only SP and HTAB are whitespace around a field value (RFC 9110 §5.5); a
            // Unicode space around a length must leave it invalid, as a proxy would.
            .map(|h| {
                let v = text(h.value);
                (h.name.to_owned(), v.trim_matches([' ', '\t']).to_owned())
            })
            .collect(),
    };
    Ok(Parsed::Complete(head, len))
}

fn has_bare_lf(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || bytes[i - 1] != b'\r'))
}

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Decides the body's framing, refusing every ambiguous form with 400 (RFC 9112 §6.3);
/// the caller closes the connection after such an answer.
pub fn framing(head: &Head) -> Result<Framing, ApiError> {
    let bad = |m: &str| Err(ApiError::bad_request(format!("ambiguous framing: {m}")));
    let hosts = head.all("Host").count();
    if hosts > 1 {
        return bad("two Host headers");
    }
    if hosts == 0 && head.minor_version >= 1 {
        return Err(ApiError::bad_request("an HTTP/1.1 request needs a Host"));
    }
    if head.all("Authorization").count() > 1 {
        // A proxy that reads the last one would disagree with a server that reads the first.
        return bad("two Authorization headers");
    }
    let lengths: Vec<&str> = head.all("Content-Length").collect();
    let codings: Vec<&str> = head.all("Transfer-Encoding").collect();
    match (lengths.as_slice(), codings.as_slice()) {
        ([], []) => Ok(Framing::None),
        (_, [_, ..]) if !lengths.is_empty() => bad("Content-Length with Transfer-Encoding"),
        // HTTP/1.0 has no transfer codings (RFC 9112 §6.1): such a message is faulty.
        (_, [_, ..]) if head.minor_version == 0 => bad("Transfer-Encoding in HTTP/1.0"),
        ([], [coding]) if coding.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
        ([], [_]) => bad("only Transfer-Encoding: chunked is understood"),
        ([], _) => bad("more than one Transfer-Encoding"),
        ([one], []) => match content_length(one) {
            Some(0) => Ok(Framing::None),
            Some(n) => Ok(Framing::Length(n)),
            None => bad("Content-Length is not a decimal number"),
        },
        (_, _) => bad("more than one Content-Length"),
    }
}

/// A Content-Length value: decimal digits only (no sign, no list), within u64.
fn content_length(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// The request-target, resolved once: the path's decoded segments (no leading empty one)
/// and the query's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub segments: Vec<String>,
    pub params: HashMap<String, String>,
}

impl Target {
    /// The path as the router reads it, for messages.
    pub fn path(&self) -> String {
        format!("/{}", self.segments.join("/"))
    }
}

/// Resolves a request-target. Only origin-form (`/path?query`) is served; `*`,
/// absolute-form, fragments, empty or dot segments and encoded separators are refused with
/// 400, so no two spellings of one route can be judged differently.
pub fn parse_target(raw: &str) -> Result<Target, ApiError> {
    let refuse = |m: &str| ApiError::bad_request(format!("bad request-target: {m}"));
    let bad = |m: &str| Err(refuse(m));
    if !raw.starts_with('/') {
        return bad("it must be a path starting with /");
    }
    if raw.contains('#') {
        return bad("a fragment is never sent to a server");
    }
    let (path, query) = raw.split_once('?').unwrap_or((raw, ""));
    let mut segments = Vec::new();
    let raw_segments: Vec<&str> = path[1..].split('/').collect();
    let last = raw_segments.len() - 1;
    for (i, seg) in raw_segments.iter().enumerate() {
        // One trailing slash is tolerated (`/v1/sessions/`); `/` itself has no segments.
        if seg.is_empty() && i == last {
            break;
        }
        let decoded = percent_decode(seg)
            .ok_or_else(|| refuse("a bad percent-encoding or a non-UTF-8 segment"))?;
        if decoded.is_empty() {
            return bad("an empty segment (//)");
        }
        if decoded == "." || decoded == ".." {
            return bad("a dot segment");
        }
        if decoded
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
        {
            return bad("an encoded separator or control character");
        }
        segments.push(decoded);
    }
    Ok(Target {
        segments,
        params: query_params(query)?,
    })
}

/// Query parameters, each at most once.
pub fn query_params(query: &str) -> Result<HashMap<String, String>, ApiError> {
    let mut params = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if params.insert(k.to_string(), v.to_string()).is_some() {
            return Err(ApiError::bad_request(format!("`{k}` is given twice")));
        }
    }
    Ok(params)
}

/// Percent-decodes a path segment (a `+` stays a `+`); `None` for a bad escape or bytes
/// that are not UTF-8.
fn percent_decode(seg: &str) -> Option<String> {
    let bytes = seg.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> Head {
        match parse_head(raw.as_bytes()).unwrap() {
            Parsed::Complete(h, n) => {
                assert_eq!(n, raw.len());
                h
            }
            Parsed::Partial => panic!("partial: {raw:?}"),
        }
    }

    fn framing_of(headers: &str) -> Result<Framing, &'static str> {
        framing(&head(&format!("POST / HTTP/1.1\r\n{headers}\r\n"))).map_err(|e| e.code)
    }

    #[test]
    fn heads_parse_and_partial_heads_wait() {
        let h = head("GET /health?x=1 HTTP/1.1\r\nHost: a:1\r\nX-A:  b \r\n\r\n");
        assert_eq!(
            (h.method.as_str(), h.target.as_str()),
            ("GET", "/health?x=1")
        );
        assert_eq!(h.header("x-a"), Some("b"));
        assert!(h.keep_alive());
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost:").unwrap(),
            Parsed::Partial
        );
        let old = head("GET / HTTP/1.0\r\n\r\n");
        assert!(!old.keep_alive());
        assert!(head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive());
        assert!(!head("GET / HTTP/1.1\r\nConnection: x, close\r\n\r\n").keep_alive());
    }

    #[test]
    fn malformed_heads_are_refused() {
        for raw in [
            &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
            b"GET / HTTP/1.1\nHost: a\n\n",
            b"GET / HTTP/1.1\r\nHost: a\n\r\n",
            b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(parse_head(raw).unwrap_err().status, 400, "{raw:?}");
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let e = parse_head(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()).unwrap_err();
        assert_eq!(e.status, 431);
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        assert_eq!(framing_of("Host: a\r\n"), Ok(Framing::None));
        assert_eq!(
            framing_of("Host: a\r\nContent-Length: 0\r\n"),
            Ok(Framing::None)
        );
        assert_eq!(
            framing_of("Host: a\r\nContent-Length: 12\r\n"),
            Ok(Framing::Length(12))
        );
        assert_eq!(
            framing_of("Host: a\r\nTransfer-Encoding: Chunked\r\n"),
            Ok(Framing::Chunked)
        );
        for bad in [
            "Host: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            "Host: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "Host: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n",
            "Host: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n",
            "Host: a\r\nContent-Length: 5, 5\r\n",
            "Host: a\r\nContent-Length: abc\r\n",
            "Host: a\r\nContent-Length: -1\r\n",
            "Host: a\r\nContent-Length: +2\r\n",
            "Host: a\r\nContent-Length: 18446744073709551616\r\n",
            "Host: a\r\nTransfer-Encoding: gzip\r\n",
            "Host: a\r\nTransfer-Encoding: gzip, chunked\r\n",
            "Host: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "Host: a\r\nHost: b\r\n",
            "Host: a\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n",
            "Host: a\r\nContent-Length: \u{a0}2\r\n",
            "Host: a\r\nContent-Length: 2\u{3000}\r\n",
            "Host: a\r\nTransfer-Encoding: chunked\u{a0}\r\n",
            "Host: a\r\nTransfer-Encoding: \u{85}chunked\r\n",
            "",
        ] {
            assert_eq!(framing_of(bad), Err("bad_request"), "{bad:?}");
        }
    }

    #[test]
    fn http_1_0_has_no_transfer_codings() {
        let h = head("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(framing(&h).unwrap_err().code, "bad_request");
        let h = head("POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\n");
        assert_eq!(framing(&h), Ok(Framing::Length(2)));
    }

    #[test]
    fn targets_resolve_to_one_path() {
        let t = parse_target("/v1/sessions/?limit=5&q=a+b").unwrap();
        assert_eq!(t.segments, ["v1", "sessions"]);
        assert_eq!(t.params["q"], "a b");
        assert_eq!(t.path(), "/v1/sessions");
        assert!(parse_target("/").unwrap().segments.is_empty());
        assert_eq!(
            parse_target("/%76%31/sessions").unwrap().segments,
            ["v1", "sessions"],
            "decoded once, so the token check sees the route it is"
        );
        assert_eq!(
            parse_target("/health?/v1/sessions").unwrap().segments,
            ["health"]
        );
        for bad in [
            "x/v1/sessions",
            "//v1/sessions",
            "/v1//sessions",
            "/v1/../v1/sessions",
            "/./v1/sessions",
            "/v1/%2e%2e/sessions",
            "/v1/sessions/..%2f..%2fetc",
            "/v1/sessions%2fx",
            "http://127.0.0.1:7420/v1/sessions",
            "*",
            "",
            "/v1/sessions#x",
            "/v1/%zz",
            "/v1/%ff",
            "/v1/a%00",
            "/v1/sessions?a=1&a=2",
        ] {
            assert_eq!(parse_target(bad).unwrap_err().status, 400, "{bad:?}");
        }
    }
}
