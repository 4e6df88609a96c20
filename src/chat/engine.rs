//! The turn engine (SPEC §6).
//!
//! [`Engine::send`] validates a message, checks that no attempt of the session is active
//! (I7), appends the user message (I2) and starts the attempt on its own thread: the
//! attempt belongs to the engine, so a client that goes away cancels nothing (I8); it can
//! re-attach ([`Engine::live`]) or stop it ([`Engine::stop`]). The attempt compacts if it
//! must, streams from the provider, checkpoints new text every 2 s (I5), and ends exactly
//! per the table of SPEC §6; post-turn work (distillation, post-persist compaction, the
//! automatic title) then runs in the background.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::breaker::Breakers;
use super::coord::{Claim, Coordinator, LocalCoordinator};
use super::frames::{ActiveTurn, Subscription};
use crate::provider::Provider;
use crate::session::compactor::Compactor;
use crate::session::compactor::run::COMPACTION_TIMEOUT;
use crate::session::events::{Decoded, Payload, UserMessage, kind};
use crate::session::{SessionId, Store, StoreError};
use crate::tokens::Estimator;
use crate::tools::Tools;

/// How often new text is checkpointed while an attempt streams (I5: a crash loses at most
/// this much).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(2);
/// How often a streaming attempt looks at its stop flag.
pub const STOP_POLL: Duration = Duration::from_millis(50);
/// How long an ended attempt stays available to `/live`.
pub const LIVE_RETENTION: Duration = Duration::from_secs(30);
/// Shutdown's whole budget (SPEC §6: exit within 10 s).
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);
/// The default limit of attempts running at once (each holds a thread, and a provider
/// stream with its reader thread).
pub const MAX_ACTIVE_ATTEMPTS: usize = 128;
/// The default limit of post-turn jobs running at once (one thread each).
pub const MAX_BACKGROUND_JOBS: usize = 128;
/// The default largest user message.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// What the engine needs to know about models and limits.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    pub chat_model: Option<String>,
    pub summarize_model: Option<String>,
    pub mini_model: Option<String>,
    /// `--context-window`: overrides the listing for the chat model.
    pub context_window: Option<u64>,
    pub compact_at: f64,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub distill: bool,
    /// Whether an untitled session gets an automatic title.
    pub titles: bool,
    pub max_message_bytes: usize,
    pub checkpoint_interval: Duration,
    /// The deadline of one compaction, all its passes and calls together.
    pub compaction_timeout: Duration,
    /// Attempts running at once; past it a send is refused (503) before it writes.
    pub max_active_attempts: usize,
    /// Post-turn jobs running at once; past it a job is skipped (logged).
    pub max_background_jobs: usize,
    /// The tool loop's limits (SPEC §13).
    pub tool_limits: crate::tools::ToolLimits,
    /// A fault to inject, for the tests of the engine's guards; always `None` in use.
    #[doc(hidden)]
    pub fault: Option<Fault>,
}

/// Faults the tests inject to check that the engine survives them.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The attempt's thread panics while preparing the request.
    PanicInAttempt,
    /// No thread can be started for the attempt.
    NoThreadForAttempt,
}

impl Default for EngineSettings {
    fn default() -> EngineSettings {
        EngineSettings {
            chat_model: None,
            summarize_model: None,
            mini_model: None,
            context_window: None,
            compact_at: 0.6,
            max_output_tokens: None,
            temperature: None,
            distill: true,
            titles: true,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            checkpoint_interval: CHECKPOINT_INTERVAL,
            compaction_timeout: COMPACTION_TIMEOUT,
            max_active_attempts: MAX_ACTIVE_ATTEMPTS,
            max_background_jobs: MAX_BACKGROUND_JOBS,
            tool_limits: crate::tools::ToolLimits::default(),
            fault: None,
        }
    }
}

