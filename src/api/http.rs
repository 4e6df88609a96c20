//! HTTP answers and bodies: JSON answers with the headers every answer carries, the request
//! as routes see it (head, resolved target, body already read under its limit), and
//! Server-Sent-Event streams framed as HTTP chunks and flushed one event at a time.

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::Duration;

use serde_json::Value;

use super::error::ApiError;
use super::request::{Head, Target};
use crate::chat::frames::{Next, Subscription};

/// A keep-alive comment this often, so proxies do not cut a long silence.
pub const SSE_PING_INTERVAL: Duration = Duration::from_secs(15);

/// A request as routes see it: its body is already read (within `--max-body-bytes`).
#[derive(Debug)]
pub struct Request {
    pub method: String,
    pub head: Head,
    pub target: Target,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    pub fn params(&self) -> &HashMap<String, String> {
        &self.target.params
    }
}

/// A complete (non-streaming) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    fn new(status: u16, content_type: Option<&str>, body: Vec<u8>) -> Answer {
        let mut headers = vec![
            ("X-Content-Type-Options", "nosniff".to_owned()),
            ("Cache-Control", "no-store".to_owned()),
            ("Referrer-Policy", "no-referrer".to_owned()),
        ];
        if let Some(t) = content_type {
            headers.push(("Content-Type", t.to_owned()));
        }
        Answer {
            status,
            headers,
            body,
        }
    }

    fn with(mut self, name: &'static str, value: &str) -> Answer {
        self.headers.push((name, value.to_owned()));
        self
    }

    /// Writes the answer; `head_only` for HEAD requests.
    pub fn write_to(&self, w: &mut dyn Write, keep_alive: bool, head_only: bool) -> io::Result<()> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (k, v) in &self.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        // A 204 carries no body and so no length (RFC 9110 §8.6).
        if self.status != 204 {
            out.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        out.push_str(&format!(
            "Connection: {}\r\n\r\n",
            if keep_alive { "keep-alive" } else { "close" }
        ));
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(&self.body);
        }
        w.write_all(&bytes)?;
        w.flush()
    }
}

/// The reason phrase of a status (informative only; clients read the number).
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

pub fn json(status: u16, body: &Value) -> Answer {
    Answer::new(
        status,
        Some("application/json"),
        body.to_string().into_bytes(),
    )
}

pub fn error(e: &ApiError) -> Answer {
    let a = Answer::new(e.status, Some("application/json"), e.body().into_bytes());
    if e.status == 401 {
        a.with("WWW-Authenticate", "Bearer")
    } else {
        a
    }
}

/// A static file of the web UI, under the page's Content-Security-Policy.
pub fn asset(body: &'static str, content_type: &str) -> Answer {
    Answer::new(200, Some(content_type), body.as_bytes().to_vec())
        .with(
            "Content-Security-Policy",
            super::assets::CONTENT_SECURITY_POLICY,
        )
        .with("X-Frame-Options", "DENY")
}

pub fn empty(status: u16) -> Answer {
    Answer::new(status, None, Vec::new())
}

/// A numeric query parameter within `min..=max`, or its default.
pub fn number(
    params: &HashMap<String, String>,
    name: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ApiError> {
    match params.get(name) {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_request(format!(
                "`{name}` must be a whole number from {min} to {max}"
            ))),
        },
    }
}

/// The JSON object in a request's body; an absent or blank body is `{}`.
pub fn json_body(req: &Request) -> Result<serde_json::Map<String, Value>, ApiError> {
    if req.body.is_empty() {
        return Ok(serde_json::Map::new());
    }
    let content_type = req.header("Content-Type").unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            415,
            "unsupported_media_type",
            "the body must be application/json",
        ));
    }
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(&req.body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("malformed JSON: {e}"))),
    }
}

