//! A question's slot and what consent remembers (SPEC §13, I9): the user's [`Answer`], the
//! [`Waiting`] slot an attempt's question sits in until the first answer, timeout, stop
//! or shutdown takes it, how it ended ([`Resolution`], [`Decided`]), and the tools each
//! session allowed for good ([`Remembered`], read back from the log). The asking and
//! answering are `consent.rs`'s.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::locks::lock;
use crate::session::events::{Decoded, Payload, kind, resolved_by};
use crate::session::projection::Questions;
use crate::session::{SessionId, Store, StoreError};

/// The user's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub allow: bool,
    pub remember: bool,
}

/// The question an attempt asks, and how it was decided once it is: the first answer, the
/// timeout, a stop or the shutdown, whichever takes `decided` first (under the turn's
/// `consent` lock), stands; everything after is told it (409 `already_decided`).
pub struct Waiting {
    pub(super) call_id: String,
    /// Wakes the waiting attempt when an answer is put in `decided`.
    pub(super) wake: mpsc::Sender<()>,
    pub(super) decided: Option<Resolution>,
}

/// How a question ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    pub allow: bool,
    /// One of `resolved_by`.
    pub by: &'static str,
    pub remember: bool,
    /// The answer's id when another server sent it (its caller is told 200 only if the
    /// log names its id).
    pub answer_id: Option<String>,
}

impl Resolution {
    pub(super) fn user(a: Answer, answer_id: Option<String>) -> Resolution {
        Resolution {
            allow: a.allow,
            by: resolved_by::USER,
            remember: a.allow && a.remember,
            answer_id,
        }
    }

    pub(super) fn decision(&self) -> &'static str {
        if self.allow { "allow" } else { "deny" }
    }
}

/// The decision that stands on a question answered again (409 `already_decided`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// `allow` or `deny`.
    pub decision: String,
    /// One of `resolved_by`.
    pub by: String,
}

pub(super) fn deny(by: &'static str) -> Resolution {
    Resolution {
        allow: false,
        by,
        remember: false,
        answer_id: None,
    }
}

/// The questions and answers among `decoded` (seq order).
pub(super) fn questions<'a>(decoded: &'a [(u64, Decoded)]) -> Questions<'a> {
    let mut questions = Questions::default();
    for (seq, d) in decoded {
        match d {
            Decoded::Known(Payload::PermissionRequested(q)) => questions.asked(*seq, q),
            Decoded::Known(Payload::PermissionResolved(r)) => {
                questions.resolved(r);
            }
            _ => {}
        }
    }
    questions
}

/// The tools each session's user allowed for good (`remember`), read from its log once and
/// kept up to date after.
#[derive(Default)]
pub struct Remembered {
    sessions: Mutex<HashMap<SessionId, Arc<HashSet<String>>>>,
}

impl Remembered {
    /// Whether `name` is allowed without asking in session `id`.
    pub fn allows(&self, store: &Store, id: SessionId, name: &str) -> Result<bool, StoreError> {
        if let Some(set) = lock(&self.sessions).get(&id) {
            return Ok(set.contains(name));
        }
        let set = Arc::new(from_log(store, id)?);
        let allowed = set.contains(name);
        lock(&self.sessions).entry(id).or_insert(set);
        Ok(allowed)
    }

    pub(super) fn remember(&self, id: SessionId, name: &str) {
        let mut sessions = lock(&self.sessions);
        let set = sessions.entry(id).or_default();
        Arc::make_mut(set).insert(name.to_owned());
    }
}

/// The tools a session's log says were allowed with `remember`.
fn from_log(store: &Store, id: SessionId) -> Result<HashSet<String>, StoreError> {
    let events = store.events(id, 0, None)?;
    let decoded: Vec<(u64, Decoded)> = events
        .iter()
        .filter(|e| e.kind == kind::PERMISSION_REQUESTED || e.kind == kind::PERMISSION_RESOLVED)
        .map(|e| (e.seq, e.decode()))
        .collect();
    let questions = questions(&decoded);
    let mut allowed = HashSet::new();
    for (seq, d) in &decoded {
        if let Decoded::Known(Payload::PermissionRequested(q)) = d
            && questions
                .answer(*seq)
                .is_some_and(|a| a.remember && a.decision == "allow")
        {
            allowed.insert(q.name.clone());
        }
    }
    Ok(allowed)
}
