//! The turn engine (SPEC §6).
//!
//! [`Engine::send`] validates a message, checks that no attempt of the session is active
//! (I7), appends the user message (I2) and starts the attempt on its own thread: the
//! attempt belongs to the engine, so a client that goes away cancels nothing (I8); it can
//! re-attach ([`Engine::live`]) or stop it ([`Engine::stop`]). The attempt compacts if it
//! must, streams from the provider, checkpoints new text every 2 s (I5), and ends exactly
//! per the table of SPEC §6; post-turn work (distillation, post-persist compaction, the
//! automatic title) then runs in the background.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::frames::{ActiveTurn, Subscription};
use super::slot::Remembered;
pub use super::state::{
    CHECKPOINT_INTERVAL, DEFAULT_MAX_MESSAGE_BYTES, Engine, EngineError, EngineSettings, Fault,
    LIVE_RETENTION, MAX_ACTIVE_ATTEMPTS, MAX_BACKGROUND_JOBS, SHUTDOWN_DEADLINE, STOP_POLL,
    ShutdownReport,
};
use super::state::{Deps, Inner, Jobs, Registry, lock};
use crate::provider::Provider;
use crate::session::compactor::Compactor;
use crate::session::events::{Decoded, Payload, UserMessage, kind};
use crate::session::store::coord::{Claim, Coordinator, LocalCoordinator};
use crate::session::{SessionId, Store};
use crate::tokens::Estimator;
use crate::tools::Tools;

impl Engine {
    pub fn new(store: Arc<Store>, provider: Arc<Provider>, settings: EngineSettings) -> Engine {
        Engine::with_tools(store, provider, settings, Arc::new(Tools::off()))
    }

    /// An engine whose turns may use `tools`.
    pub fn with_tools(
        store: Arc<Store>,
        provider: Arc<Provider>,
        settings: EngineSettings,
        tools: Arc<Tools>,
    ) -> Engine {
        Engine::coordinated(store, provider, settings, tools, Arc::new(LocalCoordinator))
    }

    /// An engine sharing its database with other servers through `coord` (SPEC §16; as
    /// [`crate::session::store::coordinator`] opens it for what `--db` names).
    pub fn coordinated(
        store: Arc<Store>,
        provider: Arc<Provider>,
        settings: EngineSettings,
        tools: Arc<Tools>,
        coord: Arc<dyn Coordinator>,
    ) -> Engine {
        let estimator = Arc::new(Estimator::new());
        let engine = Engine {
            inner: Arc::new(Inner {
                deps: Deps {
                    compactor: Compactor::new(Arc::clone(&store), Arc::clone(&estimator)),
                    store,
                    provider,
                    estimator,
                    tools,
                },
                settings,
                registry: Registry::new(coord),
                jobs: Jobs::default(),
                remembered: Remembered::default(),
            }),
        };
        engine.listen_to_others();
        engine
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.inner.deps.store
    }

    pub fn tools(&self) -> &Arc<Tools> {
        &self.inner.deps.tools
    }

    /// Sends a user message and starts its first attempt.
    pub fn send(
        &self,
        id: SessionId,
        text: &str,
        model: Option<String>,
    ) -> Result<Subscription, EngineError> {
        self.send_or_edit(id, text, None, model)
    }

    /// Edits the user message at `edited_seq` and sends the new text (SPEC §14): the
    /// `rewind` and the new `user_message` are written in one transaction, after the I7
    /// check, then the turn runs. 409 `not_editable` (a [`StoreError::NotEditable`])
    /// unless the message is a user message of the current branch after the newest
    /// visible compaction's boundary; `turn_in_flight` while a turn runs, as for any send.
    pub fn edit(
        &self,
        id: SessionId,
        edited_seq: u64,
        text: &str,
        model: Option<String>,
    ) -> Result<Subscription, EngineError> {
        self.send_or_edit(id, text, Some(edited_seq), model)
    }

    fn send_or_edit(
        &self,
        id: SessionId,
        text: &str,
        edit_of: Option<u64>,
        model: Option<String>,
    ) -> Result<Subscription, EngineError> {
        self.accepting()?;
        if text.trim().is_empty() {
            return Err(EngineError::EmptyMessage);
        }
        let limit = self.inner.settings.max_message_bytes;
        if text.len() > limit {
            return Err(EngineError::MessageTooLarge(text.len(), limit));
        }
        // I7 across servers: taken before anything is written.
        let claim = self.claim(id)?;
        // The I7 check and the appends happen under the registry's lock, so a concurrent
        // send or edit of the same session either comes first or gets `turn_in_flight`.
        let mut turns = lock(&self.inner.registry.turns);
        self.admit(&turns, id)?;
        // I2: the user message is durable before any provider call.
        let seq = self.inner.deps.store.write(|w| {
            if let Some(edited) = edit_of {
                return Ok(w.edit(id, edited, text)?.seq);
            }
            if w.session(id)?.archived {
                w.set_archived(id, false)?;
            }
            Ok(w.append(
                id,
                &Payload::UserMessage(UserMessage {
                    text: text.to_owned(),
                }),
            )?
            .seq)
        })?;
        Ok(self.start(&mut turns, ActiveTurn::new(id, seq, 1), model, (claim, seq)))
    }

