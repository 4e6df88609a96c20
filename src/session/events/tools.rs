//! The payloads of tool traffic (SPEC §3, §13): what a call did (`tool_execution`, with a
//! digest of its result, never the result itself) and the consent asked for and given
//! (`permission_requested`, `permission_resolved`).

use serde::{Deserialize, Serialize};

/// How a tool call ended (`tool_execution.status`).
pub mod status {
    pub const OK: &str = "ok";
    pub const ERROR: &str = "error";
    pub const DENIED: &str = "denied";
    pub const TIMEOUT: &str = "timeout";
    pub const CANCELLED: &str = "cancelled";
}

/// A digest of a result: enough to recognise and skim it, small enough for the log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultDigest {
    #[serde(default)]
    pub bytes: u64,
    /// Lowercase hex SHA-256 of the full result text.
    #[serde(default)]
    pub sha256: String,
    /// The result's first characters (at most `MAX_PREVIEW_CHARS`).
    #[serde(default)]
    pub preview: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolExecution {
    #[serde(default)]
    pub turn: u64,
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub step: u32,
    pub call_id: String,
    /// The name offered to the model (`SERVER__tool`, or a built-in's name).
    pub name: String,
    /// The MCP server's name, or `builtin`.
    #[serde(default)]
    pub server: String,
    /// The arguments as the model sent them (JSON text, maybe not valid), cut at
    /// `MAX_ARGS_BYTES` with a marker.
    #[serde(default)]
    pub args: String,
    /// One of [`status`].
    pub status: String,
    #[serde(default)]
    pub result_digest: ResultDigest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub duration_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionRequested {
    pub turn: u64,
    pub attempt: u32,
    pub call_id: String,
    pub name: String,
    #[serde(default)]
    pub args: String,
}

/// Who or what answered a permission question (`permission_resolved.by`).
pub mod resolved_by {
    pub const USER: &str = "user";
    pub const TIMEOUT: &str = "timeout";
    pub const STOP: &str = "stop";
    pub const SHUTDOWN: &str = "shutdown";
    /// The attempt was gone when brain started again (it was killed while asking).
    pub const RESTART: &str = "restart";
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionResolved {
    /// The question's turn and attempt: a call id names a call only within its attempt (a
    /// provider that sends no ids gets `call_0` every turn). Absent in logs written before
    /// they were added; such an answer belongs to the newest unanswered question of its
    /// call id before it ([`crate::session::projection::Questions`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    pub call_id: String,
    /// `allow` or `deny`.
    pub decision: String,
    /// One of [`resolved_by`].
    pub by: String,
    /// Allow this tool for the rest of the session.
    #[serde(default)]
    pub remember: bool,
    /// The id of the answer that decided, when it came through another server (team mode):
    /// that server reads it back to tell its caller whether theirs was the first answer
    /// (200) or a later one (409 `already_decided`), even when both said the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_id: Option<String>,
}

/// The most of a result kept in its digest's preview, in characters.
pub const MAX_PREVIEW_CHARS: usize = 4000;
/// The most of a call's arguments kept in the log, in bytes.
pub const MAX_ARGS_BYTES: usize = 16 * 1024;
/// What marks arguments cut at [`MAX_ARGS_BYTES`].
pub const CUT_MARKER: &str = "…[cut]";

/// `text` cut to at most `max` bytes on a char boundary, with [`CUT_MARKER`] when cut.
pub fn cut_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(CUT_MARKER.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT_MARKER}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_cut_on_a_char_boundary_with_a_marker() {
        assert_eq!(cut_bytes("short", 16), "short");
        let long = "é".repeat(20);
        let cut = cut_bytes(&long, 16);
        assert!(cut.len() <= 16 && cut.ends_with(CUT_MARKER), "{cut}");
        assert!(cut.starts_with("é"));
    }
}
