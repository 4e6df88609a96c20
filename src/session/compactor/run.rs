//! Running a compaction: summarise, check, compare-and-append, one at a time per session,
//! within one deadline for the whole compaction, cut short when its turn is stopped or the
//! server shuts down.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use super::bounds::{Bounds, Interrupt, Interrupted, never};
use super::extract::{digest, digest_budget};
use super::summarise::{SUMMARY_MAX_TOKENS_DIVISOR, Summarizer, summarise};
use super::{Budget, MIN_LIVE_MESSAGES, MIN_LIVE_MESSAGES_TO_FIT, Plan, Refusal, plan_with_floor};
use crate::session::events::{CompactionApplied, Event, Payload, SessionId, Usage, kind, method};
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

/// What a pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassOutcome {
    /// The context was under the trigger: nothing to do.
    Fits { tokens: u64 },
    /// A compaction was appended, written by `method` (`llm` or `extractive`).
    Compacted {
        seq: u64,
        tokens_before: u64,
        tokens_after: u64,
        method: String,
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
    /// A post-persist compaction is due and not done: it runs, or it yielded to a turn
    /// and resumes after it. A pre-send whose request fits does not do its work meanwhile.
    due: bool,
}

/// What the summarizer's part in a compaction says about its backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// It summarised.
    Summarised,
    /// It failed (twice: the second time asked for a shorter summary).
    Failed,
    /// It was not asked, or was cut short from outside.
    None,
}

