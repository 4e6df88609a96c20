//! Event kinds and their payloads (SPEC §3).
//!
//! A stored [`Event`] keeps its `kind` and its `payload` exactly as written (the raw JSON
//! text), so unknown kinds and payloads a newer brain wrote are carried through untouched
//! (export, import). [`Event::decode`] turns it into a typed [`Payload`] when the kind is
//! known and the payload decodes; a bad payload is [`Decoded::Unreadable`], never a panic,
//! so one bad row never makes a session unreadable.
//!
//! Payload structs ignore fields they do not know (forward compatibility) and give optional
//! fields defaults, so an older event still decodes after a field is added.

mod tools;
mod tree;

use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use tools::{
    CUT_MARKER, MAX_ARGS_BYTES, MAX_PREVIEW_CHARS, PermissionRequested, PermissionResolved,
    QuestionKey, QuestionSide, ResultDigest, ToolExecution, cut_bytes, resolved_by, status,
};
pub use tree::{ForkedFrom, ImportedFrom, Rewind};

/// The kind names as stored in `session_events.kind`.
pub mod kind {
    pub const SESSION_STARTED: &str = "session_started";
    pub const SESSION_TITLED: &str = "session_titled";
    pub const SESSION_ARCHIVED: &str = "session_archived";
    pub const USER_MESSAGE: &str = "user_message";
    pub const PENDING_STATE: &str = "pending_state";
    pub const ASSISTANT_TURN: &str = "assistant_turn";
    pub const TURN_FAILED: &str = "turn_failed";
    pub const TURN_MEMORY: &str = "turn_memory";
    pub const TOOL_EXECUTION: &str = "tool_execution";
    pub const COMPACTION_APPLIED: &str = "compaction_applied";
    pub const PERMISSION_REQUESTED: &str = "permission_requested";
    pub const PERMISSION_RESOLVED: &str = "permission_resolved";
    pub const REWIND: &str = "rewind";
}

/// A session's id: a UUID (v7 for new sessions, so ids sort by creation time), written in
/// its lowercase hyphenated form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(Uuid);

impl SessionId {
    /// A fresh, time-ordered id.
    pub fn generate() -> SessionId {
        SessionId(Uuid::now_v7())
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

/// A session id that is not a hyphenated UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a session id (expected a UUID like 0192e4a0-7b1c-7d3e-8f00-123456789abc)")]
pub struct BadSessionId;

impl FromStr for SessionId {
    type Err = BadSessionId;

    /// Accepts only the 36-character hyphenated form (either case), the one brain writes,
    /// so one session has exactly one spelling in URLs and files.
    fn from_str(s: &str) -> Result<SessionId, BadSessionId> {
        if s.len() != 36 {
            return Err(BadSessionId);
        }
        Uuid::try_parse(s).map(SessionId).map_err(|_| BadSessionId)
    }
}

impl TryFrom<String> for SessionId {
    type Error = BadSessionId;
    fn try_from(s: String) -> Result<SessionId, BadSessionId> {
        s.parse()
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> String {
        id.to_string()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.as_hyphenated().fmt(f)
    }
}

/// One row of the log, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub kind: String,
    /// The payload's JSON text exactly as written.
    pub payload: String,
    pub created_at: String,
}

impl Event {
    /// The typed payload, if the kind is known and the payload decodes.
    pub fn decode(&self) -> Decoded {
        Payload::decode(&self.kind, &self.payload)
    }
}

/// What an event's payload turned out to be.
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded {
    Known(Payload),
    /// A kind this brain does not know (written by a newer one): carried, not interpreted.
    UnknownKind,
    /// A known kind whose payload does not decode; the text says why.
    Unreadable(String),
}

/// Who named a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TitledBy {
    User,
    Auto,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStarted {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub system: String,
    /// Set on a fork (SPEC §14): the source session and the seq it was copied through.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "tree::lenient"
    )]
    pub forked_from: Option<ForkedFrom>,
    /// Set on a session imported from another tool (SPEC §15): the source and its id for
    /// the conversation.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "tree::lenient"
    )]
    pub imported_from: Option<ImportedFrom>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTitled {
    pub title: String,
    pub by: TitledBy,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionArchived {
    pub archived: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    pub text: String,
}

/// A checkpoint of a streaming attempt: the text (and reasoning) that arrived since the
/// attempt's previous checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingState {
    pub turn: u64,
    pub attempt: u32,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// On the last checkpoint of an attempt that ended abnormally: why it ended (so a
    /// reader can tell "you stopped it" from "the model was cut off"). Absent on the
    /// periodic ones, and when the process died before it could say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<AttemptEnd>,
    /// The step (provider call, SPEC §13) the text came from: the transcript shows each
    /// step's text before that step's tool calls. A step's text is all saved before its
    /// calls run, so no checkpoint spans two steps. Absent in logs of older brains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
}

