//! HTTP plumbing on tiny_http: query strings, JSON bodies under a limit, JSON answers, and
//! Server-Sent-Event streams written by hand (tiny_http buffers streamed responses, so a
//! stream takes the raw writer, frames each event as an HTTP chunk and flushes it).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::Duration;

use serde_json::Value;
use tiny_http::{Header, Request, Response};

use super::error::ApiError;
use crate::chat::frames::{Next, Subscription};

/// A keep-alive comment this often, so proxies do not cut a long silence.
pub const SSE_PING_INTERVAL: Duration = Duration::from_secs(15);

/// The answer type of every non-streaming route.
pub type Answer = Response<std::io::Cursor<Vec<u8>>>;

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

/// Headers every answer carries.
fn common(mut r: Answer) -> Answer {
    for (k, v) in [
        ("X-Content-Type-Options", "nosniff"),
        ("Cache-Control", "no-store"),
        ("Referrer-Policy", "no-referrer"),
    ] {
        if let Some(h) = header(k, v) {
            r.add_header(h);
        }
    }
    r
}

pub fn json(status: u16, body: &Value) -> Answer {
    let mut r = Response::from_string(body.to_string()).with_status_code(status);
    if let Some(h) = header("Content-Type", "application/json") {
        r.add_header(h);
    }
    common(r)
}

pub fn error(e: &ApiError) -> Answer {
    let mut r = Response::from_string(e.body()).with_status_code(e.status);
    if let Some(h) = header("Content-Type", "application/json") {
        r.add_header(h);
    }
    if e.status == 401 {
        if let Some(h) = header("WWW-Authenticate", "Bearer") {
            r.add_header(h);
        }
    }
    common(r)
}

/// A static file of the web UI, under the page's Content-Security-Policy.
pub fn asset(body: &'static str, content_type: &str) -> Answer {
    let mut r = Response::from_string(body).with_status_code(200);
    for (k, v) in [
        ("Content-Type", content_type),
        (
            "Content-Security-Policy",
            super::assets::CONTENT_SECURITY_POLICY,
        ),
        ("X-Frame-Options", "DENY"),
    ] {
        if let Some(h) = header(k, v) {
            r.add_header(h);
        }
    }
    common(r)
}

pub fn empty(status: u16) -> Answer {
    common(Response::from_data(Vec::new()).with_status_code(status))
}

/// A request header's value.
pub fn header_value<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Splits a URL into its path and its query parameters (each at most once).
pub fn split_url(url: &str) -> Result<(String, HashMap<String, String>), ApiError> {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if params.insert(k.to_string(), v.to_string()).is_some() {
            return Err(ApiError::bad_request(format!("`{k}` is given twice")));
        }
    }
    Ok((path.to_owned(), params))
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

/// The JSON object in a request's body; an absent body is `{}`. The declared length is
/// checked before anything is read, and a body without one is read no further than the
/// limit.
pub fn json_body(
    req: &mut Request,
    max_bytes: usize,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let declared = req.body_length();
    let chunked = header_value(req, "Transfer-Encoding").is_some();
    if declared == Some(0) || (declared.is_none() && !chunked) {
        return Ok(serde_json::Map::new());
    }
    let too_large = || {
        ApiError::new(
            413,
            "too_large",
            format!("the body is over {max_bytes} bytes"),
        )
    };
    if declared.is_some_and(|n| n > max_bytes) {
        return Err(too_large());
    }
    let content_type = header_value(req, "Content-Type").unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            415,
            "unsupported_media_type",
            "the body must be application/json",
        ));
    }
    let mut bytes = Vec::new();
    req.as_reader()
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| ApiError::bad_request("the body could not be read"))?;
    if bytes.len() > max_bytes {
        return Err(too_large());
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("malformed JSON: {e}"))),
    }
}

/// Streams an attempt's frames as SSE on the request's own connection, on its own thread
/// (a stream holds its thread for its life). A client that goes away only ends this
/// thread; the attempt goes on (I8).
pub fn stream(req: Request, session_id: &str, status: u16, mut sub: Subscription) {
    let head = format!(
        "HTTP/1.1 {status} OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
         X-Content-Type-Options: nosniff\r\nX-Session-Id: {session_id}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    std::thread::spawn(move || {
        let mut w = req.into_writer();
        if w.write_all(head.as_bytes())
            .and_then(|()| w.flush())
            .is_err()
        {
            return;
        }
        loop {
            let piece = match sub.next_frame(SSE_PING_INTERVAL) {
                Next::Frame(f) => match serde_json::to_string(&f) {
                    Ok(json) => format!("data: {json}\n\n"),
                    Err(_) => continue,
                },
                Next::Idle => ": ping\n\n".to_owned(),
                Next::Ended => {
                    let _ = w.write_all(b"0\r\n\r\n").and_then(|()| w.flush());
                    return;
                }
            };
            let chunk = format!("{:x}\r\n{piece}\r\n", piece.len());
            if w.write_all(chunk.as_bytes())
                .and_then(|()| w.flush())
                .is_err()
            {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_decoded_and_duplicates_refused() {
        let (path, q) = split_url("/v1/search?q=hello+w%C3%B6rld&limit=5").unwrap();
        assert_eq!(path, "/v1/search");
        assert_eq!(q["q"], "hello wörld");
        assert_eq!(number(&q, "limit", 20, 1, 100).unwrap(), 5);
        assert_eq!(number(&q, "offset", 0, 0, u64::MAX).unwrap(), 0);
        assert!(split_url("/x?a=1&a=2").is_err());
        let (_, q) = split_url("/x?limit=0").unwrap();
        assert_eq!(
            number(&q, "limit", 20, 1, 100).unwrap_err().code,
            "bad_request"
        );
        let (_, q) = split_url("/x?limit=-1").unwrap();
        assert!(number(&q, "limit", 20, 1, 100).is_err());
    }
}