/// One planned compaction.
struct Job<'a> {
    id: SessionId,
    /// The live events the plan was made from.
    events: &'a [Event],
    ctx: &'a Context,
    plan: &'a Plan,
    /// The most tokens a digest may have (as a summary's `max_tokens`).
    cap: u64,
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
        // Marked before the pass starts, so a turn it yields to never finds it neither
        // running nor due; cleared unless it was cut short.
        self.states().entry(id).or_default().due = true;
        let result = self.run_pass(id, budget, summarizer, bounds, mode);
        if !matches!(result, Err(CompactionError::Interrupted(_))) {
            self.states().entry(id).or_default().due = false;
        }
        result
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
        // A post-persist compaction that yielded to this turn resumes after it: a request
        // that fits does not wait for a summary meanwhile (SPEC §5: background calls yield).
        let due = self.states().get(&id).is_some_and(|s| s.due);
        if due && mode.wait == Wait::UnlessFits {
            let tokens = self.estimate(id)?.1;
            if !budget.over_limit(tokens) {
                return Ok(PassOutcome::InProgress { tokens });
            }
        }
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
        let backing_off = self.backing_off(id);
        if let (false, false, Some(left)) = (mode.force, needed, backing_off) {
            return Err(CompactionError::BackingOff(left));
        }
        let floor = if needed {
            MIN_LIVE_MESSAGES_TO_FIT
        } else {
            MIN_LIVE_MESSAGES
        };
        let plan = plan_with_floor(&ctx, &tokens, floor)?;
        // A compaction the next request needs while the summarizer backs off after failing:
        // the digest at once, without another call to a provider that just failed.
        let ask = mode.force || backing_off.is_none();
        let cap = (budget.window / SUMMARY_MAX_TOKENS_DIVISOR).max(1);
        let job = Job {
            id,
            events: &events,
            ctx: &ctx,
            plan: &plan,
            cap,
        };
        let (verdict, result) = self.compact(&job, summarizer, ask, bounds);
        self.settle(id, verdict);
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

    /// A failed summarizer extends the backoff (even when a digest took its place); a
    /// summary clears it; a compaction that did not ask leaves it as it is.
    fn settle(&self, id: SessionId, verdict: Verdict) {
        let mut all = self.states();
        let state = all.entry(id).or_default();
        match verdict {
            Verdict::Failed => {
                state.failures += 1;
                let wait =
                    BACKOFF_START.saturating_mul(1 << state.failures.min(16).saturating_sub(1));
                state.retry_at = Some(Instant::now() + wait.min(BACKOFF_MAX));
            }
            Verdict::Summarised => {
                state.failures = 0;
                state.retry_at = None;
            }
            Verdict::None => {}
        }
    }

    /// Summarises with the summarizer when asked to, else or when it fails writes the
    /// extractive digest, then appends if the newest compaction is still the planned one.
    fn compact(
        &self,
        job: &Job<'_>,
        s: &dyn Summarizer,
        ask: bool,
        bounds: &Bounds<'_>,
    ) -> (Verdict, Result<PassOutcome, CompactionError>) {
        if !ask {
            return (Verdict::None, self.extractive(job, s));
        }
        let summary = summarise(
            &job.ctx.messages[..=job.plan.last],
            s,
            bounds,
            &|usage, latency, err| {
                self.record(job.id, s, usage, latency, err);
            },
        );
        let failure = match summary {
            Ok(summary) => match self.prepared(job, summary, s.model(), method::LLM) {
                Ok(payload) => return (Verdict::Summarised, self.append(job, payload)),
                Err(e) => e,
            },
            // Cut short from outside, or the database failed: nothing more to do.
            Err(e @ (CompactionError::Interrupted(_) | CompactionError::Store(_))) => {
                return (Verdict::None, Err(e));
            }
            Err(e) => e,
        };
        log::warn!(
            "session {}: no summary from {} ({failure}); writing an extractive digest instead",
            job.id,
            s.model()
        );
        (Verdict::Failed, self.extractive(job, s))
    }

    /// The compaction as a deterministic digest: no provider call, so it cannot fail for
    /// lack of a model nor hang.
    fn extractive(
        &self,
        job: &Job<'_>,
        summarizer: &dyn Summarizer,
    ) -> Result<PassOutcome, CompactionError> {
        let no_progress = CompactionError::NoProgress {
            before: job.plan.tokens_before,
            after: job.plan.tokens_before,
        };
        let budget = digest_budget(job.plan.tokens_summarised, job.cap).ok_or(no_progress)?;
        let summary = digest(&job.ctx.messages[..=job.plan.last], budget);
        let payload = self.prepared(job, summary, summarizer.model(), method::EXTRACTIVE)?;
        self.append(job, payload)
    }

    /// The compaction's payload, refused when it would not shrink the context.
    fn prepared(
        &self,
        job: &Job<'_>,
        summary: String,
        model: String,
        how: &str,
    ) -> Result<CompactionApplied, CompactionError> {
        let payload = CompactionApplied {
            summary,
            replaces_through_seq: job.plan.through_seq,
            tokens_before: job.plan.tokens_before,
            tokens_after: 0,
            model,
            method: how.to_owned(),
        };
        let tokens_after = self.tokens_with(job.events, &payload);
        if tokens_after >= job.plan.tokens_before {
            return Err(CompactionError::NoProgress {
                before: job.plan.tokens_before,
                after: tokens_after,
            });
        }
        Ok(CompactionApplied {
            tokens_after,
            ..payload
        })
    }

    /// Compare-and-append: only if the newest compaction (and rewind) is still the one
    /// planned on. A
    /// summary that arrives after the turn was stopped is still good work: it is kept.
    fn append(&self, job: &Job<'_>, c: CompactionApplied) -> Result<PassOutcome, CompactionError> {
        let seen = newest_shaping_seq(job.events);
        let tokens_after = c.tokens_after;
        let method = c.method.clone();
        let payload = Payload::CompactionApplied(c);
        let appended = self.store.write(|w| {
            if w.newest_shaping_seq(job.id)? != seen {
                return Ok(None);
            }
            w.append(job.id, &payload).map(Some)
        })?;
        Ok(match appended {
            Some(e) => PassOutcome::Compacted {
                seq: e.seq,
                tokens_before: job.plan.tokens_before,
                tokens_after,
                method,
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

/// The newest compaction's or rewind's seq among the events the plan saw. The tail read
/// holds every rewind after the visible compaction's boundary, and the newest of either
/// kind is always after it, so this equals `Writer::newest_shaping_seq`.
fn newest_shaping_seq(events: &[Event]) -> u64 {
    events
        .iter()
        .filter(|e| e.kind == kind::COMPACTION_APPLIED || e.kind == kind::REWIND)
        .map(|e| e.seq)
        .max()
        .unwrap_or(0)
}