/// Why the engine refused a request.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the message is empty")]
    EmptyMessage,
    #[error("the message is {0} bytes; the limit is {1}")]
    MessageTooLarge(usize, usize),
    #[error("a turn of this session is still running")]
    TurnInFlight,
    #[error("there is no message to retry (none, or compacted away)")]
    NothingToRetry,
    #[error("this session has no active turn")]
    NoActiveTurn,
    #[error("no tool call of this session is waiting for that answer")]
    NoPendingPermission,
    #[error("that question was already decided: {} by {}", .0.decision, .0.by)]
    AlreadyDecided(super::consent::Decided),
    #[error("the server is shutting down")]
    ShuttingDown,
    /// Something the request needs is not available now (the summarizer, a thread).
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// What shutdown did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Attempts that were running and were ended.
    pub ended_attempts: usize,
    /// Attempts still running at the deadline.
    pub unfinished_attempts: usize,
    /// Background jobs not finished at the deadline (skipped).
    pub skipped_background: usize,
}

pub(super) struct Inner {
    pub store: Arc<Store>,
    pub provider: Arc<Provider>,
    pub compactor: Compactor,
    pub estimator: Arc<Estimator>,
    pub settings: EngineSettings,
    /// The tools a turn may offer; `Tools::off()` when none are configured.
    pub tools: Arc<Tools>,
    pub(super) turns: Mutex<HashMap<SessionId, Arc<ActiveTurn>>>,
    accepting: AtomicBool,
    workers: Mutex<Vec<JoinHandle<()>>>,
    background: Mutex<Vec<JoinHandle<()>>>,
    /// Sessions a post-turn job is titling now: one title job per session at a time.
    titling: Mutex<HashSet<SessionId>>,
    /// Sessions whose stop is being sent again to another server (one sender each).
    pub(super) stopping: Mutex<HashSet<SessionId>>,
    /// Background purposes that keep failing for a model pause.
    pub breakers: Mutex<Breakers>,
    /// Tools the users allowed for the rest of a session.
    pub remembered: super::consent::Remembered,
    /// The other servers on the same database, if any (SPEC §16).
    pub(super) coord: Arc<dyn Coordinator>,
}

