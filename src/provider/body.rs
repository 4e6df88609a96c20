//! Reading a provider's answer: bounded bodies, error excerpts, and what a transport
//! error means ([`ProviderError`]).

use std::io::Read;
use std::time::Duration;

use super::ProviderError;
use crate::config;

/// A 200's body of at most `limit` bytes; a longer one is [`ProviderError::Malformed`] (a
/// broken or hostile provider must not fill our memory), any other status its error.
pub(super) fn read_body(
    resp: ureq::http::Response<ureq::Body>,
    limit: usize,
    what: &str,
    timeout: Duration,
) -> Result<String, ProviderError> {
    let status = resp.status().as_u16();
    if status != 200 {
        let text = read_limited(resp, config::MAX_PROVIDER_ERROR_BODY_BYTES)
            .map_err(|e| classify_io(&e, timeout))?;
        return Err(http_error(status, &text));
    }
    let bytes = read_bytes(resp, limit + 1).map_err(|e| classify_io(&e, timeout))?;
    if bytes.len() > limit {
        return Err(ProviderError::Malformed(format!(
            "the {what} is larger than {limit} bytes"
        )));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
/// At most `limit` bytes of a body, as text (an error body, kept as an excerpt).
pub(super) fn read_limited(
    resp: ureq::http::Response<ureq::Body>,
    limit: usize,
) -> std::io::Result<String> {
    Ok(String::from_utf8_lossy(&read_bytes(resp, limit)?).into_owned())
}

fn read_bytes(resp: ureq::http::Response<ureq::Body>, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let reader = resp.into_body().into_reader();
    reader.take(limit as u64).read_to_end(&mut bytes)?;
    Ok(bytes)
}

pub(super) fn http_error(status: u16, body: &str) -> ProviderError {
    ProviderError::Http {
        status,
        body: excerpt(body),
    }
}

/// At most [`config::MAX_PROVIDER_ERROR_BODY_BYTES`] of a body, cut on a char boundary.
pub(super) fn excerpt(text: &str) -> String {
    let mut end = text.len().min(config::MAX_PROVIDER_ERROR_BODY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].trim().to_owned()
}

pub(super) fn classify(e: ureq::Error, timeout: Duration) -> ProviderError {
    match e {
        ureq::Error::Io(io) => classify_io(&io, timeout),
        ureq::Error::Timeout(_) => ProviderError::Timeout(timeout),
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
            ProviderError::Unreachable(e.to_string())
        }
        other => ProviderError::Unreachable(other.to_string()),
    }
}

fn classify_io(e: &std::io::Error, timeout: Duration) -> ProviderError {
    use std::io::ErrorKind::*;
    if super::out_of_descriptors(e) {
        return ProviderError::NoDescriptors(e.to_string());
    }
    match e.kind() {
        TimedOut | WouldBlock => ProviderError::Timeout(timeout),
        ConnectionRefused | ConnectionReset | ConnectionAborted | NotConnected
        | AddrNotAvailable => ProviderError::Unreachable(e.to_string()),
        _ => ProviderError::Cut(e.to_string()),
    }
}
