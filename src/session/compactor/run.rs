//! Running a compaction: summarise, check, compare-and-append, one at a time per session,
//! within one deadline for the whole compaction, cut short when its turn is stopped or the
//! server shuts down.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::summarise::{Summarizer, summarise};
use super::{Budget, Plan, Refusal, plan};
use crate::session::events::{CompactionApplied, Event, Payload, SessionId, Usage, kind};
use crate::session::projection::{Context, llm_context};
use crate::session::store::{CallStatus, LedgerEntry, Purpose};
use crate::session::{Store, StoreError};
use crate::tokens::Estimator;

/// Passes one pre-send compaction may run before giving up.
pub const MAX_PASSES: usize = 8;

/// Waits after the first failure; doubled after each further one.
pub const BACKOFF_START: Duration = Duration::from_secs(15);
/// The longest wait between attempts after failures.
pub const BACKOFF_MAX: Duration = Duration::from_secs(600);

/// The deadline of one compaction: all its passes and summarizer calls together (SPEC §6:
/// compaction 90 s).
pub const COMPACTION_TIMEOUT: Duration = Duration::from_secs(90);

/// How often a caller waiting for another compaction of its session looks at its bounds.
pub const WAIT_POLL: Duration = Duration::from_millis(50);

/// Why a compaction was cut short from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// Its turn was stopped (`/stop`).
    Stopped,
    /// The server is shutting down.
    Shutdown,
}

impl Interrupt {
    /// The code recorded for the cut call (the same as the turn's, SPEC §6).
    pub fn code(self) -> &'static str {
        match self {
            Interrupt::Stopped => "stopped",
            Interrupt::Shutdown => "shutdown",
        }
    }
}

/// Says whether the compaction should stop now.
pub type Interrupted<'a> = &'a (dyn Fn() -> Option<Interrupt> + Sync);

/// Nothing interrupts: a compaction asked for by hand.
pub fn never() -> Option<Interrupt> {
    None
}

/// What bounds one compaction: its deadline and what can cut it short.
#[derive(Clone, Copy)]
pub struct Bounds<'a> {
    pub until: Instant,
    interrupted: Interrupted<'a>,
}

