//! Consent for tool calls (SPEC §13, I9): a call whose policy is `ask` appends
//! `permission_requested`, sends a `permission` frame and waits — on the attempt's own
//! thread, holding no writer and no HTTP worker — for `POST …/permissions/{call_id}`, its
//! timeout, a `/stop` or the shutdown; then `permission_resolved` says who decided what.
//! `remember` allows that tool for the rest of the session; the log keeps it, so a restart
//! keeps it too ([`Remembered`] reads it back).

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::engine::{Engine, EngineError, Inner, STOP_POLL, lock};
use super::frames::{ActiveTurn, CLAIM_LOST, Frame, Phase};
use crate::session::compactor::Interrupt;
use crate::session::events::{
    Decoded, Payload, PermissionRequested, PermissionResolved, kind, resolved_by,
};
use crate::session::{SessionId, Store, StoreError};

/// The user's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub allow: bool,
    pub remember: bool,
}

/// The question an attempt waits on.
pub struct Waiting {
    call_id: String,
    answer: mpsc::Sender<Answer>,
}

/// How a question ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    pub allow: bool,
    /// One of `resolved_by`.
    pub by: &'static str,
    pub remember: bool,
}

/// Asks the user about one call and waits for the answer, the timeout, a stop or the
/// shutdown (the last three deny). Both events are appended; a store error is returned
/// (the attempt then ends as a store failure).
pub(super) fn ask(
    inner: &Inner,
    turn: &ActiveTurn,
    call_id: &str,
    name: &str,
    args: &str,
    timeout: Duration,
) -> Result<Resolution, StoreError> {
    // I7 across servers: each of the attempt's appends only while the session is its own.
    if !turn.keep_claim(&inner.store) {
        return Err(StoreError::Refused(CLAIM_LOST));
    }
    let (tx, rx) = mpsc::channel();
    *lock(&turn.consent) = Some(Waiting {
        call_id: call_id.to_owned(),
        answer: tx,
    });
    let asked = turn.append(
        &inner.store,
        &Payload::PermissionRequested(PermissionRequested {
            turn: turn.turn,
            attempt: turn.attempt,
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            args: args.to_owned(),
        }),
    );
    let asked = match asked {
        Ok(e) => {
            turn.wrote(e.seq);
            e
        }
        Err(e) => {
            lock(&turn.consent).take();
            return Err(e);
        }
    };
    turn.push(Frame::Status {
        phase: Phase::Permission,
    });
    turn.push(Frame::Permission {
        call_id: call_id.to_owned(),
        name: name.to_owned(),
        args: args.to_owned(),
        seq: asked.seq,
    });
    let deadline = Instant::now() + timeout;
    // A stop, the shutdown or the timeout ends the wait; an answer that arrived just
    // before counts (the slot is closed first, so no answer is ever taken and ignored).
    let late_answer = |by: &'static str| {
        lock(&turn.consent).take();
        match rx.try_recv() {
            Ok(a) => Resolution {
                allow: a.allow,
                by: resolved_by::USER,
                remember: a.allow && a.remember,
            },
            Err(_) => deny(by),
        }
    };
    let resolution = loop {
        if let Some(i) = turn.interrupt() {
            let by = match i {
                Interrupt::Stopped => resolved_by::STOP,
                Interrupt::Shutdown => resolved_by::SHUTDOWN,
            };
            break late_answer(by);
        }
        let now = Instant::now();
        if now >= deadline {
            break late_answer(resolved_by::TIMEOUT);
        }
        match rx.recv_timeout(STOP_POLL.min(deadline - now)) {
            Ok(a) => {
                break Resolution {
                    allow: a.allow,
                    by: resolved_by::USER,
                    remember: a.allow && a.remember,
                };
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break deny(resolved_by::STOP),
        }
    };
    lock(&turn.consent).take();
    let decision = if resolution.allow { "allow" } else { "deny" };
    if !turn.keep_claim(&inner.store) {
        return Err(StoreError::Refused(CLAIM_LOST));
    }
    let resolved = turn.append(
        &inner.store,
        &Payload::PermissionResolved(PermissionResolved {
            call_id: call_id.to_owned(),
            decision: decision.to_owned(),
            by: resolution.by.to_owned(),
            remember: resolution.remember,
        }),
    )?;
    turn.wrote(resolved.seq);
    turn.push(Frame::PermissionResolved {
        call_id: call_id.to_owned(),
        decision: decision.to_owned(),
        by: resolution.by.to_owned(),
        remember: resolution.remember,
        seq: resolved.seq,
    });
    if resolution.remember {
        inner.remembered.remember(turn.session_id, name);
    }
    Ok(resolution)
}

fn deny(by: &'static str) -> Resolution {
    Resolution {
        allow: false,
        by,
        remember: false,
    }
}

impl Engine {
    /// The user's answer to the question the session's attempt waits on (404
    /// `no_pending_permission` when that call is not waiting).
    pub fn answer_permission(
        &self,
        id: SessionId,
        call_id: &str,
        answer: Answer,
    ) -> Result<(), EngineError> {
        let turn = lock(&self.inner.turns).get(&id).cloned();
        match turn.filter(|t| !t.is_done()) {
            Some(turn) => answer_waiting(&turn, call_id, answer),
            None => self.answer_elsewhere(id, call_id, answer),
        }
    }
}

/// Hands the answer to `turn` if it waits on `call_id`.
pub(super) fn answer_waiting(
    turn: &ActiveTurn,
    call_id: &str,
    answer: Answer,
) -> Result<(), EngineError> {
    let waiting = lock(&turn.consent);
    match waiting.as_ref() {
        Some(w) if w.call_id == call_id => w
            .answer
            .send(answer)
            .map_err(|_| EngineError::NoPendingPermission),
        _ => Err(EngineError::NoPendingPermission),
    }
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

    fn remember(&self, id: SessionId, name: &str) {
        let mut sessions = lock(&self.sessions);
        let set = sessions.entry(id).or_default();
        Arc::make_mut(set).insert(name.to_owned());
    }
}

/// The tools a session's log says were allowed with `remember`.
fn from_log(store: &Store, id: SessionId) -> Result<HashSet<String>, StoreError> {
    let events = store.events(id, 0, None)?;
    let mut names: HashMap<String, String> = HashMap::new();
    let mut allowed = HashSet::new();
    for e in &events {
        if e.kind != kind::PERMISSION_REQUESTED && e.kind != kind::PERMISSION_RESOLVED {
            continue;
        }
        match e.decode() {
            Decoded::Known(Payload::PermissionRequested(q)) => {
                names.insert(q.call_id, q.name);
            }
            Decoded::Known(Payload::PermissionResolved(r))
                if r.remember && r.decision == "allow" =>
            {
                if let Some(name) = names.get(&r.call_id) {
                    allowed.insert(name.clone());
                }
            }
            _ => {}
        }
    }
    Ok(allowed)
}
