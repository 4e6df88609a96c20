//! Running a compaction: summarise, check, compare-and-append, one at a time per session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Budget, Plan, Refusal, plan};
use crate::session::events::{CompactionApplied, Event, Payload, SessionId, Usage, kind};
use crate::session::projection::{Context, Message, Role, llm_context};
use crate::session::store::{CallStatus, LedgerEntry, Purpose};
use crate::session::{Store, StoreError};
use crate::tokens::Estimator;

/// Instructions to the summarizer. Facts must survive: a summary that drops a date or a
/// commitment silently changes what the model knows.
pub const SUMMARY_SYSTEM_PROMPT: &str = "You compress the earlier part of a conversation so \
it can continue without it. Write a faithful summary of the conversation below. Keep every \
name, date, number, amount, commitment, decision and open question exactly as written. Keep \
who said what. Do not add anything. Start directly with the summary: no preamble, no \
closing remarks.";

/// The summary's `max_tokens` is at most the summarizer's window divided by this.
pub const SUMMARY_MAX_TOKENS_DIVISOR: u64 = 8;

/// Tokens kept free in a summarizer request for the chat template's framing.
pub const SUMMARY_FRAMING_TOKENS: u64 = 64;

/// Passes one pre-send compaction may run before giving up.
pub const MAX_PASSES: usize = 8;

/// Levels of chunk-then-summarise-the-summaries before giving up.
pub const MAX_CHUNK_LEVELS: usize = 4;

/// Waits after the first failure; doubled after each further one.
pub const BACKOFF_START: Duration = Duration::from_secs(15);
/// The longest wait between attempts after failures.
pub const BACKOFF_MAX: Duration = Duration::from_secs(600);

/// The deadline of one summarizer call (SPEC §6: compaction 90 s).
pub const SUMMARY_TIMEOUT: Duration = Duration::from_secs(90);

/// What a summarizer is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryInput {
    pub system: String,
    pub text: String,
    pub max_tokens: u64,
}

/// What a summarizer answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SummaryOutput {
    pub text: String,
    pub finish_reason: Option<String>,
    pub usage: Usage,
}