/// Why an interrupted attempt ended: `stopped` (a user's stop), `shutdown`, or the
/// provider's or brain's error code, with its message for a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptEnd {
    pub code: String,
    pub message: String,
}

/// Token usage, normalised at the provider boundary: `input_tokens` excludes cache reads
/// and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantTurn {
    pub turn: u64,
    pub attempt: u32,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    pub provider: String,
    pub model: String,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default)]
    pub ledger_id: Option<i64>,
    /// How many provider calls (steps) the attempt took: more than one when the model
    /// used tools (SPEC §13); `usage` is their sum.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub steps: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnFailed {
    pub turn: u64,
    pub attempt: u32,
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryFailure {
    pub what: String,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnMemory {
    pub turn: u64,
    pub attempt: u32,
    #[serde(default)]
    pub files_changed: Vec<String>,
    #[serde(default)]
    pub failures: Vec<MemoryFailure>,
    #[serde(default)]
    pub key_findings: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionApplied {
    pub summary: String,
    pub replaces_through_seq: u64,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub model: String,
    /// How the summary was written: [`method::LLM`] or [`method::EXTRACTIVE`]. Events
    /// written before the field existed were all LLM summaries. A string, not an enum, so
    /// a method a newer brain writes still decodes (an unreadable compaction would put
    /// everything it replaced back into the context).
    #[serde(default = "method::llm")]
    pub method: String,
}

/// The ways a compaction's summary is written (`compaction_applied.method`).
pub mod method {
    /// A summary written by the summarize model.
    pub const LLM: &str = "llm";
    /// A deterministic digest, written when no model could summarise.
    pub const EXTRACTIVE: &str = "extractive";

    pub(super) fn llm() -> String {
        LLM.to_owned()
    }
}

/// A known event's payload.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    SessionStarted(SessionStarted),
    SessionTitled(SessionTitled),
    SessionArchived(SessionArchived),
    UserMessage(UserMessage),
    PendingState(PendingState),
    AssistantTurn(AssistantTurn),
    TurnFailed(TurnFailed),
    TurnMemory(TurnMemory),
    ToolExecution(ToolExecution),
    PermissionRequested(PermissionRequested),
    PermissionResolved(PermissionResolved),
    CompactionApplied(CompactionApplied),
    Rewind(Rewind),
}

/// How appending an event changes the `sessions` cache row (SPEC §3, §6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheEffect {
    /// The session's title becomes this.
    pub title: Option<Option<String>>,
    /// The session's archived flag becomes this.
    pub archived: Option<bool>,
    /// `updated_at` becomes the event's `created_at`.
    pub touches_updated_at: bool,
}

