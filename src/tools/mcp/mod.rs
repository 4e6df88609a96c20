//! An MCP client (SPEC §13): JSON-RPC 2.0 over a server's stdio or MCP's Streamable HTTP
//! transport, synchronous and threaded like the rest of brain. [`Server::initialize`]
//! negotiates the protocol version and sends `notifications/initialized`;
//! [`Server::list_tools`] follows `nextCursor`; [`Server::call`] runs one tool under a
//! deadline and a cancel flag (a cancelled or timed-out call sends
//! `notifications/cancelled`). Every read from a server is bounded
//! ([`LinkOptions::max_message_bytes`], `--max-tool-result-bytes` × 4, SPEC §12); a server
//! that breaks the protocol is closed, and its owner starts it again. The process groups
//! of stdio servers are recorded ([`groups`]) so a brain killed with SIGKILL leaves none
//! running past its next start.

pub mod groups;
pub mod http;
pub mod jsonrpc;
pub mod stdio;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use jsonrpc::RpcError;

/// The protocol versions brain speaks, newest first; it asks for the first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

/// How many times `--max-tool-result-bytes` the largest message read from a server may
/// be (SPEC §12): a result is cut to that before a model sees it, so a message far past it
/// is a broken or hostile server, and never worth brain's memory.
pub const MESSAGE_BYTES_PER_RESULT_BYTE: usize = 4;

/// The largest message with the default `--max-tool-result-bytes` (256 KiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize =
    crate::tools::DEFAULT_MAX_TOOL_RESULT_BYTES * MESSAGE_BYTES_PER_RESULT_BYTE;

/// What every link to a server is run with.
#[derive(Clone, Debug)]
pub struct LinkOptions {
    /// The largest single message (a stdio line, an HTTP body or SSE event) read from a
    /// server; past it the message is not read further and the call fails saying so.
    pub max_message_bytes: usize,
    /// Where a stdio server's process group is recorded while it runs, if anywhere.
    pub groups: Option<Arc<groups::Groups>>,
}

impl LinkOptions {
    /// The bound `--max-tool-result-bytes` gives (SPEC §12: × 4).
    pub fn for_results(max_tool_result_bytes: usize) -> LinkOptions {
        LinkOptions {
            max_message_bytes: max_tool_result_bytes.saturating_mul(MESSAGE_BYTES_PER_RESULT_BYTE),
            groups: None,
        }
    }

    /// What a message over the bound is called in errors.
    pub(crate) fn too_long(&self, what: &str) -> String {
        format!(
            "{what} longer than {} bytes (brain reads at most {MESSAGE_BYTES_PER_RESULT_BYTE} \
             × --max-tool-result-bytes from a server)",
            self.max_message_bytes
        )
    }
}

impl Default for LinkOptions {
    fn default() -> LinkOptions {
        LinkOptions {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            groups: None,
        }
    }
}

/// The most tools read from one server's listing, whatever its pages say.
pub const MAX_LISTED_TOOLS: usize = 4096;

/// The most `tools/list` pages followed (a server whose cursor never ends is broken).
pub const MAX_TOOL_PAGES: usize = 100;

/// How a call to a server failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    #[error("cannot start the server: {0}")]
    Spawn(String),
    #[error("the server is gone: {0}")]
    Closed(String),
    #[error("the server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the call was cancelled")]
    Cancelled,
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    #[error("the server answered with an error: {0}")]
    Rpc(#[from] RpcError),
    #[error("the server answered HTTP {status}: {body}")]
    Http { status: u16, body: String },
}