    /// Forks the session through `through_seq` (default: the newest event of the current
    /// branch that is not part of a running attempt) into a new session (SPEC §14). A
    /// seq inside the running attempt is refused (`turn_in_flight`); 0 or one past the
    /// end is a bad request.
    pub fn fork(
        &self,
        id: SessionId,
        through_seq: Option<u64>,
    ) -> Result<crate::session::SessionRow, EngineError> {
        self.accepting()?;
        // Which attempt runs, and how far the log reached then, read together under the
        // registry's lock; the copy (maybe long) is made after letting it go, so no other
        // session waits for it. An attempt that starts meanwhile writes past `upto`.
        let turns = lock(&self.inner.registry.turns);
        let active = turns
            .get(&id)
            .filter(|t| !t.is_done())
            .map(|t| (t.turn, t.attempt));
        let upto = self.inner.deps.store.last_seq(id)?;
        drop(turns);
        // One running on another server, as its log shows it (none on one server alone).
        let active = active.or_else(|| self.attempt_elsewhere(id));
        let row = self
            .inner
            .deps
            .store
            .write(|w| w.fork(id, through_seq, active, upto))?;
        Ok(row)
    }

    /// Starts a new attempt of the newest user message, with exactly its original request.
    pub fn retry(&self, id: SessionId, model: Option<String>) -> Result<Subscription, EngineError> {
        self.accepting()?;
        let claim = self.claim(id)?;
        let mut turns = lock(&self.inner.registry.turns);
        self.admit(&turns, id)?;
        // Only the live tail can hold a retryable message: one compacted away is gone.
        let events = self.inner.deps.store.events_for_context(id)?;
        // The newest user message the model still sees: one an edit replaced is not
        // retried (its branch is abandoned, §14).
        let turn = crate::session::projection::tree::visible(&events)
            .iter()
            .filter(|e| e.kind == kind::USER_MESSAGE)
            .map(|e| e.seq)
            .max()
            .ok_or(EngineError::NothingToRetry)?;
        let attempt = events
            .iter()
            .filter_map(|e| match e.decode() {
                Decoded::Known(Payload::AssistantTurn(a)) if a.turn == turn => Some(a.attempt),
                Decoded::Known(Payload::PendingState(p)) if p.turn == turn => Some(p.attempt),
                Decoded::Known(Payload::TurnFailed(f)) if f.turn == turn => Some(f.attempt),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            + 1;
        // Where the attempt starts writing (I7 across servers: see `keep_claim`).
        let last_seq = self.inner.deps.store.last_seq(id)?;
        let held = (claim, last_seq);
        Ok(self.start(&mut turns, ActiveTurn::new(id, turn, attempt), model, held))
    }

    /// A new attempt of the session may start: none of its own runs (I7), and the engine
    /// is under its limit of attempts (checked before anything is written).
    fn admit(
        &self,
        turns: &HashMap<SessionId, Arc<ActiveTurn>>,
        id: SessionId,
    ) -> Result<(), EngineError> {
        if turns.get(&id).is_some_and(|t| !t.is_done()) {
            return Err(EngineError::TurnInFlight);
        }
        let limit = self.inner.settings.max_active_attempts;
        if turns.values().filter(|t| !t.is_done()).count() >= limit {
            return Err(EngineError::Unavailable(format!(
                "{limit} answers are being written at once, the most this server runs; \
                 try again shortly"
            )));
        }
        Ok(())
    }

    /// Starts the attempt on a thread of its own. Whatever happens to that thread (no
    /// thread to be had, a panic), the attempt ends and the session is free again.
    fn start(
        &self,
        turns: &mut HashMap<SessionId, Arc<ActiveTurn>>,
        turn: ActiveTurn,
        model: Option<String>,
        (claim, last_seq): (Claim, u64),
    ) -> Subscription {
        let turn = Arc::new(turn);
        turn.hold(claim, last_seq);
        // Ended attempts are kept for `/live` only so long.
        turns.retain(|_, t| t.ended_ago().is_none_or(|ago| ago < LIVE_RETENTION));
        let replaced = turns.insert(turn.session_id, Arc::clone(&turn));
        // One attempt per session (I7): `admit` refused while one runs, under this lock.
        assert!(
            replaced.is_none_or(|t| t.is_done()),
            "{}: a second attempt replaced a running one",
            turn.session_id
        );
        let subscription = turn.subscribe();
        let (inner, running) = (Arc::clone(&self.inner), Arc::clone(&turn));
        let spawned = if self.inner.settings.fault == Some(Fault::NoThreadForAttempt) {
            Err(std::io::Error::other(
                "injected fault: no thread for the attempt",
            ))
        } else {
            thread::Builder::new()
                .name("brain-attempt".into())
                .spawn(move || super::attempt::run_guarded(&inner, &running, model))
        };
        match spawned {
            Ok(handle) => {
                let mut workers = lock(&self.inner.jobs.workers);
                workers.retain(|h| !h.is_finished());
                workers.push(handle);
            }
            Err(e) => super::attempt::end_internal(
                &self.inner,
                &turn,
                &format!("cannot start the attempt's thread: {e}"),
            ),
        }
        subscription
    }

    /// Asks the session's active attempt to stop, on this server or another.
    pub fn stop(&self, id: SessionId) -> Result<(), EngineError> {
        if let Some(t) = lock(&self.inner.registry.turns)
            .get(&id)
            .filter(|t| !t.is_done())
        {
            t.request_stop();
            return Ok(());
        }
        self.stop_elsewhere(id)
    }

    /// The session's active attempt, or one that ended within [`LIVE_RETENTION`], from its
    /// first frame.
    pub fn live(&self, id: SessionId) -> Result<Subscription, EngineError> {
        let local = lock(&self.inner.registry.turns).get(&id).cloned();
        if let Some(t) = local.as_ref().filter(|t| !t.is_done()) {
            return Ok(t.subscribe());
        }
        if let Some(following) = self.live_elsewhere(id)? {
            return Ok(following);
        }
        match local {
            Some(t) if t.ended_ago().is_none_or(|ago| ago < LIVE_RETENTION) => Ok(t.subscribe()),
            _ => Err(EngineError::NoActiveTurn),
        }
    }

    /// Deletes a session, unless one of its attempts is running (409 `turn_in_flight`).
    pub fn delete(&self, id: SessionId) -> Result<(), EngineError> {
        let _claim = self.claim(id)?;
        let turns = lock(&self.inner.registry.turns);
        if turns.get(&id).is_some_and(|t| !t.is_done()) {
            return Err(EngineError::TurnInFlight);
        }
        self.inner.deps.store.delete_session(id)?;
        Ok(())
    }

    /// The provider this engine talks to.
    pub fn provider(&self) -> &Arc<Provider> {
        &self.inner.deps.provider
    }

    /// The engine's settings.
    pub fn settings(&self) -> &EngineSettings {
        &self.inner.settings
    }

    /// Post-turn jobs still running (or waiting for the provider's background lane).
    pub fn background_jobs(&self) -> usize {
        lock(&self.inner.jobs.background)
            .iter()
            .filter(|h| !h.is_finished())
            .count()
    }

    /// The background purposes paused for `model` (its circuit breakers are open).
    pub fn paused(&self, model: &str) -> Vec<&'static str> {
        lock(&self.inner.jobs.breakers).paused(model, Instant::now())
    }

    /// Whether the session has an attempt running, here or on another server.
    pub fn turn_active(&self, id: SessionId) -> bool {
        let here = lock(&self.inner.registry.turns)
            .get(&id)
            .is_some_and(|t| !t.is_done());
        here || self.claimed_elsewhere(&[id]).contains(&id)
    }

    /// The session's running attempt as (turn, attempt), if one is running: the transcript
    /// shows its checkpoints as the answer so far, not as a cut-off one.
    pub fn active_attempt(&self, id: SessionId) -> Option<(u64, u32)> {
        let here = lock(&self.inner.registry.turns)
            .get(&id)
            .filter(|t| !t.is_done())
            .map(|t| (t.turn, t.attempt));
        here.or_else(|| self.attempt_elsewhere(id))
    }

    pub(super) fn accepting(&self) -> Result<(), EngineError> {
        if self.inner.registry.accepting.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(EngineError::ShuttingDown)
        }
    }