impl Payload {
    pub fn kind(&self) -> &'static str {
        match self {
            Payload::SessionStarted(_) => kind::SESSION_STARTED,
            Payload::SessionTitled(_) => kind::SESSION_TITLED,
            Payload::SessionArchived(_) => kind::SESSION_ARCHIVED,
            Payload::UserMessage(_) => kind::USER_MESSAGE,
            Payload::PendingState(_) => kind::PENDING_STATE,
            Payload::AssistantTurn(_) => kind::ASSISTANT_TURN,
            Payload::TurnFailed(_) => kind::TURN_FAILED,
            Payload::TurnMemory(_) => kind::TURN_MEMORY,
            Payload::ToolExecution(_) => kind::TOOL_EXECUTION,
            Payload::PermissionRequested(_) => kind::PERMISSION_REQUESTED,
            Payload::PermissionResolved(_) => kind::PERMISSION_RESOLVED,
            Payload::CompactionApplied(_) => kind::COMPACTION_APPLIED,
            Payload::Rewind(_) => kind::REWIND,
        }
    }

    /// The payload as the JSON object text that is stored.
    pub fn to_json(&self) -> String {
        let value = match self {
            Payload::SessionStarted(p) => serde_json::to_value(p),
            Payload::SessionTitled(p) => serde_json::to_value(p),
            Payload::SessionArchived(p) => serde_json::to_value(p),
            Payload::UserMessage(p) => serde_json::to_value(p),
            Payload::PendingState(p) => serde_json::to_value(p),
            Payload::AssistantTurn(p) => serde_json::to_value(p),
            Payload::TurnFailed(p) => serde_json::to_value(p),
            Payload::TurnMemory(p) => serde_json::to_value(p),
            Payload::ToolExecution(p) => serde_json::to_value(p),
            Payload::PermissionRequested(p) => serde_json::to_value(p),
            Payload::PermissionResolved(p) => serde_json::to_value(p),
            Payload::CompactionApplied(p) => serde_json::to_value(p),
            Payload::Rewind(p) => serde_json::to_value(p),
        };
        // These are plain structs of strings, numbers and JSON values: serialising them to a
        // Value cannot fail, and the fallback keeps the stored payload an object regardless.
        value.map_or_else(|_| "{}".to_owned(), |v| v.to_string())
    }

    /// Decodes a stored payload of the given kind.
    pub fn decode(kind_name: &str, payload: &str) -> Decoded {
        fn parse<T: DeserializeOwned>(payload: &str, wrap: fn(T) -> Payload) -> Decoded {
            match serde_json::from_str::<T>(payload) {
                Ok(p) => Decoded::Known(wrap(p)),
                Err(e) => Decoded::Unreadable(e.to_string()),
            }
        }
        match kind_name {
            kind::SESSION_STARTED => parse(payload, Payload::SessionStarted),
            kind::SESSION_TITLED => parse(payload, Payload::SessionTitled),
            kind::SESSION_ARCHIVED => parse(payload, Payload::SessionArchived),
            kind::USER_MESSAGE => parse(payload, Payload::UserMessage),
            kind::PENDING_STATE => parse(payload, Payload::PendingState),
            kind::ASSISTANT_TURN => parse(payload, Payload::AssistantTurn),
            kind::TURN_FAILED => parse(payload, Payload::TurnFailed),
            kind::TURN_MEMORY => parse(payload, Payload::TurnMemory),
            kind::TOOL_EXECUTION => parse(payload, Payload::ToolExecution),
            kind::PERMISSION_REQUESTED => parse(payload, Payload::PermissionRequested),
            kind::PERMISSION_RESOLVED => parse(payload, Payload::PermissionResolved),
            kind::COMPACTION_APPLIED => parse(payload, Payload::CompactionApplied),
            kind::REWIND => parse(payload, Payload::Rewind),
            _ => Decoded::UnknownKind,
        }
    }

    /// What this event does to its session's cache row.
    ///
    /// `updated_at` moves on creation, a user message and an attempt's end (SPEC §6).
    /// Checkpoints do not (a minute of streaming must not reorder the list 30 times); an
    /// attempt that ends interrupted moves it with [`Writer::touch`](crate::session::store::Writer::touch)
    /// beside its final checkpoint. Renames, archiving and background work (turn memory,
    /// compaction) leave the list order alone.
    pub fn cache_effect(&self) -> CacheEffect {
        match self {
            Payload::SessionStarted(p) => CacheEffect {
                title: Some(p.title.clone()),
                archived: Some(false),
                touches_updated_at: true,
            },
            Payload::SessionTitled(p) => CacheEffect {
                title: Some(Some(p.title.clone())),
                ..CacheEffect::default()
            },
            Payload::SessionArchived(p) => CacheEffect {
                archived: Some(p.archived),
                ..CacheEffect::default()
            },
            Payload::UserMessage(_) | Payload::AssistantTurn(_) | Payload::TurnFailed(_) => {
                CacheEffect {
                    touches_updated_at: true,
                    ..CacheEffect::default()
                }
            }
            Payload::PendingState(_)
            | Payload::TurnMemory(_)
            | Payload::ToolExecution(_)
            | Payload::PermissionRequested(_)
            | Payload::PermissionResolved(_)
            | Payload::CompactionApplied(_)
            | Payload::Rewind(_) => CacheEffect::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(p: Payload) {
        let json = p.to_json();
        assert!(json.starts_with('{'), "{json}");
        assert_eq!(Payload::decode(p.kind(), &json), Decoded::Known(p));
    }

    #[test]
    fn every_kind_round_trips_through_json() {
        round_trip(Payload::SessionStarted(SessionStarted {
            title: Some("t".into()),
            system: "be brief".into(),
            forked_from: Some(ForkedFrom {
                session_id: "0192e4a0-7b1c-7d3e-8f00-123456789abc".into(),
                seq: 7,
            }),
            imported_from: Some(ImportedFrom {
                source: "chatgpt".into(),
                id: "c-1".into(),
            }),
        }));
        round_trip(Payload::SessionStarted(SessionStarted {
            title: None,
            system: String::new(),
            forked_from: None,
            imported_from: None,
        }));
        round_trip(Payload::Rewind(Rewind {
            to_seq: 4,
            edited_seq: 5,
        }));
        round_trip(Payload::SessionTitled(SessionTitled {
            title: "x".into(),
            by: TitledBy::Auto,
        }));
        round_trip(Payload::SessionArchived(SessionArchived { archived: true }));
        round_trip(Payload::UserMessage(UserMessage { text: "hi".into() }));
        round_trip(Payload::PendingState(PendingState {
            turn: 2,
            attempt: 1,
            text: "par".into(),
            reasoning: Some("hmm".into()),
            ended: None,
            step: None,
        }));
        round_trip(Payload::AssistantTurn(AssistantTurn {
            turn: 2,
            attempt: 3,
            text: "answer".into(),
            reasoning: None,
            provider: "http://127.0.0.1:8080/v1".into(),
            model: "m".into(),
            finish_reason: Some("stop".into()),
            usage: Usage {
                input_tokens: 1,
                output_tokens: 2,
                cache_read_tokens: 3,
                cache_write_tokens: 4,
            },
            duration_ms: 5,
            ledger_id: Some(6),
            steps: 1,
        }));
        round_trip(Payload::TurnFailed(TurnFailed {
            turn: 2,
            attempt: 1,
            code: "empty_answer".into(),
            message: "no text".into(),
            reasoning: Some("thought".into()),
        }));
        round_trip(Payload::TurnMemory(TurnMemory {
            turn: 2,
            attempt: 1,
            files_changed: vec!["a.rs".into()],
            failures: vec![MemoryFailure {
                what: "build".into(),
                why: "typo".into(),
            }],
            key_findings: vec!["x".into()],
        }));
        round_trip(Payload::ToolExecution(ToolExecution {
            turn: 2,
            attempt: 1,
            step: 1,
            call_id: "c1".into(),
            name: "fs__ls".into(),
            server: "fs".into(),
            args: r#"{"path": "/"}"#.into(),
            status: status::OK.into(),
            result_digest: ResultDigest {
                bytes: 3,
                sha256: "abc".into(),
                preview: "a b".into(),
            },
            error: None,
            duration_ms: 4,
        }));
        round_trip(Payload::PermissionRequested(PermissionRequested {
            turn: 2,
            attempt: 1,
            call_id: "c1".into(),
            name: "fs__write".into(),
            args: "{}".into(),
        }));
        round_trip(Payload::PermissionResolved(PermissionResolved {
            turn: Some(2),
            attempt: Some(1),
            call_id: "c1".into(),
            decision: "allow".into(),
            by: resolved_by::USER.into(),
            remember: true,
            answer_id: Some("a1".into()),
        }));
        round_trip(Payload::CompactionApplied(CompactionApplied {
            summary: "s".into(),
            replaces_through_seq: 9,
            tokens_before: 100,
            tokens_after: 10,
            model: "m".into(),
            method: method::EXTRACTIVE.into(),
        }));
    }

    #[test]
    fn a_bad_forked_from_never_makes_session_started_unreadable() {
        let d = Payload::decode(
            kind::SESSION_STARTED,
            r#"{"system":"s","forked_from":{"session_id":5}}"#,
        );
        assert!(
            matches!(&d, Decoded::Known(Payload::SessionStarted(s)) if s.system == "s" && s.forked_from.is_none()),
            "{d:?}"
        );
    }

    #[test]
    fn unknown_kind_is_carried_not_interpreted() {
        assert_eq!(
            Payload::decode("from_the_future", "{}"),
            Decoded::UnknownKind
        );
    }

    #[test]
    fn bad_payload_is_unreadable_not_a_panic() {
        for bad in ["", "[", "{\"text\": 5}", "[]", "null", "{\"txt\": \"a\"}"] {
            assert!(
                matches!(
                    Payload::decode(kind::USER_MESSAGE, bad),
                    Decoded::Unreadable(_)
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn unknown_fields_and_missing_optionals_still_decode() {
        let d = Payload::decode(
            kind::ASSISTANT_TURN,
            r#"{"turn":2,"attempt":1,"text":"a","provider":"p","model":"m","new_field":[1]}"#,
        );
        let Decoded::Known(Payload::AssistantTurn(a)) = d else {
            panic!("{d:?}")
        };
        assert_eq!(a.usage, Usage::default());
        assert_eq!(a.finish_reason, None);
    }

    #[test]
    fn session_id_accepts_only_the_hyphenated_form() {
        let id = SessionId::generate();
        let text = id.to_string();
        assert_eq!(text.len(), 36);
        assert_eq!(text.parse::<SessionId>(), Ok(id));
        assert_eq!(text.to_uppercase().parse::<SessionId>(), Ok(id));
        let simple = id.as_uuid().simple().to_string();
        for bad in [
            "",
            "x",
            "../etc/passwd",
            simple.as_str(),
            "{00000000-0000-0000-0000-000000000000}",
        ] {
            assert_eq!(bad.parse::<SessionId>(), Err(BadSessionId), "{bad:?}");
        }
    }

    #[test]
    fn new_ids_sort_by_creation() {
        let a = SessionId::generate();
        let b = SessionId::generate();
        assert!(a.to_string() < b.to_string());
    }

    #[test]
    fn background_work_and_renames_do_not_move_updated_at() {
        let memory = Payload::TurnMemory(TurnMemory {
            turn: 1,
            attempt: 1,
            files_changed: vec![],
            failures: vec![],
            key_findings: vec![],
        });
        assert!(!memory.cache_effect().touches_updated_at);
        let rename = Payload::SessionTitled(SessionTitled {
            title: "n".into(),
            by: TitledBy::User,
        });
        assert_eq!(rename.cache_effect().title, Some(Some("n".into())));
        assert!(!rename.cache_effect().touches_updated_at);
        let user = Payload::UserMessage(UserMessage { text: "q".into() });
        assert!(user.cache_effect().touches_updated_at);
        let checkpoint = Payload::PendingState(PendingState {
            turn: 2,
            attempt: 1,
            text: "partial".into(),
            reasoning: None,
            ended: None,
            step: None,
        });
        assert!(!checkpoint.cache_effect().touches_updated_at);
    }

    #[test]
    fn a_compaction_written_before_method_existed_decodes_as_llm() {
        let old = r#"{"summary":"s","replaces_through_seq":9,"tokens_before":100,"tokens_after":10,"model":"m"}"#;
        let Decoded::Known(Payload::CompactionApplied(c)) =
            Payload::decode(kind::COMPACTION_APPLIED, old)
        else {
            panic!("an old compaction no longer decodes")
        };
        assert_eq!(c.method, method::LLM);
        // A method from a newer brain still decodes: the compaction keeps its boundary.
        let newer = old.replace(r#""model":"m""#, r#""model":"m","method":"abstractive""#);
        assert!(matches!(
            Payload::decode(kind::COMPACTION_APPLIED, &newer),
            Decoded::Known(Payload::CompactionApplied(c)) if c.method == "abstractive"
        ));
    }
}
