//! Asking the summarizer: the instructions, the limits of one call, chunking an input
//! larger than its window, and refusing a bad summary. Every call is recorded (ledger),
//! and each one runs within the compaction's [`Bounds`].

use std::time::{Duration, Instant};

use super::run::{Bounds, CompactionError};
use crate::session::events::Usage;
use crate::session::projection::{Message, Role};

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

/// Levels of chunk-then-summarise-the-summaries before giving up.
pub const MAX_CHUNK_LEVELS: usize = 4;

/// The ledger's error code for a summarizer call cut by the compaction's deadline.
pub const TIMED_OUT_CODE: &str = "provider_timeout";

/// A summary that failed (truncated, empty, an error, a timeout) is asked for once more
/// with its `max_tokens` divided by this, the smaller target stated in the prompt.
pub const SHORTER_RETRY_DIVISOR: u64 = 2;

/// The instructions of the shorter retry: the usual ones and a word target well inside
/// `max_tokens` (a token is about three quarters of a word, and weak models overshoot).
pub fn shorter_prompt(max_tokens: u64) -> String {
    let words = (max_tokens / 2).max(1);
    format!(
        "{SUMMARY_SYSTEM_PROMPT} Be brief: at most {words} words, as a few short \
         sentences; keep the facts, drop everything else."
    )
}

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

/// How one summarizer call did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SummaryError {
    /// It failed: a code and a message for the log and the ledger.
    Failed { code: String, message: String },
    /// The compaction's deadline passed during the call.
    TimedOut,
    /// The compaction was stopped or shut down during the call.
    Interrupted(super::run::Interrupt),
}

/// The model that writes summaries.
pub trait Summarizer: Send + Sync {
    /// The model's name, as recorded in `compaction_applied` and the ledger.
    fn model(&self) -> String;
    /// Where the model is served (the ledger's `provider`).
    fn provider(&self) -> String;
    /// The model's context window.
    fn window(&self) -> u64;
    /// One summary, answered by `bounds.until` at the latest, and given up on (within a
    /// moment) once `bounds` says the compaction is interrupted.
    fn summarize(
        &self,
        input: &SummaryInput,
        bounds: &Bounds<'_>,
    ) -> Result<SummaryOutput, SummaryError>;
}

/// Records one summarizer call: usage, latency, the error code if it failed.
pub(super) type Record<'a> = dyn Fn(Usage, Duration, Option<&str>) + 'a;

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
pub(super) fn summarise(
    messages: &[Message],
    s: &dyn Summarizer,
    bounds: &Bounds<'_>,
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
            summaries.push(summarise_one(text, max_tokens, s, bounds, record)?);
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

/// One summary of `text`; when it fails (not when it is interrupted), once more asking for
/// a shorter one, if the deadline leaves time for it.
fn summarise_one(
    text: &str,
    max_tokens: u64,
    s: &dyn Summarizer,
    bounds: &Bounds<'_>,
    record: &Record<'_>,
) -> Result<String, CompactionError> {
    let first = ask(
        SUMMARY_SYSTEM_PROMPT.to_owned(),
        text,
        max_tokens,
        s,
        bounds,
        record,
    );
    match first {
        Err(e @ (CompactionError::Interrupted(_) | CompactionError::Store(_))) => Err(e),
        Err(e) if bounds.check().is_err() => Err(e),
        Err(e) => {
            log::info!("the summary failed ({e}); asking once more for a shorter one");
            let shorter = (max_tokens / SHORTER_RETRY_DIVISOR).max(1);
            ask(shorter_prompt(shorter), text, shorter, s, bounds, record)
        }
        ok => ok,
    }
}

fn ask(
    system: String,
    text: &str,
    max_tokens: u64,
    s: &dyn Summarizer,
    bounds: &Bounds<'_>,
    record: &Record<'_>,
) -> Result<String, CompactionError> {
    // No call once the compaction is over its deadline or interrupted.
    bounds.check()?;
    let input = SummaryInput {
        system,
        text: text.to_owned(),
        max_tokens,
    };
    let started = Instant::now();
    let o = match s.summarize(&input, bounds) {
        Ok(o) => o,
        Err(e) => {
            let (code, error) = match e {
                SummaryError::Failed { code, message } => {
                    let error = CompactionError::Summarizer {
                        code: code.clone(),
                        message,
                    };
                    (code, error)
                }
                SummaryError::TimedOut => (TIMED_OUT_CODE.to_owned(), bounds.timed_out()),
                SummaryError::Interrupted(i) => {
                    (i.code().to_owned(), CompactionError::Interrupted(i))
                }
            };
            record(Usage::default(), started.elapsed(), Some(&code));
            return Err(error);
        }
    };
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
