//! MCP's Streamable HTTP transport: every message is a POST to the server's one URL with
//! `Accept: application/json, text/event-stream`; a request's answer is one JSON body or
//! an SSE stream that carries it (possibly after the server's own notifications and
//! requests). The `Mcp-Session-Id` a server gives at `initialize` and the negotiated
//! `MCP-Protocol-Version` go on every later message; a 404 on a session means it expired
//! (the connection counts as broken and its owner initialises again). Each request runs on
//! its own thread so the caller can stop waiting at its deadline or on cancel.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::jsonrpc::{self, Incoming};
use super::{Link, LinkOptions, McpError};
use crate::provider::sse::{SseError, SseParser};

/// Connecting to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A notification's POST, or the closing DELETE.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of an error body is kept for the message.
const ERROR_BODY_BYTES: usize = 2048;

struct Shared {
    url: String,
    headers: Vec<(String, String)>,
    agent: ureq::Agent,
    session: Mutex<Option<String>>,
    protocol: Mutex<Option<String>>,
    broken: Mutex<Option<String>>,
    tools_changed: AtomicBool,
    /// The largest body or event read (the rest is never read).
    limits: LinkOptions,
}

/// A server at a URL.
pub struct HttpLink {
    shared: Arc<Shared>,
    next_id: AtomicU64,
}

impl HttpLink {
    /// `headers` are sent with every message (e.g. `Authorization`); `opts` bound what is
    /// read.
    pub fn new(url: &str, headers: Vec<(String, String)>, opts: &LinkOptions) -> HttpLink {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        HttpLink {
            shared: Arc::new(Shared {
                url: url.to_owned(),
                headers,
                agent,
                session: Mutex::new(None),
                protocol: Mutex::new(None),
                broken: Mutex::new(None),
                tools_changed: AtomicBool::new(false),
                limits: LinkOptions {
                    groups: None,
                    ..opts.clone()
                },
            }),
            next_id: AtomicU64::new(1),
        }
    }
}

impl Shared {
    fn post(
        &self,
        body: String,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, McpError> {
        let mut r = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        for (k, v) in &self.headers {
            r = r.header(k.as_str(), v.as_str());
        }
        if let Some(s) = self.session.lock().as_deref() {
            r = r.header("Mcp-Session-Id", s);
        }
        if let Some(v) = self.protocol.lock().as_deref() {
            r = r.header("MCP-Protocol-Version", v);
        }
        let resp = r
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(body)
            .map_err(|e| match e {
                ureq::Error::Timeout(_) => McpError::Timeout(timeout),
                other => self.gone(other.to_string()),
            })?;
        if let Some(id) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            *self.session.lock() = Some(id.to_owned());
        }
        let status = resp.status().as_u16();
        if status == 404 && self.session.lock().is_some() {
            let why = "the server ended its session (HTTP 404)".to_owned();
            *self.broken.lock() = Some(why.clone());
            return Err(McpError::Closed(why));
        }
        if !(200..300).contains(&status) {
            let mut text = String::new();
            let _ = resp
                .into_body()
                .into_reader()
                .take(ERROR_BODY_BYTES as u64)
                .read_to_string(&mut text);
            return Err(McpError::Http {
                status,
                body: text.trim().to_owned(),
            });
        }
        Ok(resp)
    }

    /// The server cannot be reached (refused, reset): the connection counts as broken, so
    /// its supervisor reports it and connects again (a server that restarted has
    /// forgotten the session anyway).
    fn gone(&self, why: String) -> McpError {
        *self.broken.lock() = Some(why.clone());
        McpError::Closed(why)
    }

    /// One request, start to end: POST, then its answer from the JSON body or the stream.
    fn exchange(&self, id: u64, body: String, timeout: Duration) -> Result<Value, McpError> {
        let deadline = Instant::now() + timeout;
        let resp = self.post(body, timeout)?;
        let is_stream = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let max = self.limits.max_message_bytes;
        // A body is read through `take`, one byte past `max`: a longer one is seen to be
        // longer without being held.
        let mut reader = resp.into_body().into_reader();
        if !is_stream {
            let mut bytes = Vec::new();
            reader
                .by_ref()
                .take(max as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| McpError::Closed(e.to_string()))?;
            if bytes.len() > max {
                return Err(McpError::Protocol(self.limits.too_long("an answer")));
            }
            let text = String::from_utf8_lossy(&bytes);
            return self.find_answer(id, &text, deadline)?.ok_or_else(|| {
                McpError::Protocol("the answer is not the response to the request".into())
            });
        }
        let mut parser = SseParser::with_limit(max);
        let mut buf = vec![0u8; 16 * 1024];
        let mut frames = Vec::new();
        loop {
            let n = reader.read(&mut buf).map_err(|e| {
                // Its deadline passed mid-stream: a slow tool, not a dead server.
                if e.kind() == std::io::ErrorKind::TimedOut {
                    McpError::Timeout(timeout)
                } else {
                    self.gone(format!("its stream broke: {e}"))
                }
            })?;
            if n == 0 {
                return Err(McpError::Closed(
                    "its stream ended without the answer".into(),
                ));
            }
            parser.feed(&buf[..n], &mut frames).map_err(|e| match e {
                SseError::TooLarge(_) => McpError::Protocol(self.limits.too_long("an event")),
                other => McpError::Protocol(other.to_string()),
            })?;
            for f in frames.drain(..) {
                if f.data.trim().is_empty() {
                    continue;
                }
                if let Some(answer) = self.find_answer(id, &f.data, deadline)? {
                    return Ok(answer);
                }
            }
            // The caller has given up by now: a server that keeps the stream busy (pings
            // every few seconds) does not keep this thread alive past the call's deadline.
            if Instant::now() >= deadline {
                return Err(McpError::Timeout(timeout));
            }
        }
    }

