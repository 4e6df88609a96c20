//! One connection's life on its own thread: read a request under deadlines, judge its
//! head before its body, answer (or stream), and keep the connection for the next request
//! only while the client is prompt.
//!
//! Deadlines (SPEC §12): a request's head and body must arrive within `--request-timeout`
//! of its first byte (else 408 and close); between requests a kept-alive connection may be
//! silent for the idle timeout (then it is closed without a word); a whole answer must be
//! written within the request timeout, and so must each frame of a stream (a client that
//! stops reading is cut, with a reset, once a frame has waited that long; its attempt goes
//! on, I8). A read never blocks past the time left, so a client trickling one byte at a
//! time cannot stretch a deadline.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::error::ApiError;
use super::http::{self, Request};
use super::request::{self, Framing, Head, Parsed};
use super::routes::{self, Reply};
use super::server::{BUSY, IDLE, READING, Shared, Slot, WRITING};
use super::{import, sockopt, upload};

/// The largest request head (request line and headers).
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// How much is read from a socket at once.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;

/// The longest chunk-size line of a chunked body (size, extensions).
const MAX_CHUNK_LINE_BYTES: usize = 1024;

/// The most bytes of trailer fields a chunked body may end with (all lines together):
/// trailers are read and dropped, so more is only a client making the server work.
const MAX_TRAILER_BYTES: usize = 8 * 1024;

/// Why reading stopped.
pub(super) enum Stop {
    /// The client closed, the connection was evicted, or the server is stopping.
    Closed,
    /// A deadline passed with part of a request received: answer 408.
    TimedOut,
    /// Nothing arrived before the idle deadline: close without a word.
    Idle,
    /// The request is refused (its answer closes the connection).
    Refused(ApiError),
}

/// Bytes from the socket, buffered across requests (pipelined requests stay in `buf`).
pub(super) struct Input<'a> {
    stream: &'a TcpStream,
    pub(super) buf: Vec<u8>,
}

impl Input<'_> {
    /// Reads more bytes, waiting until `deadline` at most. `Ok(false)` at end of stream.
    pub(super) fn fill(&mut self, deadline: Instant) -> Result<bool, Stop> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Stop::TimedOut);
        }
        self.stream
            .set_read_timeout(Some(left))
            .map_err(|_| Stop::Closed)?;
        let mut chunk = [0u8; READ_CHUNK_BYTES];
        let mut reader: &TcpStream = self.stream;
        match reader.read(&mut chunk) {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(Stop::TimedOut)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(_) => Err(Stop::Closed),
        }
    }

    /// Takes exactly `n` bytes (reading more as needed).
    fn take(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, Stop> {
        while self.buf.len() < n {
            if !self.fill(deadline)? {
                return Err(Stop::Closed);
            }
        }
        let rest = self.buf.split_off(n);
        Ok(std::mem::replace(&mut self.buf, rest))
    }

    /// Takes one CRLF-terminated line (without its CRLF), at most `max` bytes long. The
    /// verdict never depends on how the bytes arrived: a line over `max` is refused whether
    /// its end is already here or not, and a bare LF is refused as soon as it is seen.
    fn line(&mut self, max: usize, deadline: Instant) -> Result<Vec<u8>, Stop> {
        let refused = |why: &str| Stop::Refused(ApiError::bad_request(why.to_owned()));
        loop {
            // Only the first `max` + CRLF bytes can hold this line's end.
            let window = &self.buf[..self.buf.len().min(max + 2)];
            if let Some(lf) = window.iter().position(|&b| b == b'\n') {
                if lf == 0 || window[lf - 1] != b'\r' {
                    return Err(refused("malformed chunked body: a bare LF ends a line"));
                }
                if lf - 1 > max {
                    return Err(refused("malformed chunked body: a line is too long"));
                }
                let line = self.take(lf + 1, deadline)?;
                return Ok(line[..lf - 1].to_vec());
            }
            if window.len() > max + 1 {
                return Err(refused("malformed chunked body: a line is too long"));
            }
            if !self.fill(deadline)? {
                return Err(Stop::Closed);
            }
        }
    }

    /// Takes the CRLF that must come next, refusing a wrong byte as soon as it arrives.
    fn crlf(&mut self, deadline: Instant) -> Result<(), Stop> {
        for want in [b'\r', b'\n'] {
            if self.buf.is_empty() && !self.fill(deadline)? {
                return Err(Stop::Closed);
            }
            if self.buf.first() != Some(&want) {
                return Err(Stop::Refused(ApiError::bad_request(
                    "malformed chunked body: a chunk does not end with CRLF",
                )));
            }
            self.buf.remove(0);
        }
        Ok(())
    }
}