    /// Stops accepting, ends every active attempt per the table (a final checkpoint, or
    /// `turn_failed shutdown`), and waits for post-turn work, all within `deadline`;
    /// what is still running then is skipped, with a log line.
    pub fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let until = Instant::now() + deadline;
        self.inner.registry.accepting.store(false, Ordering::SeqCst);
        let mut report = ShutdownReport::default();
        for t in lock(&self.inner.registry.turns).values() {
            if !t.is_done() {
                t.request_shutdown();
                report.ended_attempts += 1;
            }
        }
        let workers = std::mem::take(&mut *lock(&self.inner.jobs.workers));
        report.unfinished_attempts = wait_all(workers, until);
        let background = std::mem::take(&mut *lock(&self.inner.jobs.background));
        report.skipped_background = wait_all(background, until);
        if report.skipped_background > 0 {
            log::warn!(
                "shutdown: skipping {} unfinished post-turn jobs",
                report.skipped_background
            );
        }
        report
    }
}

/// A post-turn job's claim on titling one session; released on drop.
/// Waits for threads until `until`; returns how many were still running.
fn wait_all(handles: Vec<JoinHandle<()>>, until: Instant) -> usize {
    let mut left = handles;
    while !left.is_empty() && Instant::now() < until {
        left.retain(|h| !h.is_finished());
        thread::sleep(Duration::from_millis(10));
    }
    let unfinished = left.iter().filter(|h| !h.is_finished()).count();
    for h in left.into_iter().filter(|h| h.is_finished()) {
        let _ = h.join();
    }
    unfinished
}
