//! Consent for tool calls (SPEC §13, I9): a call whose policy is `ask` appends
//! `permission_requested`, sends a `permission` frame and waits — on the attempt's own
//! thread, holding no writer and no HTTP worker — for `POST …/permissions/{call_id}`, its
//! timeout, a `/stop` or the shutdown; then `permission_resolved` says who decided what.
//! The first of them decides; every answer after it is told that decision (409
//! `already_decided`, from the attempt's slot while it runs, else from the log).
//! `remember` allows that tool for the rest of the session; the log keeps it, so a restart
//! keeps it too ([`Remembered`] reads it back).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::frames::{ActiveTurn, CLAIM_LOST, Frame, Phase};
use super::locks::lock;
pub use super::slot::{Answer, Decided, Remembered, Resolution, Waiting};
use super::slot::{deny, questions};
use super::state::{Engine, EngineError, Inner, STOP_POLL};
use crate::session::compactor::Interrupt;
use crate::session::events::{
    Decoded, Payload, PermissionRequested, PermissionResolved, resolved_by,
};
use crate::session::{SessionId, Store, StoreError};

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
    if !turn.keep_claim(&inner.deps.store) {
        return Err(StoreError::Refused(CLAIM_LOST));
    }
    let (wake, woken) = mpsc::channel();
    *lock(&turn.consent) = Some(Waiting {
        call_id: call_id.to_owned(),
        wake,
        decided: None,
    });
    let asked = turn.append(
        &inner.deps.store,
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
    let resolution = wait_for_decision(turn, &woken, timeout);
    // The slot keeps the decision, so an answer arriving later is told what stands, but
    // only once the log holds it: a decision that could not be written is no decision,
    // and no later answer may be told it stands (review finding 4).
    let decision = resolution.decision();
    let resolved = record_decision(inner, turn, call_id, &resolution);
    let resolved = match resolved {
        Ok(e) => e,
        Err(e) => {
            lock(&turn.consent).take();
            return Err(e);
        }
    };
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

/// Waits for the first of the user's answer, a stop, the shutdown and the timeout; the
/// one that takes the slot's decision first stands.
fn wait_for_decision(
    turn: &ActiveTurn,
    woken: &mpsc::Receiver<()>,
    timeout: Duration,
) -> Resolution {
    let deadline = Instant::now() + timeout;
    // A stop, the shutdown or the timeout decides unless an answer did just before.
    let decide = |by: &'static str| match lock(&turn.consent).as_mut() {
        Some(w) => w.decided.get_or_insert_with(|| deny(by)).clone(),
        None => deny(by),
    };
    loop {
        if let Some(i) = turn.interrupt() {
            break decide(match i {
                Interrupt::Stopped => resolved_by::STOP,
                Interrupt::Shutdown => resolved_by::SHUTDOWN,
            });
        }
        let now = Instant::now();
        if now >= deadline {
            break decide(resolved_by::TIMEOUT);
        }
        match woken.recv_timeout(STOP_POLL.min(deadline - now)) {
            // The answer is in `decided` already.
            Ok(()) => break decide(resolved_by::USER),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break decide(resolved_by::STOP),
        }
    }
}

/// Appends the question's `permission_resolved`, while the session is still the attempt's.
fn record_decision(
    inner: &Inner,
    turn: &ActiveTurn,
    call_id: &str,
    resolution: &Resolution,
) -> Result<crate::session::events::Event, StoreError> {
    let decision = resolution.decision();
    match turn.keep_claim(&inner.deps.store) {
        false => Err(StoreError::Refused(CLAIM_LOST)),
        true => turn.append(
            &inner.deps.store,
            &Payload::PermissionResolved(PermissionResolved {
                turn: Some(turn.turn),
                attempt: Some(turn.attempt),
                call_id: call_id.to_owned(),
                decision: decision.to_owned(),
                by: resolution.by.to_owned(),
                remember: resolution.remember,
                answer_id: resolution.answer_id.clone(),
            }),
        ),
    }
}

impl Engine {
    /// The user's answer to the question the session's attempt waits on: 404
    /// `no_pending_permission` when no question about that call was asked, 409
    /// `already_decided` when it has been decided (the first answer, its timeout, a stop,
    /// the shutdown or a restart stands).
    pub fn answer_permission(
        &self,
        id: SessionId,
        call_id: &str,
        answer: Answer,
    ) -> Result<(), EngineError> {
        let turn = lock(&self.inner.registry.turns).get(&id).cloned();
        let answered = match turn.filter(|t| !t.is_done()) {
            Some(turn) => answer_waiting(&turn, call_id, answer, None),
            None => self.answer_elsewhere(id, call_id, answer),
        };
        match answered {
            Err(EngineError::NoPendingPermission) => {
                Err(match decided(&self.inner.deps.store, id, call_id)? {
                    Some(d) => EngineError::AlreadyDecided(d),
                    None => EngineError::NoPendingPermission,
                })
            }
            other => other,
        }
    }
}

/// Hands the answer to `turn` if it asks about `call_id` and nothing has decided yet;
/// `answer_id` names an answer another server sent.
pub(super) fn answer_waiting(
    turn: &ActiveTurn,
    call_id: &str,
    answer: Answer,
    answer_id: Option<String>,
) -> Result<(), EngineError> {
    let mut slot = lock(&turn.consent);
    match slot.as_mut() {
        Some(w) if w.call_id == call_id => match &w.decided {
            Some(d) => Err(EngineError::AlreadyDecided(Decided {
                decision: d.decision().to_owned(),
                by: d.by.to_owned(),
            })),
            None => {
                w.decided = Some(Resolution::user(answer, answer_id));
                // The attempt may be deciding by its timeout this instant: it reads
                // `decided` either way.
                let _ = w.wake.send(());
                Ok(())
            }
        },
        _ => Err(EngineError::NoPendingPermission),
    }
}

/// How the log says the newest question about `call_id` was decided, if it was.
pub(super) fn decided(
    store: &Store,
    id: SessionId,
    call_id: &str,
) -> Result<Option<Decided>, StoreError> {
    Ok(newest_question(store, id, call_id)?.and_then(|(_, d)| d))
}

/// The newest question about `call_id` (its seq) and how it was decided, if it was.
pub(super) fn newest_question(
    store: &Store,
    id: SessionId,
    call_id: &str,
) -> Result<Option<(u64, Option<Decided>)>, StoreError> {
    let events = store.permission_events(id, call_id)?;
    let decoded: Vec<(u64, Decoded)> = events.iter().map(|e| (e.seq, e.decode())).collect();
    let questions = questions(&decoded);
    Ok(questions.newest(call_id).map(|(seq, _, answer)| {
        let decided = answer.map(|a| Decided {
            decision: a.decision.clone(),
            by: a.by.clone(),
        });
        (seq, decided)
    }))
}

/// The answer the log holds to the question about `call_id` at `seq`, if it has one.
pub(super) fn answer_to(
    store: &Store,
    id: SessionId,
    call_id: &str,
    seq: u64,
) -> Result<Option<PermissionResolved>, StoreError> {
    let events = store.permission_events(id, call_id)?;
    let decoded: Vec<(u64, Decoded)> = events.iter().map(|e| (e.seq, e.decode())).collect();
    Ok(questions(&decoded).answer(seq).cloned())
}