/// Serves one connection until it closes.
pub fn serve(shared: &Shared, slot: &Slot) {
    let mut input = Input {
        stream: &slot.stream,
        buf: Vec::new(),
    };
    let mut first = true;
    loop {
        let idle = if first {
            shared.request_timeout
        } else {
            shared.idle_timeout
        };
        first = false;
        let keep_alive = match one_request(shared, slot, &mut input, idle) {
            Ok(keep) => keep,
            Err(Stop::Refused(e)) => {
                answer_and_close(slot, shared, &e);
                return;
            }
            Err(Stop::TimedOut) => {
                let e = ApiError::new(
                    408,
                    "timeout",
                    format!(
                        "the request did not arrive within {} s",
                        shared.request_timeout.as_secs()
                    ),
                );
                answer_and_close(slot, shared, &e);
                return;
            }
            Err(Stop::Closed | Stop::Idle) => return,
        };
        let now = shared.connections.now_ms();
        if !keep_alive || shared.stopping.load(Ordering::Acquire) || !slot.enter(BUSY, IDLE, now) {
            return;
        }
    }
}

fn answer_and_close(slot: &Slot, shared: &Shared, e: &ApiError) {
    if slot.enter(READING, BUSY, shared.connections.now_ms()) {
        let mut w = SlotWriter::answer(shared, slot);
        let _ = http::error(e).write_to(&mut w, false, false);
    }
}

/// Writes on a connection's socket, marking each write in the registry so that one that
/// stays blocked (a client not reading) can be closed to make room at the cap, and
/// bounding the writes in time: a whole answer within the request timeout, and each frame
/// of a stream within it too (from the frame's first byte, however many partial writes it
/// takes, so a client that stops reading is cut at the deadline, not after several).
struct SlotWriter<'a> {
    shared: &'a Shared,
    slot: &'a Slot,
    deadline: Option<Instant>,
    /// A stream's: the deadline is set by each frame's first write, cleared by its flush.
    per_frame: bool,
}

impl<'a> SlotWriter<'a> {
    /// For a complete answer: all of it within the request timeout.
    fn answer(shared: &'a Shared, slot: &'a Slot) -> SlotWriter<'a> {
        SlotWriter {
            shared,
            slot,
            deadline: Some(Instant::now() + shared.request_timeout),
            per_frame: false,
        }
    }

    /// For a stream: each frame within the request timeout, the stream as long as its
    /// attempt. The socket's send buffer is kept small, so what a stalled client leaves
    /// queued in the kernel stays bounded (see [`sockopt`]).
    fn stream(shared: &'a Shared, slot: &'a Slot) -> SlotWriter<'a> {
        sockopt::bound_send_buffer(&slot.stream);
        SlotWriter {
            shared,
            slot,
            deadline: None,
            per_frame: true,
        }
    }
}

/// One send of `buf` that gives up after `limit`: `TimedOut` when it does.
fn send_within(stream: &TcpStream, buf: &[u8], limit: Duration) -> io::Result<usize> {
    stream.set_write_timeout(Some(limit))?;
    // A send that ran out its SO_SNDTIMEO comes back as WouldBlock (EAGAIN) on Linux: it
    // is the same deadline passing, so callers see one kind for a stalled client (review
    // finding 1: such a stream was closed politely, its queued frames kept for minutes).
    let mut w: &TcpStream = stream;
    w.write(buf).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock => io::Error::from(io::ErrorKind::TimedOut),
        _ => e,
    })
}