/// The model that writes summaries.
pub trait Summarizer: Send + Sync {
    /// The model's name, as recorded in `compaction_applied` and the ledger.
    fn model(&self) -> String;
    /// Where the model is served (the ledger's `provider`).
    fn provider(&self) -> String;
    /// The model's context window.
    fn window(&self) -> u64;
    /// One summary; the error is a code and a message for the log and ledger.
    fn summarize(&self, input: &SummaryInput) -> Result<SummaryOutput, (String, String)>;
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
    /// Whether this is a failure worth backing off from (not a refusal to plan).
    fn is_failure(&self) -> bool {
        matches!(
            self,
            CompactionError::BadSummary(_)
                | CompactionError::Summarizer { .. }
                | CompactionError::NoProgress { .. }
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
}

#[derive(Default)]
struct SessionState {
    failures: u32,
    retry_at: Option<Instant>,
}

/// Runs compactions against one store, one at a time per session.
pub struct Compactor {
    store: Arc<Store>,
    estimator: Arc<Estimator>,
    sessions: Mutex<HashMap<SessionId, Arc<Mutex<SessionState>>>>,
}

impl Compactor {
    pub fn new(store: Arc<Store>, estimator: Arc<Estimator>) -> Compactor {
        Compactor {
            store,
            estimator,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn session_lock(&self, id: SessionId) -> Arc<Mutex<SessionState>> {
        let mut all = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(all.entry(id).or_default())
    }

    /// Before a request: compact until the context is under the trigger, or no pass can
    /// help. Fails only when the context is over the hard limit (I4).
    pub fn pre_send(
        &self,
        id: SessionId,
        budget: Budget,
        summarizer: &dyn Summarizer,
    ) -> Result<Vec<PassOutcome>, CompactionError> {
        let mut outcomes = Vec::new();
        for _ in 0..MAX_PASSES {
            match self.pass(id, budget, summarizer, false) {
                Ok(PassOutcome::Fits { tokens }) => {
                    outcomes.push(PassOutcome::Fits { tokens });
                    return Ok(outcomes);
                }
                Ok(o) => outcomes.push(o),
                Err(e) => return self.within_limit(id, budget, e).map(|()| outcomes),
            }
        }
        let stuck = CompactionError::NoProgress {
            before: 0,
            after: 0,
        };
        self.within_limit(id, budget, stuck).map(|()| outcomes)
    }

    /// After an answer is persisted: one pass if the context is over the trigger.
    pub fn post_persist(
        &self,
        id: SessionId,
        budget: Budget,
        summarizer: &dyn Summarizer,
    ) -> Result<PassOutcome, CompactionError> {
        self.pass(id, budget, summarizer, false)
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

    /// One compaction pass. With `force`, compacts even under the trigger (by hand).
    pub fn pass(
        &self,
        id: SessionId,
        budget: Budget,
        summarizer: &dyn Summarizer,
        force: bool,
    ) -> Result<PassOutcome, CompactionError> {
        // A second caller waits here, then sees the first one's result in a fresh read.
        let state = self.session_lock(id);
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        let events = self.store.events_for_context(id)?;
        let ctx = llm_context(&events);
        let tokens = self.estimator.context(&ctx);
        if !force && !budget.over_trigger(tokens.total) {
            return Ok(PassOutcome::Fits {
                tokens: tokens.total,
            });
        }
        if let Some(at) = state.retry_at.filter(|at| *at > Instant::now()) {
            return Err(CompactionError::BackingOff(at - Instant::now()));
        }
        let plan = plan(&ctx, &tokens)?;
        let result = self.compact(id, &events, &ctx, &plan, summarizer);
        match &result {
            Err(e) if e.is_failure() => {
                state.failures += 1;
                let wait =
                    BACKOFF_START.saturating_mul(1 << state.failures.min(16).saturating_sub(1));
                state.retry_at = Some(Instant::now() + wait.min(BACKOFF_MAX));
            }
            Ok(_) => *state = SessionState::default(),
            Err(_) => {}
        }
        result
    }

    fn compact(
        &self,
        id: SessionId,
        events: &[Event],
        ctx: &Context,
        plan: &Plan,
        summarizer: &dyn Summarizer,
    ) -> Result<PassOutcome, CompactionError> {
        let seen = newest_compaction_seq(events);
        let summary = summarise(
            &ctx.messages[..=plan.last],
            summarizer,
            &|usage, latency, err| {
                self.record(id, summarizer, usage, latency, err);
            },
        )?;
        let payload = CompactionApplied {
            summary,
            replaces_through_seq: plan.through_seq,
            tokens_before: plan.tokens_before,
            tokens_after: 0,
            model: summarizer.model(),
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
            eprintln!("brain: could not record a summarizer call in the ledger: {e}");
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

/// Records one summarizer call: usage, latency, the error code if it failed.
type Record<'a> = dyn Fn(Usage, Duration, Option<&str>) + 'a;

/// The messages as the summarizer reads them.
pub fn render(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(who);
        out.push_str(": ");
        out.push_str(&m.content);
    }
    out
}

/// Summarises messages, in chunks when they do not fit the summarizer's window, then the
/// chunk summaries, until one summary remains.
fn summarise(
    messages: &[Message],
    s: &dyn Summarizer,
    record: &Record<'_>,
) -> Result<String, CompactionError> {
    let window = s.window();
    let max_tokens = (window / SUMMARY_MAX_TOKENS_DIVISOR).max(1);
    // Room for the input: the window less the answer, the instructions and framing.
    let input_budget = window
        .saturating_sub(
            max_tokens + crate::tokens::count(SUMMARY_SYSTEM_PROMPT) + SUMMARY_FRAMING_TOKENS,
        )
        .max(1);
    let mut pieces = split_to_fit(&render(messages), input_budget);
    for _ in 0..MAX_CHUNK_LEVELS {
        let mut summaries = Vec::with_capacity(pieces.len());
        for text in &pieces {
            summaries.push(summarise_one(text, max_tokens, s, record)?);
        }
        if summaries.len() == 1 {
            return Ok(summaries.remove(0));
        }
        pieces = split_to_fit(&summaries.join("\n\n"), input_budget);
    }
    Err(CompactionError::BadSummary(
        "the chunk summaries never fit one summarizer window",
    ))
}

fn summarise_one(
    text: &str,
    max_tokens: u64,
    s: &dyn Summarizer,
    record: &Record<'_>,
) -> Result<String, CompactionError> {
    let input = SummaryInput {
        system: SUMMARY_SYSTEM_PROMPT.to_owned(),
        text: text.to_owned(),
        max_tokens,
    };
    let started = Instant::now();
    let out = s.summarize(&input);
    match out {
        Err((code, message)) => {
            record(Usage::default(), started.elapsed(), Some(&code));
            Err(CompactionError::Summarizer { code, message })
        }
        Ok(o) => {
            let refused = if o.finish_reason.as_deref() == Some("length") {
                Some("it was cut off at its token limit")
            } else if o.text.trim().is_empty() {
                Some("it was empty")
            } else {
                None
            };
            record(o.usage, started.elapsed(), refused.map(|_| "bad_summary"));
            match refused {
                Some(why) => Err(CompactionError::BadSummary(why)),
                None => Ok(o.text.trim().to_owned()),
            }
        }
    }
}

/// Splits text into pieces of at most `budget` tokens, on paragraph, then line, then
/// character boundaries.
pub fn split_to_fit(text: &str, budget: u64) -> Vec<String> {
    if crate::tokens::count(text) <= budget {
        return vec![text.to_owned()];
    }
    let mut pieces = Vec::new();
    let mut current = String::new();
    for para in text.split_inclusive("\n\n") {
        let candidate = format!("{current}{para}");
        if crate::tokens::count(&candidate) <= budget {
            current = candidate;
            continue;
        }
        if !current.is_empty() {
            pieces.push(std::mem::take(&mut current));
        }
        if crate::tokens::count(para) <= budget {
            current = para.to_owned();
        } else {
            pieces.extend(split_chars(para, budget));
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// A paragraph too large on its own: cut by characters, a token is at least one.
fn split_chars(text: &str, budget: u64) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut size = (budget as usize).max(1) * 2;
    loop {
        let pieces: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
        if size == 1 || pieces.iter().all(|p| crate::tokens::count(p) <= budget) {
            return pieces;
        }
        size /= 2;
    }
}