/// A connection to one server, whichever the transport. Requests may be made from several
/// threads at once.
pub trait Link: Send + Sync {
    /// Sends a request and waits for its answer until `deadline`; gives up early (and tells
    /// the server with `notifications/cancelled`) when `cancel` is set.
    fn request(
        &self,
        method: &str,
        params: Option<Value>,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Value, McpError>;
    fn notify(&self, method: &str, params: Option<Value>) -> Result<(), McpError>;
    /// Whether the server said its tools changed since the last call (and forget it).
    fn take_tools_changed(&self) -> bool;
    /// `None` while the connection works, else why it ended.
    fn broken(&self) -> Option<String>;
    /// The negotiated version, for transports that repeat it (HTTP's header).
    fn set_protocol_version(&self, _version: &str) {}
    /// Ends the connection (and the process, for stdio).
    fn close(&self);
}

/// A shared link: its owner keeps one handle to close it (a server still starting, at
/// shutdown) while [`Server`] holds the other.
impl<L: Link + ?Sized> Link for std::sync::Arc<L> {
    fn request(
        &self,
        method: &str,
        params: Option<Value>,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Value, McpError> {
        (**self).request(method, params, deadline, cancel)
    }
    fn notify(&self, method: &str, params: Option<Value>) -> Result<(), McpError> {
        (**self).notify(method, params)
    }
    fn take_tools_changed(&self) -> bool {
        (**self).take_tools_changed()
    }
    fn broken(&self) -> Option<String> {
        (**self).broken()
    }
    fn set_protocol_version(&self, version: &str) {
        (**self).set_protocol_version(version);
    }
    fn close(&self) {
        (**self).close();
    }
}

/// How often a waiting request looks at its cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Waits for request `id`'s answer on `rx` until `deadline`, or until `cancel` is set; on
/// giving up, `tell` is handed the `notifications/cancelled` message for the server (the
/// transports send it their own way). `closed` names what a dropped sender means.
pub(crate) fn wait_for_answer(
    id: u64,
    rx: &std::sync::mpsc::Receiver<Result<Value, McpError>>,
    deadline: Instant,
    cancel: &AtomicBool,
    closed: &str,
    tell: &dyn Fn(String),
) -> Result<Value, McpError> {
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::RecvTimeoutError;
    let started = Instant::now();
    loop {
        let now = Instant::now();
        let gave_up = if cancel.load(Ordering::Relaxed) {
            Some(McpError::Cancelled)
        } else if now >= deadline {
            Some(McpError::Timeout(now - started))
        } else {
            None
        };
        if let Some(e) = gave_up {
            let reason = if e == McpError::Cancelled {
                "the user stopped the answer"
            } else {
                "timeout"
            };
            tell(jsonrpc::notification(
                "notifications/cancelled",
                Some(json!({"requestId": id, "reason": reason})),
            ));
            return Err(e);
        }
        match rx.recv_timeout(CANCEL_POLL.min(deadline - now)) {
            Ok(answer) => return answer,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Err(McpError::Closed(closed.into())),
        }
    }
}

/// A tool as a server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments (`inputSchema`), an object schema.
    pub input_schema: Value,
    /// `annotations.readOnlyHint`: the server says it changes nothing.
    pub read_only: bool,
}

/// What a call answered, as text for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallResult {
    pub text: String,
    /// The server said the tool failed (`isError: true`).
    pub is_error: bool,
}

/// An initialised server.
pub struct Server {
    link: Box<dyn Link>,
    pub protocol_version: String,
    /// `serverInfo` as the server sent it.
    pub info: Value,
}

impl Server {
    /// `initialize` and `notifications/initialized`, within `deadline`.
    pub fn initialize(link: Box<dyn Link>, deadline: Instant) -> Result<Server, McpError> {
        let never = AtomicBool::new(false);
        let params = json!({
            "protocolVersion": PROTOCOL_VERSIONS[0],
            "capabilities": {},
            "clientInfo": {"name": "brain", "version": env!("CARGO_PKG_VERSION")},
        });
        let answer = link.request("initialize", Some(params), deadline, &never)?;
        let version = negotiated(&answer)?;
        link.set_protocol_version(&version);
        link.notify("notifications/initialized", None)?;
        Ok(Server {
            link,
            protocol_version: version,
            info: answer.get("serverInfo").cloned().unwrap_or(Value::Null),
        })
    }