    /// Handles every message in `text`; the answer to `id` if it is there.
    fn find_answer(
        &self,
        id: u64,
        text: &str,
        deadline: Instant,
    ) -> Result<Option<Value>, McpError> {
        let messages = jsonrpc::parse(text).map_err(|e| McpError::Protocol(e.to_string()))?;
        let mut answer = None;
        for m in messages {
            match m {
                Incoming::Response { id: got, result } if got == id => {
                    answer = Some(result.map_err(McpError::Rpc)?);
                }
                Incoming::Response { .. } => {}
                Incoming::Request {
                    id: theirs, method, ..
                } => {
                    let reply = match method.as_str() {
                        "ping" => Ok(json!({})),
                        "roots/list" => Ok(json!({"roots": []})),
                        _ => Err((jsonrpc::METHOD_NOT_FOUND, "brain does not offer this")),
                    };
                    // Answered within what is left of the call's time, never longer.
                    let left = deadline.saturating_duration_since(Instant::now());
                    if !left.is_zero() {
                        let _ =
                            self.post(jsonrpc::response(&theirs, reply), left.min(NOTIFY_TIMEOUT));
                    }
                }
                Incoming::Notification { method, .. } => {
                    if method == "notifications/tools/list_changed" {
                        self.tools_changed.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(answer)
    }
}

impl Link for HttpLink {
    fn request(
        &self,
        method: &str,
        params: Option<Value>,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Value, McpError> {
        if let Some(why) = self.shared.broken.lock().clone() {
            return Err(McpError::Closed(why));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = jsonrpc::request(id, method, params);
        let timeout = deadline.saturating_duration_since(Instant::now());
        let (tx, rx) = mpsc::channel();
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("mcp-http".into())
            .spawn(move || {
                let _ = tx.send(shared.exchange(id, body, timeout));
            })
            .map_err(|e| McpError::Closed(format!("cannot start a thread: {e}")))?;
        // On giving up, the request's thread ends at its own timeout; the server is told
        // now.
        super::wait_for_answer(
            id,
            &rx,
            deadline,
            cancel,
            "the request's thread ended",
            &|note| {
                let _ = self.shared.post(note, NOTIFY_TIMEOUT);
            },
        )
    }

    fn notify(&self, method: &str, params: Option<Value>) -> Result<(), McpError> {
        let resp = self
            .shared
            .post(jsonrpc::notification(method, params), NOTIFY_TIMEOUT)?;
        // 202 with no body is the rule; whatever else came is not needed.
        drop(resp);
        Ok(())
    }

    fn take_tools_changed(&self) -> bool {
        self.shared.tools_changed.swap(false, Ordering::Relaxed)
    }

    fn broken(&self) -> Option<String> {
        self.shared.broken.lock().clone()
    }

    fn set_protocol_version(&self, version: &str) {
        *self.shared.protocol.lock() = Some(version.to_owned());
    }

    /// Ends the session on the server (DELETE, best effort).
    fn close(&self) {
        let Some(session) = self.shared.session.lock().take() else {
            return;
        };
        let mut r = self
            .shared
            .agent
            .delete(&self.shared.url)
            .header("Mcp-Session-Id", &session);
        for (k, v) in &self.shared.headers {
            r = r.header(k.as_str(), v.as_str());
        }
        let _ = r
            .config()
            .timeout_global(Some(NOTIFY_TIMEOUT))
            .build()
            .call();
        *self.shared.broken.lock() = Some("closed by brain".into());
    }
}

impl Drop for HttpLink {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_cannot_be_reached_breaks_the_link() {
        // A port nothing listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(9);
        let link = HttpLink::new(
            &format!("http://127.0.0.1:{port}/mcp"),
            Vec::new(),
            &LinkOptions::default(),
        );
        assert_eq!(link.broken(), None);
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = link.request("tools/list", None, deadline, &AtomicBool::new(false));
        assert!(matches!(got, Err(McpError::Closed(_))), "{got:?}");
        assert!(link.broken().is_some(), "its supervisor must see it gone");
    }
}