impl Write for SlotWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let timeout = self.shared.request_timeout;
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + timeout);
        let limit = deadline.saturating_duration_since(Instant::now());
        if limit.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let closed = || io::Error::from(io::ErrorKind::ConnectionAborted);
        let now = self.shared.connections.now_ms();
        if !self.slot.enter(BUSY, WRITING, now) {
            return Err(closed());
        }
        let written = send_within(&self.slot.stream, buf, limit);
        if !self
            .slot
            .enter(WRITING, BUSY, self.shared.connections.now_ms())
        {
            return Err(closed());
        }
        written
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.per_frame {
            self.deadline = None;
        }
        Ok(())
    }
}

/// Reads, judges and answers one request; whether the connection may take another.
fn one_request(
    shared: &Shared,
    slot: &Slot,
    input: &mut Input,
    idle: Duration,
) -> Result<bool, Stop> {
    let (head, head_len, deadline) = read_head(shared, slot, input, idle)?;
    input.buf.drain(..head_len);
    let target = request::parse_target(&head.target).map_err(Stop::Refused)?;
    let framing = request::framing(&head).map_err(Stop::Refused)?;
    let method = head.method.to_ascii_uppercase();
    let head_only = method == "HEAD";
    let routed_method = if head_only { "GET".to_owned() } else { method };
    let api = &shared.api;
    // Who may ask is decided from the head alone, before a byte of the body is read.
    if let Err(e) = routes::admit(api, &routed_method, &head, &target) {
        busy(shared, slot)?;
        let body_pending = framing != Framing::None;
        return respond(
            shared,
            slot,
            &head,
            http::error(&e),
            !body_pending,
            head_only,
        );
    }
    if shared.stopping.load(Ordering::Acquire) {
        busy(shared, slot)?;
        let e = ApiError::new(503, "unavailable", "the server is shutting down");
        return respond(shared, slot, &head, http::error(&e), false, head_only);
    }
    if import::is_import(&routed_method, &target.segments) {
        let upload = upload::receive(shared, slot, input, &head, &target, framing)?;
        busy(shared, slot)?;
        let reply = import::handle(api, &head, upload);
        return deliver(shared, slot, &head, reply, head_only);
    }
    let body = read_body(shared, slot, input, &head, framing, deadline)?;
    busy(shared, slot)?;
    let req = Request {
        method: routed_method,
        head,
        target,
        body,
    };
    let reply = routes::handle(api, &req);
    deliver(shared, slot, &req.head, reply, head_only)
}

/// Writes what a route answered: a whole answer, or a stream.
fn deliver(
    shared: &Shared,
    slot: &Slot,
    head: &Head,
    reply: Reply,
    head_only: bool,
) -> Result<bool, Stop> {
    match reply {
        Reply::Answer(a) => respond(shared, slot, head, a, true, head_only),
        Reply::Lines(lines) => {
            log::debug!("{} {} -> 200 (lines)", head.method, head.target);
            let mut w = SlotWriter::stream(shared, slot);
            if let Err(e) = import::stream(&mut w, lines, head.minor_version >= 1) {
                log::debug!("an import's progress stream ended early: {e}");
            }
            Ok(false)
        }
        Reply::Stream(id, sub) => {
            log::debug!("{} {} -> 200 (stream)", head.method, head.target);
            let mut w = SlotWriter::stream(shared, slot);
            let chunked = head.minor_version >= 1;
            let streamed = if head_only {
                http::stream_head(&mut w, &id.to_string(), chunked)
            } else {
                http::stream(&mut w, &id.to_string(), sub, chunked)
            };
            if let Err(e) = streamed {
                if e.kind() == io::ErrorKind::TimedOut {
                    // A client that stopped reading: its queued frames are dropped with the
                    // connection at once (a reset), not kept in the kernel for minutes.
                    log::info!(
                        "a stream of {id} was cut: its client read nothing for {} s",
                        shared.request_timeout.as_secs()
                    );
                    sockopt::reset_on_close(&slot.stream);
                } else {
                    log::debug!("a stream of {id} ended early: {e}");
                }
            }
            Ok(false)
        }
    }
}