impl<'a> Bounds<'a> {
    /// A compaction starting now, with [`COMPACTION_TIMEOUT`].
    pub fn new(interrupted: Interrupted<'a>) -> Bounds<'a> {
        Bounds::within(COMPACTION_TIMEOUT, interrupted)
    }

    pub fn within(timeout: Duration, interrupted: Interrupted<'a>) -> Bounds<'a> {
        Bounds {
            until: Instant::now() + timeout,
            interrupted,
        }
    }

    /// Whether (and why) the compaction should stop now.
    pub fn interrupted(&self) -> Option<Interrupt> {
        (self.interrupted)()
    }

    /// The time left before the deadline.
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// `Err` when the compaction must end now: interrupted, or over its deadline.
    pub fn check(&self) -> Result<(), CompactionError> {
        if let Some(i) = self.interrupted() {
            return Err(CompactionError::Interrupted(i));
        }
        if self.left().is_zero() {
            return Err(self.timed_out());
        }
        Ok(())
    }

    pub(super) fn timed_out(&self) -> CompactionError {
        CompactionError::TimedOut(COMPACTION_TIMEOUT)
    }
}

/// Why a compaction did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("the summary was refused: {0}")]
    BadSummary(&'static str),
    #[error("the summarizer failed ({code}): {message}")]
    Summarizer { code: String, message: String },
    #[error("the summary would not shrink the context ({before} → {after} tokens)")]
    NoProgress { before: u64, after: u64 },
    #[error("compaction is backing off after failures; next try in {0:?}")]
    BackingOff(Duration),
    #[error("the compaction did not finish within its deadline ({0:?})")]
    TimedOut(Duration),
    #[error("the compaction was cut short ({})", .0.code())]
    Interrupted(Interrupt),
    #[error("the context ({tokens} tokens) cannot be brought under the limit ({limit}): {why}")]
    ContextOverflow {
        tokens: u64,
        limit: u64,
        why: String,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl CompactionError {
    /// Whether this is a failure worth backing off from (not a refusal to plan, not an
    /// interruption).
    fn is_failure(&self) -> bool {
        matches!(
            self,
            CompactionError::BadSummary(_)
                | CompactionError::Summarizer { .. }
                | CompactionError::NoProgress { .. }
                | CompactionError::TimedOut(_)
        )
    }
}

/// What a pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassOutcome {
    /// The context was under the trigger: nothing to do.
    Fits { tokens: u64 },
    /// A compaction was appended.
    Compacted {
        seq: u64,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// Someone else compacted the same snapshot first: nothing appended.
    Superseded,
    /// Another compaction of the session is running and this caller did not need to wait
    /// for it (the context fits the window without it, or the work was optional).
    InProgress { tokens: u64 },
}

/// Whether a pass waits for another compaction of the same session.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    Always,
    /// Only when the context does not fit the window without a compaction.
    UnlessFits,
    Never,
}

#[derive(Clone, Copy)]
struct Mode {
    /// Compact even under the trigger, whatever the backoff (by hand).
    force: bool,
    wait: Wait,
    /// Before a request: a context over the limit tries once whatever the backoff
    /// (backoff protects against storms, not against the user's next message).
    pre_send: bool,
}

#[derive(Default)]
struct SessionState {
    failures: u32,
    retry_at: Option<Instant>,
    running: bool,
}

/// Runs compactions against one store, one at a time per session.
pub struct Compactor {
    store: Arc<Store>,
    estimator: Arc<Estimator>,
    sessions: Mutex<HashMap<SessionId, SessionState>>,
    /// Signalled whenever a compaction ends.
    finished: Condvar,
}

/// A running compaction of one session; ending it (drop, also on a panic) lets the next
/// one start.
struct Running<'a> {
    compactor: &'a Compactor,
    id: SessionId,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.compactor.states().get_mut(&self.id) {
            s.running = false;
        }
        self.compactor.finished.notify_all();
    }
}

impl Compactor {
    pub fn new(store: Arc<Store>, estimator: Arc<Estimator>) -> Compactor {
        Compactor {
            store,
            estimator,
            sessions: Mutex::new(HashMap::new()),
            finished: Condvar::new(),
        }
    }

    fn states(&self) -> MutexGuard<'_, HashMap<SessionId, SessionState>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a compaction of the session unless one is running.
    fn try_begin(&self, id: SessionId) -> Option<Running<'_>> {
        let mut all = self.states();
        let state = all.entry(id).or_default();
        if state.running {
            return None;
        }
        state.running = true;
        Some(Running {
            compactor: self,
            id,
        })
    }