/// Streams an attempt's frames as SSE on the connection's own thread until the `end`
/// frame, then closes. A client that stops reading only stalls this connection (its
/// writes time out); the attempt goes on (I8). `chunked` is false for HTTP/1.0 clients,
/// whose stream ends when the connection closes.
pub fn stream(
    w: &mut dyn Write,
    session_id: &str,
    mut sub: Subscription,
    chunked: bool,
) -> io::Result<()> {
    stream_head(w, session_id, chunked)?;
    loop {
        let piece = match sub.next_frame(SSE_PING_INTERVAL) {
            Next::Frame(f) => match serde_json::to_string(&f) {
                Ok(json) => format!("data: {json}\n\n"),
                Err(_) => continue,
            },
            Next::Idle => ": ping\n\n".to_owned(),
            Next::Ended => {
                if chunked {
                    w.write_all(b"0\r\n\r\n")?;
                }
                return w.flush();
            }
        };
        if chunked {
            w.write_all(format!("{:x}\r\n{piece}\r\n", piece.len()).as_bytes())?;
        } else {
            w.write_all(piece.as_bytes())?;
        }
        w.flush()?;
    }
}

/// The head of an SSE stream (all a HEAD request gets).
pub fn stream_head(w: &mut dyn Write, session_id: &str, chunked: bool) -> io::Result<()> {
    let framing = if chunked {
        "Transfer-Encoding: chunked\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
         X-Content-Type-Options: nosniff\r\nX-Session-Id: {session_id}\r\n\
         {framing}Connection: close\r\n\r\n"
    );
    w.write_all(head.as_bytes())?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::request::{parse_target, query_params};

    #[test]
    fn numbers_are_bounded() {
        let q = query_params("limit=5").unwrap();
        assert_eq!(number(&q, "limit", 20, 1, 100).unwrap(), 5);
        assert_eq!(number(&q, "offset", 0, 0, u64::MAX).unwrap(), 0);
        for bad in ["limit=0", "limit=-1", "limit=101", "limit=x"] {
            let q = query_params(bad).unwrap();
            assert_eq!(
                number(&q, "limit", 20, 1, 100).unwrap_err().code,
                "bad_request"
            );
        }
    }

    #[test]
    fn answers_are_framed_with_their_length() {
        let mut out = Vec::new();
        json(201, &serde_json::json!({"a": 1}))
            .write_to(&mut out, true, false)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 201 Created\r\n"), "{text}");
        assert!(text.contains("Content-Length: 7\r\nConnection: keep-alive\r\n\r\n{\"a\":1}"));
        let mut out = Vec::new();
        error(&ApiError::new(401, "unauthorized", "no"))
            .write_to(&mut out, false, true)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("WWW-Authenticate: Bearer\r\n"));
        assert!(text.ends_with("Connection: close\r\n\r\n"), "HEAD: no body");
    }

    #[test]
    fn bodies_must_be_json_objects() {
        let req = |ct: Option<&str>, body: &str| Request {
            method: "POST".into(),
            head: Head {
                method: "POST".into(),
                target: "/".into(),
                minor_version: 1,
                headers: ct
                    .map(|c| vec![("Content-Type".to_owned(), c.to_owned())])
                    .unwrap_or_default(),
            },
            target: parse_target("/").unwrap(),
            body: body.as_bytes().to_vec(),
        };
        assert!(json_body(&req(None, "")).unwrap().is_empty());
        assert!(
            json_body(&req(Some("application/json"), " \n"))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            json_body(&req(Some("Application/JSON; charset=utf-8"), "{\"a\":1}")).unwrap()["a"],
            1
        );
        assert_eq!(json_body(&req(None, "{}")).unwrap_err().status, 415);
        assert_eq!(
            json_body(&req(Some("text/plain"), "{}"))
                .unwrap_err()
                .status,
            415
        );
        assert_eq!(
            json_body(&req(Some("application/json"), "[1]"))
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            json_body(&req(Some("application/json"), "{"))
                .unwrap_err()
                .status,
            400
        );
    }
}