/// Marks the request as being answered (no longer evictable).
fn busy(shared: &Shared, slot: &Slot) -> Result<(), Stop> {
    if slot.enter(READING, BUSY, shared.connections.now_ms()) {
        Ok(())
    } else {
        Err(Stop::Closed)
    }
}

/// Writes an answer; the connection stays open only if the client wants it and nothing of
/// the request is left unread.
fn respond(
    shared: &Shared,
    slot: &Slot,
    head: &Head,
    answer: http::Answer,
    request_consumed: bool,
    head_only: bool,
) -> Result<bool, Stop> {
    let keep = request_consumed && head.keep_alive() && !shared.stopping.load(Ordering::Acquire);
    log::debug!("{} {} -> {}", head.method, head.target, answer.status);
    let mut w = SlotWriter::answer(shared, slot);
    match answer.write_to(&mut w, keep, head_only) {
        Ok(()) => Ok(keep),
        Err(_) => Err(Stop::Closed),
    }
}

/// Waits for a request's head: up to `idle` for its first byte, then up to the request
/// timeout for the rest.
fn read_head(
    shared: &Shared,
    slot: &Slot,
    input: &mut Input,
    idle: Duration,
) -> Result<(Head, usize, Instant), Stop> {
    let mut deadline = Instant::now() + idle;
    let mut started = false;
    loop {
        if !input.buf.is_empty() && !started {
            started = true;
            if !slot.enter(IDLE, READING, shared.connections.now_ms()) {
                return Err(Stop::Closed);
            }
            deadline = Instant::now() + shared.request_timeout;
        }
        if started {
            let too_large = || {
                Stop::Refused(ApiError::new(
                    431,
                    "too_large",
                    format!("the request head is over {MAX_HEAD_BYTES} bytes"),
                ))
            };
            // The head and the body share one deadline, from the request's first byte.
            match request::parse_head(&input.buf).map_err(Stop::Refused)? {
                Parsed::Complete(_, len) if len > MAX_HEAD_BYTES => return Err(too_large()),
                Parsed::Complete(head, len) => return Ok((head, len, deadline)),
                Parsed::Partial if input.buf.len() > MAX_HEAD_BYTES => return Err(too_large()),
                Parsed::Partial => {}
            }
        }
        match input.fill(deadline) {
            Ok(true) => {}
            Ok(false) => return Err(Stop::Closed),
            Err(Stop::TimedOut) if !started => return Err(Stop::Idle),
            Err(e) => return Err(e),
        }
    }
}

/// Reads the body under `--max-body-bytes` (a declared length over it is refused before a
/// byte is read), sending `100 Continue` first when the client waits for it.
fn read_body(
    shared: &Shared,
    slot: &Slot,
    input: &mut Input,
    head: &Head,
    framing: Framing,
    deadline: Instant,
) -> Result<Vec<u8>, Stop> {
    let max = shared.api.config.max_body_bytes;
    let too_large = || {
        Stop::Refused(ApiError::new(
            413,
            "too_large",
            format!("the body is over {max} bytes"),
        ))
    };
    if framing == Framing::None {
        return Ok(Vec::new());
    }
    if let Framing::Length(n) = framing {
        if n > max as u64 {
            return Err(too_large());
        }
    }
    if head.expects_continue() {
        let mut w: &TcpStream = &slot.stream;
        let _ = slot.stream.set_write_timeout(Some(shared.request_timeout));
        w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|_| Stop::Closed)?;
    }
    match framing {
        Framing::Length(n) => input.take(n as usize, deadline),
        _ => read_chunked(input, max, deadline).map_err(|e| match e {
            ChunkError::TooLarge => too_large(),
            ChunkError::Stop(s) => s,
        }),
    }
}

enum ChunkError {
    TooLarge,
    Stop(Stop),
}

