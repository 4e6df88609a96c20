//! The body of `POST /v1/import`, written to a temporary file rather than held in memory:
//! judged from the head first (no import running, a known `from`, a
//! `Content-Length` within `--max-import-bytes`), so a refusal reads none of it. It may take as
//! long as it keeps arriving: each read waits up to the request timeout, so a large export
//! on a slow link gets through and a stalled one is 408.

use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

use super::conn::{Input, Stop};
use super::error::ApiError;
use super::import::{Upload, parse_from};
use super::request::{Framing, Head, Target};
use super::server::{Shared, Slot};

/// Receives the export into a temporary file, or refuses it unread.
pub(super) fn receive(
    shared: &Shared,
    slot: &Slot,
    input: &mut Input,
    head: &Head,
    target: &Target,
    framing: Framing,
) -> Result<Upload, Stop> {
    let refused = |e: ApiError| Stop::Refused(e);
    // First: whatever else is wrong, a second import waits for the first.
    let held = shared.api.imports.take().map_err(refused)?;
    let from = parse_from(&target.params).map_err(refused)?;
    let max = shared.api.config.max_import_bytes;
    let n = match framing {
        Framing::Length(n) if n > max => {
            return Err(refused(ApiError::new(
                413,
                "too_large",
                format!("the file is over {max} bytes (the server's --max-import-bytes)"),
            )));
        }
        Framing::Length(0) | Framing::None => {
            return Err(refused(ApiError::bad_request(
                "the body is empty: send the export (a .zip, JSON or logs.db file) as the \
                 request body",
            )));
        }
        Framing::Length(n) => n,
        Framing::Chunked => {
            return Err(refused(ApiError::new(
                411,
                "length_required",
                "send the file with a Content-Length (the limit is judged before it is read)",
            )));
        }
    };
    let unavailable = |e: std::io::Error| {
        log::warn!("cannot keep an upload: {e}");
        refused(ApiError::new(
            503,
            "unavailable",
            "the server cannot keep the file (its temporary directory is full or \
             unwritable)",
        ))
    };
    let mut file = tempfile::NamedTempFile::new().map_err(unavailable)?;
    if head.expects_continue() {
        let mut w: &TcpStream = &slot.stream;
        let _ = slot.stream.set_write_timeout(Some(shared.request_timeout));
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|_| Stop::Closed)?;
    }
    let mut left = n;
    loop {
        let take = left.min(input.buf.len() as u64) as usize;
        file.write_all(&input.buf[..take]).map_err(unavailable)?;
        input.buf.drain(..take);
        left -= take as u64;
        if left == 0 {
            break;
        }
        if !input.fill(Instant::now() + shared.request_timeout)? {
            return Err(Stop::Closed);
        }
    }
    file.flush().map_err(unavailable)?;
    Ok(Upload { file, from, held })
}