    /// Waits (within `bounds`) until no compaction of the session runs, then starts one.
    fn begin(&self, id: SessionId, bounds: &Bounds<'_>) -> Result<Running<'_>, CompactionError> {
        let mut all = self.states();
        loop {
            let state = all.entry(id).or_default();
            if !state.running {
                state.running = true;
                return Ok(Running {
                    compactor: self,
                    id,
                });
            }
            bounds.check()?;
            let slice = bounds.left().min(WAIT_POLL);
            all = self
                .finished
                .wait_timeout(all, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Whether a compaction of the session is running now.
    pub fn running(&self, id: SessionId) -> bool {
        self.states().get(&id).is_some_and(|s| s.running)
    }

    /// Before a request: compact until the context is under the trigger, or no pass can
    /// help. Fails only when the context is over the hard limit (I4), or when `bounds` says
    /// the turn was stopped. A compaction of the session already running (post-persist) is
    /// waited for only when the context does not fit without it.
    pub fn pre_send(
        &self,
        id: SessionId,
        budget: Budget,
        summarizer: &dyn Summarizer,
        bounds: &Bounds<'_>,
    ) -> Result<Vec<PassOutcome>, CompactionError> {
        let mode = Mode {
            force: false,
            wait: Wait::UnlessFits,
            pre_send: true,
        };
        let mut outcomes = Vec::new();
        for _ in 0..MAX_PASSES {
            match self.run_pass(id, budget, summarizer, bounds, mode) {
                Ok(o @ (PassOutcome::Fits { .. } | PassOutcome::InProgress { .. })) => {
                    outcomes.push(o);
                    return Ok(outcomes);
                }
                Ok(o) => outcomes.push(o),
                Err(e @ CompactionError::Interrupted(_)) => return Err(e),
                Err(e) => return self.within_limit(id, budget, e).map(|()| outcomes),
            }
        }
        let stuck = CompactionError::NoProgress {
            before: 0,
            after: 0,
        };
        self.within_limit(id, budget, stuck).map(|()| outcomes)
    }

    /// After an answer is persisted: one pass if the context is over the trigger. Optional
    /// work: it never waits for another compaction of the session.
    pub fn post_persist(
        &self,
        id: SessionId,
        budget: Budget,
        summarizer: &dyn Summarizer,
        bounds: &Bounds<'_>,
    ) -> Result<PassOutcome, CompactionError> {
        let mode = Mode {
            force: false,
            wait: Wait::Never,
            pre_send: false,
        };
        self.run_pass(id, budget, summarizer, bounds, mode)
    }

    /// A failed or refused compaction is harmless while the request still fits; over the
    /// limit it is `ContextOverflow`.
    fn within_limit(
        &self,
        id: SessionId,
        budget: Budget,
        why: CompactionError,
    ) -> Result<(), CompactionError> {
        let tokens = self.estimate(id)?.1;
        if budget.over_limit(tokens) {
            return Err(CompactionError::ContextOverflow {
                tokens,
                limit: budget.limit_tokens(),
                why: why.to_string(),
            });
        }
        Ok(())
    }

    /// The live context and its estimate.
    pub fn estimate(&self, id: SessionId) -> Result<(Vec<Event>, u64), CompactionError> {
        let events = self.store.events_for_context(id)?;
        let tokens = self.estimator.context(&llm_context(&events)).total;
        Ok((events, tokens))
    }

    /// One compaction pass, after waiting for any other compaction of the session. With
    /// `force` (by hand), it compacts even under the trigger and whatever the backoff.
    pub fn pass(
        &self,
        id: SessionId,
        budget: Budget,
        summarizer: &dyn Summarizer,
        force: bool,
        bounds: &Bounds<'_>,
    ) -> Result<PassOutcome, CompactionError> {
        let mode = Mode {
            force,
            wait: Wait::Always,
            pre_send: false,
        };
        self.run_pass(id, budget, summarizer, bounds, mode)
    }

    fn run_pass(
        &self,
        id: SessionId,
        budget: Budget,
        summarizer: &dyn Summarizer,
        bounds: &Bounds<'_>,
        mode: Mode,
    ) -> Result<PassOutcome, CompactionError> {
        // A second caller waits here (when it must), then sees the first one's result in a
        // fresh read.
        let _running = match self.try_begin(id) {
            Some(r) => r,
            None => {
                let optional = match mode.wait {
                    Wait::Always => false,
                    Wait::Never => true,
                    Wait::UnlessFits => !budget.over_limit(self.estimate(id)?.1),
                };
                if optional {
                    let tokens = self.estimate(id)?.1;
                    return Ok(PassOutcome::InProgress { tokens });
                }
                self.begin(id, bounds)?
            }
        };
        let events = self.store.events_for_context(id)?;
        let ctx = llm_context(&events);
        let tokens = self.estimator.context(&ctx);
        if !mode.force && !budget.over_trigger(tokens.total) {
            return Ok(PassOutcome::Fits {
                tokens: tokens.total,
            });
        }
        let needed = mode.pre_send && budget.over_limit(tokens.total);
        if !mode.force && !needed {
            if let Some(left) = self.backing_off(id) {
                return Err(CompactionError::BackingOff(left));
            }
        }
        let plan = plan(&ctx, &tokens)?;
        let result = self.compact(id, &events, &ctx, &plan, summarizer, bounds);
        self.settle(id, &result);
        result
    }

    /// How long the session's backoff still lasts, if it does.
    fn backing_off(&self, id: SessionId) -> Option<Duration> {
        let now = Instant::now();
        self.states()
            .get(&id)
            .and_then(|s| s.retry_at)
            .filter(|at| *at > now)
            .map(|at| at - now)
    }

    /// A failure extends the backoff; a success clears it.
    fn settle(&self, id: SessionId, result: &Result<PassOutcome, CompactionError>) {
        let mut all = self.states();
        let state = all.entry(id).or_default();
        match result {
            Err(e) if e.is_failure() => {
                state.failures += 1;
                let wait =
                    BACKOFF_START.saturating_mul(1 << state.failures.min(16).saturating_sub(1));
                state.retry_at = Some(Instant::now() + wait.min(BACKOFF_MAX));
            }
            Ok(_) => {
                state.failures = 0;
                state.retry_at = None;
            }
            Err(_) => {}
        }
    }

    fn compact(
        &self,
        id: SessionId,
        events: &[Event],
        ctx: &Context,
        plan: &Plan,
        summarizer: &dyn Summarizer,
        bounds: &Bounds<'_>,
    ) -> Result<PassOutcome, CompactionError> {
        let seen = newest_compaction_seq(events);
        let summary = summarise(
            &ctx.messages[..=plan.last],
            summarizer,
            bounds,
            &|usage, latency, err| {
                self.record(id, summarizer, usage, latency, err);
            },
        )?;
        // A summary that arrives after the turn was stopped is still good work: keep it.
        let payload = CompactionApplied {
            summary,
            replaces_through_seq: plan.through_seq,
            tokens_before: plan.tokens_before,
            tokens_after: 0,
            model: summarizer.model(),
            method: crate::session::events::method::LLM.into(),
        };
        let tokens_after = self.tokens_with(events, &payload);
        if tokens_after >= plan.tokens_before {
            return Err(CompactionError::NoProgress {
                before: plan.tokens_before,
                after: tokens_after,
            });
        }
        let payload = Payload::CompactionApplied(CompactionApplied {
            tokens_after,
            ..payload
        });
        let appended = self.store.write(|w| {
            // Compare-and-append: only if the newest compaction is still the one planned on.
            if w.newest_compaction_seq(id)? != seen {
                return Ok(None);
            }
            w.append(id, &payload).map(Some)
        })?;
        Ok(match appended {
            Some(e) => PassOutcome::Compacted {
                seq: e.seq,
                tokens_before: plan.tokens_before,
                tokens_after,
            },
            None => PassOutcome::Superseded,
        })
    }

    /// The estimate of the context once `c` is appended.
    fn tokens_with(&self, events: &[Event], c: &CompactionApplied) -> u64 {
        let mut after = events.to_vec();
        let seq = after.last().map_or(1, |e| e.seq + 1);
        after.push(Event {
            seq,
            kind: kind::COMPACTION_APPLIED.into(),
            payload: Payload::CompactionApplied(c.clone()).to_json(),
            created_at: String::new(),
        });
        self.estimator.context(&llm_context(&after)).total
    }

    fn record(
        &self,
        id: SessionId,
        s: &dyn Summarizer,
        usage: Usage,
        latency: Duration,
        err: Option<&str>,
    ) {
        let entry = LedgerEntry {
            session_id: Some(id),
            purpose: Purpose::Summarize,
            provider: s.provider(),
            model: s.model(),
            usage,
            latency_ms: latency.as_millis() as u64,
            status: if err.is_some() {
                CallStatus::Error
            } else {
                CallStatus::Ok
            },
            error_code: err.map(str::to_owned),
        };
        // The ledger is accounting: losing a row must not lose the compaction.
        if let Err(e) = self.store.record_call(&entry) {
            log::error!("could not record a summarizer call in the ledger: {e}");
        }
    }
}

fn newest_compaction_seq(events: &[Event]) -> u64 {
    events
        .iter()
        .filter(|e| e.kind == kind::COMPACTION_APPLIED)
        .map(|e| e.seq)
        .max()
        .unwrap_or(0)
}
