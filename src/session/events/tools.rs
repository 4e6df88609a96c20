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

/// What pairs a permission question with its answer, and nothing else of either: the
/// store files exactly this for each of them (V16's `questions_to_check`), so the recovery
/// at startup reads it without reading an event
/// ([`crate::session::projection::questions::any_open`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuestionKey {
    pub seq: u64,
    pub call_id: String,
    pub side: QuestionSide,
}

/// A question names its turn and attempt; an answer does since answers were keyed by them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuestionSide {
    Asked {
        turn: u64,
        attempt: u32,
    },
    Answered {
        turn: Option<u64>,
        attempt: Option<u32>,
    },
    /// An event that would not decode as its kind (a payload brain does not write): the
    /// pairing over decoded events leaves it out, and so does the one over keys.
    Unreadable,
}

impl QuestionKey {
    /// The key of a filed event, from its decoded payload: an event that would not decode
    /// as its kind is [`QuestionSide::Unreadable`], as the decoded log leaves it out.
    pub fn of(e: &super::Event) -> QuestionKey {
        let (call_id, side) = match e.decode() {
            super::Decoded::Known(super::Payload::PermissionRequested(q)) => (
                q.call_id,
                QuestionSide::Asked {
                    turn: q.turn,
                    attempt: q.attempt,
                },
            ),
            super::Decoded::Known(super::Payload::PermissionResolved(r)) => (
                r.call_id,
                QuestionSide::Answered {
                    turn: r.turn,
                    attempt: r.attempt,
                },
            ),
            _ => (String::new(), QuestionSide::Unreadable),
        };
        QuestionKey {
            seq: e.seq,
            call_id,
            side,
        }
    }
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

    /// A key is readable only where the event decodes as its kind: a question without
    /// its turn or attempt, or a field of the wrong type, is left out of the pairing as the
    /// decoded pairing leaves its event out.
    #[test]
    fn a_key_is_readable_only_where_the_event_decodes() {
        let (asked, answered) = ("permission_requested", "permission_resolved");
        let side = |kind: &str, fields: &str| {
            let event = super::super::Event {
                seq: 4,
                kind: kind.into(),
                payload: format!("{{{fields}}}"),
                created_at: "2026-12-07T00:00:00.000000Z".into(),
            };
            let key = QuestionKey::of(&event);
            assert_eq!(key.seq, 4);
            key.side
        };
        let q = r#""call_id":"c","name":"n","args":"""#;
        assert_eq!(
            side(asked, &format!(r#""turn":2,"attempt":1,{q}"#)),
            QuestionSide::Asked {
                turn: 2,
                attempt: 1
            }
        );
        let a = r#""call_id":"c","decision":"deny","by":"user""#;
        assert_eq!(
            side(answered, a),
            QuestionSide::Answered {
                turn: None,
                attempt: None
            }
        );
        let unreadable = QuestionSide::Unreadable;
        assert_eq!(side(asked, &format!(r#""attempt":1,{q}"#)), unreadable);
        assert_eq!(
            side(asked, &format!(r#""turn":2,"attempt":"1",{q}"#)),
            unreadable
        );
        let no_call = r#""turn":2,"attempt":1,"name":"n","args":"""#;
        assert_eq!(side(asked, no_call), unreadable);
        assert_eq!(side(answered, &format!(r#""turn":"2",{a}"#)), unreadable);
        let too_big = u64::from(u32::MAX) + 1;
        assert_eq!(
            side(answered, &format!(r#""attempt":{too_big},{a}"#)),
            unreadable
        );
        assert_eq!(side(answered, r#""call_id":"c","by":"user""#), unreadable);
        assert_eq!(side("user_message", r#""text":"hi""#), unreadable);
    }
}
