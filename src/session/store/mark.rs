//! What a running attempt's appends carry (I7 across servers, SPEC §16): which attempt
//! writes, and the seq of its own newest write. The write transaction compares it with
//! the log under the session's lock ([`super::WriteTxn::append_for`]): an attempt whose
//! session another attempt took since then appends nothing.
//!
//! Only another attempt's events count. Titles, archive flags, turn memories and
//! compactions are written beside a running attempt by design (a previous turn's title
//! job, a rename from the UI) and leave it its session.

use crate::session::events::{Decoded, Event, Payload, kind};

/// A running attempt's identity and its own newest seq (its user message, the seq its
/// retry started after, or its last checkpoint or tool event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptMark {
    pub turn: u64,
    pub attempt: u32,
    pub after: u64,
}

impl AttemptMark {
    /// Whether `e`, found after the mark, is another attempt's: a new turn's message, an
    /// edit's rewind, or an attempt event of another (turn, attempt).
    pub fn superseded_by(&self, e: &Event) -> bool {
        let of = match e.kind.as_str() {
            kind::USER_MESSAGE | kind::REWIND => return true,
            kind::PENDING_STATE
            | kind::ASSISTANT_TURN
            | kind::TURN_FAILED
            | kind::TOOL_EXECUTION
            | kind::PERMISSION_REQUESTED => attempt_of(e),
            // Its answer follows its question (caught above); the rest are not turns.
            _ => return false,
        };
        of != Some((self.turn, self.attempt))
    }
}

/// The (turn, attempt) an attempt event belongs to; `None` if it cannot be read (then it
/// counts as another's: I7 comes first).
fn attempt_of(e: &Event) -> Option<(u64, u32)> {
    match e.decode() {
        Decoded::Known(p) => match p {
            Payload::PendingState(p) => Some((p.turn, p.attempt)),
            Payload::AssistantTurn(p) => Some((p.turn, p.attempt)),
            Payload::TurnFailed(p) => Some((p.turn, p.attempt)),
            Payload::ToolExecution(p) => Some((p.turn, p.attempt)),
            Payload::PermissionRequested(p) => Some((p.turn, p.attempt)),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, payload: serde_json::Value) -> Event {
        Event {
            seq: 9,
            kind: kind.to_owned(),
            payload: payload.to_string(),
            created_at: "2026-01-01T00:00:00Z".to_owned(),
        }
    }

    #[test]
    fn only_another_attempts_events_supersede_a_mark() {
        let mark = AttemptMark {
            turn: 4,
            attempt: 2,
            after: 8,
        };
        let pending = |turn: u64, attempt: u32| {
            event(
                kind::PENDING_STATE,
                serde_json::json!({"turn": turn, "attempt": attempt, "text": "x"}),
            )
        };
        assert!(!mark.superseded_by(&pending(4, 2)), "its own");
        assert!(
            mark.superseded_by(&pending(4, 3)),
            "a retry of the same turn"
        );
        assert!(mark.superseded_by(&pending(11, 1)), "another turn");
        assert!(mark.superseded_by(&event(
            kind::USER_MESSAGE,
            serde_json::json!({"text": "hi"})
        )));
        assert!(!mark.superseded_by(&event(
            kind::SESSION_TITLED,
            serde_json::json!({"title": "t", "by": "auto"})
        )));
    }
}