impl From<Stop> for ChunkError {
    fn from(s: Stop) -> ChunkError {
        ChunkError::Stop(s)
    }
}

/// Decodes a chunked body (extensions ignored, trailers read and dropped).
fn read_chunked(input: &mut Input, max: usize, deadline: Instant) -> Result<Vec<u8>, ChunkError> {
    let bad = || {
        ChunkError::Stop(Stop::Refused(ApiError::bad_request(
            "malformed chunked body",
        )))
    };
    let mut body = Vec::new();
    loop {
        let line = input.line(MAX_CHUNK_LINE_BYTES, deadline)?;
        let size = chunk_size(&line).ok_or_else(bad)?;
        if size == 0 {
            // Trailer fields, then the empty line; each must be a plain field line, so no
            // reader can see a different end of the message.
            let mut trailer_bytes = 0;
            loop {
                let trailer = input.line(MAX_CHUNK_LINE_BYTES, deadline)?;
                if trailer.is_empty() {
                    return Ok(body);
                }
                trailer_bytes += trailer.len() + 2;
                if trailer_bytes > MAX_TRAILER_BYTES {
                    return Err(ChunkError::Stop(Stop::Refused(ApiError::bad_request(
                        format!("malformed chunked body: trailers over {MAX_TRAILER_BYTES} bytes"),
                    ))));
                }
                if !is_field_line(&trailer) {
                    return Err(bad());
                }
            }
        }
        if body.len() + size > max {
            return Err(ChunkError::TooLarge);
        }
        body.extend(input.take(size, deadline)?);
        input.crlf(deadline)?;
    }
}

/// A bare CR or LF, or another control character than HTAB, inside a line.
fn has_controls(line: &[u8]) -> bool {
    line.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
}

/// The size of a chunk-size line: 1 to 15 hex digits, then nothing or (after optional
/// spaces or tabs) `;` and extensions, which are ignored but may hold no control byte.
fn chunk_size(line: &[u8]) -> Option<usize> {
    if has_controls(line) {
        return None;
    }
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return None;
    }
    let rest = &line[digits..];
    let rest_ok = rest.is_empty() || {
        let pad = rest
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        rest.get(pad) == Some(&b';')
    };
    if !rest_ok {
        return None;
    }
    let hex = std::str::from_utf8(&line[..digits]).ok()?;
    usize::from_str_radix(hex, 16).ok()
}

/// A trailer line: `name: value`, the name a token, no control byte anywhere.
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    colon > 0 && line[..colon].iter().all(token) && !has_controls(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review finding 1: a client that reads nothing makes the send run out its timeout.
    #[test]
    fn a_send_to_a_client_that_reads_nothing_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        // The kernel's buffers fill within a few MB; a bound keeps a broken test finite.
        let mut failed = None;
        for _ in 0..4096 {
            if let Err(e) = send_within(&server, &chunk, Duration::from_millis(20)) {
                failed = Some(e.kind());
                break;
            }
        }
        assert_eq!(failed, Some(io::ErrorKind::TimedOut));
        drop(client);
    }

    #[test]
    fn chunk_size_lines_are_strict() {
        assert_eq!(chunk_size(b"1a"), Some(26));
        assert_eq!(chunk_size(b"0"), Some(0));
        assert_eq!(chunk_size(b"5;ext=1"), Some(5));
        assert_eq!(chunk_size(b"5 \t;ext"), Some(5));
        for bad in [
            &b""[..],
            b" 2",
            b"2 ",
            b"0x2",
            b"-2",
            b"2;\nxx",
            b"2;\x00\x01",
            b"2\xc2\xa0",
            b"1234567890abcdef",
            b"zz",
        ] {
            assert_eq!(chunk_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn trailers_are_plain_field_lines() {
        assert!(is_field_line(b"X-Trailer: t"));
        for bad in [
            &b"not a header"[..],
            b": v",
            b"X Y: v",
            b"X: a\x00",
            b"X: a\nGET /",
        ] {
            assert!(!is_field_line(bad), "{bad:?}");
        }
    }
}