/// The turn engine. Cheap to clone; every clone is the same engine.
#[derive(Clone)]
pub struct Engine {
    pub(super) inner: Arc<Inner>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

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
                compactor: Compactor::new(Arc::clone(&store), Arc::clone(&estimator)),
                store,
                provider,
                estimator,
                settings,
                tools,
                turns: Mutex::new(HashMap::new()),
                accepting: AtomicBool::new(true),
                workers: Mutex::new(Vec::new()),
                background: Mutex::new(Vec::new()),
                titling: Mutex::new(HashSet::new()),
                stopping: Mutex::new(HashSet::new()),
                breakers: Mutex::new(Breakers::default()),
                remembered: super::consent::Remembered::default(),
                coord,
            }),
        };
        engine.listen_to_others();
        engine
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }

    pub fn tools(&self) -> &Arc<Tools> {
        &self.inner.tools
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
        let mut turns = lock(&self.inner.turns);
        self.admit(&turns, id)?;
        // I2: the user message is durable before any provider call.
        let seq = self.inner.store.write(|w| {
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
        let turns = lock(&self.inner.turns);
        let active = turns
            .get(&id)
            .filter(|t| !t.is_done())
            .map(|t| (t.turn, t.attempt));
        let upto = self.inner.store.last_seq(id)?;
        drop(turns);
        // One running on another server, as its log shows it (none on one server alone).
        let active = active.or_else(|| self.attempt_elsewhere(id));
        let row = self
            .inner
            .store
            .write(|w| w.fork(id, through_seq, active, upto))?;
        Ok(row)
    }

    /// Starts a new attempt of the newest user message, with exactly its original request.
    pub fn retry(&self, id: SessionId, model: Option<String>) -> Result<Subscription, EngineError> {
        self.accepting()?;
        let claim = self.claim(id)?;
        let mut turns = lock(&self.inner.turns);
        self.admit(&turns, id)?;
        // Only the live tail can hold a retryable message: one compacted away is gone.
        let events = self.inner.store.events_for_context(id)?;
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
        let last_seq = self.inner.store.last_seq(id)?;
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
                let mut workers = lock(&self.inner.workers);
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
        if let Some(t) = lock(&self.inner.turns).get(&id).filter(|t| !t.is_done()) {
            t.request_stop();
            return Ok(());
        }
        self.stop_elsewhere(id)
    }

    /// The session's active attempt, or one that ended within [`LIVE_RETENTION`], from its
    /// first frame.
    pub fn live(&self, id: SessionId) -> Result<Subscription, EngineError> {
        let local = lock(&self.inner.turns).get(&id).cloned();
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
        let turns = lock(&self.inner.turns);
        if turns.get(&id).is_some_and(|t| !t.is_done()) {
            return Err(EngineError::TurnInFlight);
        }
        self.inner.store.delete_session(id)?;
        Ok(())
    }

    /// The provider this engine talks to.
    pub fn provider(&self) -> &Arc<Provider> {
        &self.inner.provider
    }

    /// The engine's settings.
    pub fn settings(&self) -> &EngineSettings {
        &self.inner.settings
    }

    /// Post-turn jobs still running (or waiting for the provider's background lane).
    pub fn background_jobs(&self) -> usize {
        lock(&self.inner.background)
            .iter()
            .filter(|h| !h.is_finished())
            .count()
    }

    /// The background purposes paused for `model` (its circuit breakers are open).
    pub fn paused(&self, model: &str) -> Vec<&'static str> {
        lock(&self.inner.breakers).paused(model, Instant::now())
    }

    /// Whether the session has an attempt running, here or on another server.
    pub fn turn_active(&self, id: SessionId) -> bool {
        let here = lock(&self.inner.turns)
            .get(&id)
            .is_some_and(|t| !t.is_done());
        here || self.claimed_elsewhere(&[id]).contains(&id)
    }

    /// The session's running attempt as (turn, attempt), if one is running: the transcript
    /// shows its checkpoints as the answer so far, not as a cut-off one.
    pub fn active_attempt(&self, id: SessionId) -> Option<(u64, u32)> {
        let here = lock(&self.inner.turns)
            .get(&id)
            .filter(|t| !t.is_done())
            .map(|t| (t.turn, t.attempt));
        here.or_else(|| self.attempt_elsewhere(id))
    }

    pub(super) fn accepting(&self) -> Result<(), EngineError> {
        if self.inner.accepting.load(Ordering::SeqCst) {
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
        self.inner.accepting.store(false, Ordering::SeqCst);
        let mut report = ShutdownReport::default();
        for t in lock(&self.inner.turns).values() {
            if !t.is_done() {
                t.request_shutdown();
                report.ended_attempts += 1;
            }
        }
        let workers = std::mem::take(&mut *lock(&self.inner.workers));
        report.unfinished_attempts = wait_all(workers, until);
        let background = std::mem::take(&mut *lock(&self.inner.background));
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
pub(super) struct TitleClaim<'a> {
    inner: &'a Inner,
    id: SessionId,
}

impl Drop for TitleClaim<'_> {
    fn drop(&mut self) {
        lock(&self.inner.titling).remove(&self.id);
    }
}

impl Inner {
    /// Claims the session's titling, unless another job holds it (overlapping post-turn
    /// jobs would each ask for a title).
    pub(super) fn claim_title(&self, id: SessionId) -> Option<TitleClaim<'_>> {
        let claimed = lock(&self.titling).insert(id);
        // Built only when claimed: dropping an unclaimed one would release another's.
        claimed.then(|| TitleClaim { inner: self, id })
    }

    /// Whether the session has moved on from attempt `attempt` of turn `turn`: a newer
    /// turn or attempt started (its memory would be left out of the context).
    pub(super) fn moved_on(&self, id: SessionId, turn: u64, attempt: u32) -> bool {
        lock(&self.turns)
            .get(&id)
            .is_some_and(|t| (t.turn, t.attempt) > (turn, attempt))
    }

    /// Whether shutdown has begun: background work gives up.
    pub(super) fn shutting_down(&self) -> bool {
        !self.accepting.load(Ordering::SeqCst)
    }

    /// Starts a post-turn job on a thread of its own, kept so shutdown can wait for it;
    /// refused past [`EngineSettings::max_background_jobs`] or when no thread can be had.
    pub(super) fn spawn_background(
        &self,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<(), String> {
        let mut jobs = lock(&self.background);
        jobs.retain(|h| !h.is_finished());
        let limit = self.settings.max_background_jobs;
        if jobs.len() >= limit {
            return Err(format!(
                "{limit} post-turn jobs are running, the most allowed"
            ));
        }
        let handle = thread::Builder::new()
            .name("brain-post-turn".into())
            .spawn(job)
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        jobs.push(handle);
        Ok(())
    }
}

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
