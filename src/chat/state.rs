//! The engine's state, at the bottom of the chat layer: every stage (admit, compact,
//! steps, relay and checkpoint, end, post-turn) takes what it needs from here and nothing
//! here calls a stage. [`Engine`] is the handle the API and the commands hold; its
//! operations live beside what they do (`engine.rs`: send, edit, start, shutdown;
//! `consent.rs`: answers; `coord.rs`: stop and live across servers; `compact.rs`, …).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::breaker::Breakers;
use super::frames::ActiveTurn;
pub(super) use super::locks::lock;
use super::slot::{Decided, Remembered};
use crate::provider::Provider;
use crate::session::compactor::Compactor;
use crate::session::compactor::run::COMPACTION_TIMEOUT;
use crate::session::store::coord::Coordinator;
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
    AlreadyDecided(Decided),
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

/// The engine's state, split by who owns what: the services a turn talks to ([`Deps`]),
/// the settings, which attempts run where ([`Registry`]), the background threads and
/// what they remember ([`Jobs`]), and the tools users allowed per session.
pub(super) struct Inner {
    pub deps: Deps,
    pub settings: EngineSettings,
    pub(super) registry: Registry,
    pub(super) jobs: Jobs,
    /// Tools the users allowed for the rest of a session.
    pub remembered: Remembered,
}

/// What a turn talks to: the log, the model, compaction, token counts, tools. Shared, owned
/// by the server.
pub(super) struct Deps {
    pub store: Arc<Store>,
    pub provider: Arc<Provider>,
    pub compactor: Compactor,
    pub estimator: Arc<Estimator>,
    /// The tools a turn may offer; `Tools::off()` when none are configured.
    pub tools: Arc<Tools>,
}

/// Which attempts run, here and (through the coordinator) on other servers: one per
/// session (I7).
pub(super) struct Registry {
    pub(super) turns: Mutex<HashMap<SessionId, Arc<ActiveTurn>>>,
    pub(super) accepting: AtomicBool,
    /// Sessions whose stop is being sent again to another server (one sender each).
    pub(super) stopping: Mutex<HashSet<SessionId>>,
    /// The other servers on the same database, if any (SPEC §16).
    pub(super) coord: Arc<dyn Coordinator>,
}

/// The threads shutdown waits for (attempts' and post-turn jobs'), and what background
/// work keeps between jobs.
#[derive(Default)]
pub(super) struct Jobs {
    pub(super) workers: Mutex<Vec<JoinHandle<()>>>,
    pub(super) background: Mutex<Vec<JoinHandle<()>>>,
    /// Sessions a post-turn job is titling now: one title job per session at a time.
    pub(super) titling: Mutex<HashSet<SessionId>>,
    /// Background purposes that keep failing for a model pause.
    pub breakers: Mutex<Breakers>,
}

impl Registry {
    pub(super) fn new(coord: Arc<dyn Coordinator>) -> Registry {
        Registry {
            turns: Mutex::new(HashMap::new()),
            accepting: AtomicBool::new(true),
            stopping: Mutex::new(HashSet::new()),
            coord,
        }
    }
}

/// The turn engine. Cheap to clone; every clone is the same engine.
#[derive(Clone)]
pub struct Engine {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct TitleClaim<'a> {
    inner: &'a Inner,
    id: SessionId,
}

impl Drop for TitleClaim<'_> {
    fn drop(&mut self) {
        lock(&self.inner.jobs.titling).remove(&self.id);
    }
}

impl Inner {
    /// Claims the session's titling, unless another job holds it (overlapping post-turn
    /// jobs would each ask for a title).
    pub(super) fn claim_title(&self, id: SessionId) -> Option<TitleClaim<'_>> {
        let claimed = lock(&self.jobs.titling).insert(id);
        // Built only when claimed: dropping an unclaimed one would release another's.
        claimed.then(|| TitleClaim { inner: self, id })
    }

    /// Whether the session has moved on from attempt `attempt` of turn `turn`: a newer
    /// turn or attempt started (its memory would be left out of the context).
    pub(super) fn moved_on(&self, id: SessionId, turn: u64, attempt: u32) -> bool {
        lock(&self.registry.turns)
            .get(&id)
            .is_some_and(|t| (t.turn, t.attempt) > (turn, attempt))
    }

    /// Whether shutdown has begun: background work gives up.
    pub(super) fn shutting_down(&self) -> bool {
        !self.registry.accepting.load(Ordering::SeqCst)
    }

    /// Starts a post-turn job on a thread of its own, kept so shutdown can wait for it;
    /// refused past [`EngineSettings::max_background_jobs`] or when no thread can be had.
    pub(super) fn spawn_background(
        &self,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<(), String> {
        let mut jobs = lock(&self.jobs.background);
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