    /// Every tool, following `nextCursor`.
    pub fn list_tools(&self, deadline: Instant) -> Result<Vec<ToolInfo>, McpError> {
        let never = AtomicBool::new(false);
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = cursor.as_ref().map(|c| json!({"cursor": c}));
            let page = self.link.request("tools/list", params, deadline, &never)?;
            let listed = page
                .get("tools")
                .and_then(Value::as_array)
                .ok_or_else(|| McpError::Protocol("tools/list without `tools`".into()))?;
            for t in listed {
                tools.push(tool_info(t)?);
            }
            if tools.len() > MAX_LISTED_TOOLS {
                return Err(McpError::Protocol(format!(
                    "tools/list gave more than {MAX_LISTED_TOOLS} tools"
                )));
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(tools),
            }
        }
        Err(McpError::Protocol(format!(
            "tools/list did not end after {MAX_TOOL_PAGES} pages"
        )))
    }

    /// Runs one tool. `args` must be a JSON object.
    pub fn call(
        &self,
        tool: &str,
        args: Value,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<CallResult, McpError> {
        let params = json!({"name": tool, "arguments": args});
        let answer = self
            .link
            .request("tools/call", Some(params), deadline, cancel)?;
        Ok(render_result(&answer))
    }

    /// MCP's `ping`: whether the server still answers requests. Any answer counts, an
    /// error included (a server that does not know `ping` still listens).
    pub fn ping(&self, deadline: Instant) -> Result<(), McpError> {
        let never = AtomicBool::new(false);
        match self.link.request("ping", None, deadline, &never) {
            Ok(_) | Err(McpError::Rpc(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub fn take_tools_changed(&self) -> bool {
        self.link.take_tools_changed()
    }

    pub fn broken(&self) -> Option<String> {
        self.link.broken()
    }

    pub fn close(&self) {
        self.link.close();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.link.close();
    }
}

/// The version the server chose, if brain speaks it.
fn negotiated(answer: &Value) -> Result<String, McpError> {
    let version = answer
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::Protocol("initialize without `protocolVersion`".into()))?;
    if PROTOCOL_VERSIONS.contains(&version) {
        Ok(version.to_owned())
    } else {
        Err(McpError::Protocol(format!(
            "the server speaks protocol {version}; brain speaks {}",
            PROTOCOL_VERSIONS.join(", ")
        )))
    }
}

fn tool_info(t: &Value) -> Result<ToolInfo, McpError> {
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| McpError::Protocol("a tool without a name".into()))?;
    Ok(ToolInfo {
        name: name.to_owned(),
        description: t
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        input_schema: t
            .get("inputSchema")
            .filter(|s| s.is_object())
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
        read_only: t
            .pointer("/annotations/readOnlyHint")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// A `tools/call` result as text: `text` content joined by newlines; other content
/// described in brackets (`[image: image/png, 12,345 bytes]`); `structuredContent` alone
/// as its JSON.
pub fn render_result(answer: &Value) -> CallResult {
    let is_error = answer
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut parts: Vec<String> = Vec::new();
    for c in answer
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let field = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
        parts.push(match field("type") {
            "text" => field("text").to_owned(),
            kind @ ("image" | "audio") => format!(
                "[{kind}: {}, {} bytes]",
                field("mimeType"),
                grouped(base64_len(field("data")))
            ),
            "resource" => match c.pointer("/resource/text").and_then(Value::as_str) {
                Some(text) => text.to_owned(),
                None => format!(
                    "[resource: {}]",
                    c.pointer("/resource/uri")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                ),
            },
            "resource_link" => format!("[resource link: {}]", field("uri")),
            other => format!(
                "[{} content]",
                if other.is_empty() { "unknown" } else { other }
            ),
        });
    }
    if parts.is_empty()
        && let Some(s) = answer.get("structuredContent")
    {
        parts.push(s.to_string());
    }
    CallResult {
        text: parts.join("\n"),
        is_error,
    }
}

/// The decoded size of base64 text.
fn base64_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// `12345` → `12,345`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_render_as_text_for_the_model() {
        let r = render_result(&json!({
            "content": [
                {"type": "text", "text": "first"},
                {"type": "image", "mimeType": "image/png", "data": "A".repeat(16460)},
                {"type": "audio", "mimeType": "audio/wav", "data": "A".repeat(16459) + "="},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAA"}},
                {"type": "resource_link", "uri": "file:///c"},
                {"type": "video"},
            ],
            "isError": true,
        }));
        assert_eq!(
            r.text,
            "first\n[image: image/png, 12,345 bytes]\n[audio: audio/wav, 12,344 bytes]\ninside\n[resource: file:///b]\n\
             [resource link: file:///c]\n[video content]"
        );
        assert!(r.is_error);
        let s = render_result(&json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!(
            s,
            CallResult {
                text: r#"{"n":1}"#.into(),
                is_error: false
            }
        );
    }

    #[test]
    fn a_version_brain_does_not_speak_is_refused_by_name() {
        assert_eq!(
            negotiated(&json!({"protocolVersion": "2025-03-26"})),
            Ok("2025-03-26".to_owned())
        );
        let e = negotiated(&json!({"protocolVersion": "1999-01-01"})).unwrap_err();
        assert!(e.to_string().contains("1999-01-01"), "{e}");
        assert!(negotiated(&json!({})).is_err());
    }

    #[test]
    fn tools_without_a_schema_take_an_object_and_read_only_comes_from_annotations() {
        let t = tool_info(&json!({"name": "read", "annotations": {"readOnlyHint": true}})).unwrap();
        assert_eq!(t.input_schema, json!({"type": "object"}));
        assert!(t.read_only);
        assert!(tool_info(&json!({"description": "no name"})).is_err());
    }
}
