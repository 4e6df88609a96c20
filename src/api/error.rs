//! The one place where errors become HTTP answers (SPEC §7): a status, a code, and a
//! message for a person. Internal detail goes to the log, never to the client.

use serde_json::json;

use crate::chat::engine::EngineError;
use crate::import::apply::ImportError;
use crate::import::archive::ArchiveError;
use crate::import::brain::BrainError;
use crate::import::file::FileError;
use crate::session::StoreError;
use crate::session::cursor::CursorError;
use crate::session::projection::BadForkPoint;

/// An answer that is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// Fields the body carries beside `error` and `message` (what `already_decided` says
    /// stands).
    pub fields: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            fields: Vec::new(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(404, "not_found", message)
    }

    /// An internal failure: logged in full, answered in general terms.
    pub fn internal(detail: impl std::fmt::Display) -> ApiError {
        log::error!("internal error: {detail}");
        ApiError::new(
            500,
            "internal",
            "something went wrong inside brain; see its log",
        )
    }

    pub fn body(&self) -> String {
        let mut body = json!({"error": self.code, "message": self.message});
        for (name, value) in &self.fields {
            body[*name] = json!(value);
        }
        body.to_string()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::SessionNotFound(id) => ApiError::not_found(format!("no session {id}")),
            StoreError::BadQuery(m) => {
                ApiError::new(400, "bad_query", format!("bad search query: {m}"))
            }
            StoreError::NotEditable(why) => ApiError::new(
                409,
                "not_editable",
                format!("that message cannot be edited: {why}"),
            ),
            StoreError::BadForkPoint(why @ BadForkPoint::InsideActiveAttempt(..)) => {
                ApiError::new(409, "turn_in_flight", why.to_string())
            }
            StoreError::BadForkPoint(why) => ApiError::bad_request(why.to_string()),
            // A read the database gave up on (PostgreSQL's statement timeout): the server
            // is busy, not broken; the client may retry or ask for less.
            StoreError::ReadTimeout => {
                log::warn!("a read reached the database's statement timeout");
                ApiError::new(
                    503,
                    "unavailable",
                    "the database took too long to answer; try again, or ask for less",
                )
            }
            why @ StoreError::Superseded { .. } => {
                ApiError::new(409, "turn_in_flight", why.to_string())
            }
            // The database out of reach, or a connection lost with nothing known written
            // (SPEC §16: a restart, a killed backend): try again, not a bug.
            other => match other.out_of_reach() {
                Some(why) => unavailable(&why),
                None => ApiError::internal(other),
            },
        }
    }
}

/// 503 `unavailable` for a database out of reach: the detail to the log, a short reason to
/// the client.
fn unavailable(detail: &str) -> ApiError {
    log::warn!("the database is unavailable: {detail}");
    ApiError::new(
        503,
        "unavailable",
        "the database cannot be reached right now (nothing was written); try again shortly",
    )
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        match e {
            EngineError::EmptyMessage => ApiError::bad_request("`message` must not be blank"),
            EngineError::MessageTooLarge(..) => ApiError::new(413, "too_large", e.to_string()),
            EngineError::TurnInFlight => ApiError::new(409, "turn_in_flight", e.to_string()),
            EngineError::NothingToRetry => ApiError::new(409, "nothing_to_retry", e.to_string()),
            EngineError::NoActiveTurn => ApiError::new(404, "no_active_turn", e.to_string()),
            EngineError::NoPendingPermission => {
                ApiError::new(404, "no_pending_permission", e.to_string())
            }
            EngineError::AlreadyDecided(ref d) => {
                let fields = vec![("decision", d.decision.clone()), ("by", d.by.clone())];
                ApiError {
                    fields,
                    ..ApiError::new(409, "already_decided", e.to_string())
                }
            }
            EngineError::ShuttingDown | EngineError::Unavailable(_) => {
                ApiError::new(503, "unavailable", e.to_string())
            }
            EngineError::Store(s) => s.into(),
        }
    }
}

impl From<CursorError> for ApiError {
    fn from(e: CursorError) -> ApiError {
        ApiError::bad_request(e.to_string())
    }
}

/// An import's failure: what the file is or holds is 422 `bad_import` (413 for a zip whose
/// `conversations.json` is over the limit); the database's, as any other store error.
impl From<FileError> for ApiError {
    fn from(e: FileError) -> ApiError {
        let bad = |e: &dyn std::fmt::Display| ApiError::new(422, "bad_import", e.to_string());
        match e {
            FileError::Archive(ArchiveError::TooLarge { .. }) => {
                ApiError::new(413, "too_large", e.to_string())
            }
            FileError::Import(ImportError::Store(s)) | FileError::Brain(BrainError::Store(s)) => {
                s.into()
            }
            FileError::Io(io) => ApiError::internal(format!("reading an upload: {io}")),
            FileError::Import(ImportError::Stopped) => {
                ApiError::new(503, "unavailable", e.to_string())
            }
            other => bad(&other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionId;
    use crate::session::projection::NotEditable;

    #[test]
    fn errors_map_to_the_specs_codes_and_hide_internals() {
        let e: ApiError = StoreError::SessionNotFound(SessionId::generate()).into();
        assert_eq!((e.status, e.code), (404, "not_found"));
        let e: ApiError = StoreError::Corrupt("secret path /var/x".into()).into();
        assert_eq!((e.status, e.code), (500, "internal"));
        assert!(!e.message.contains("secret"));
        let e: ApiError = EngineError::TurnInFlight.into();
        assert_eq!((e.status, e.code), (409, "turn_in_flight"));
        let e: ApiError = StoreError::NotEditable(NotEditable::Abandoned(4)).into();
        assert_eq!((e.status, e.code), (409, "not_editable"));
        let e: ApiError = StoreError::BadForkPoint(BadForkPoint::Zero).into();
        assert_eq!((e.status, e.code), (400, "bad_request"));
        let e: ApiError = StoreError::BadForkPoint(BadForkPoint::InsideActiveAttempt(5, 4)).into();
        assert_eq!((e.status, e.code), (409, "turn_in_flight"));
        // A read PostgreSQL cancelled at its statement timeout: busy, not broken.
        let e: ApiError = StoreError::ReadTimeout.into();
        assert_eq!((e.status, e.code), (503, "unavailable"));
        // The database out of reach or a connection lost (issue 27): 503, not 500.
        let e: ApiError = StoreError::Unavailable("lost".into()).into();
        assert_eq!((e.status, e.code), (503, "unavailable"));
        assert!(e.message.contains("try again"), "{}", e.message);
        let e: ApiError = StoreError::Superseded {
            id: SessionId::generate(),
            seq: 3,
        }
        .into();
        assert_eq!((e.status, e.code), (409, "turn_in_flight"));
        let e: ApiError = EngineError::AlreadyDecided(crate::chat::consent::Decided {
            decision: "deny".into(),
            by: "timeout".into(),
        })
        .into();
        assert_eq!((e.status, e.code), (409, "already_decided"));
        let body: serde_json::Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(
            (&body["decision"], &body["by"]),
            (&json!("deny"), &json!("timeout"))
        );
        let e: ApiError = CursorError::Half.into();
        assert_eq!((e.status, e.code), (400, "bad_request"));
        let body: serde_json::Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(body["error"], "bad_request");
        assert!(body["message"].as_str().unwrap().contains("before"));
    }
}
