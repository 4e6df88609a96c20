//! Incremental compaction (SPEC §5): when the context outgrows its budget, the oldest
//! half of the live messages (the previous summary included) is summarised into one
//! `compaction_applied` event, so a session of any length stays inside its window and
//! everything before the boundary stays byte-stable until the next compaction.
//!
//! - [`Budget`] and [`plan`] are pure: when to compact and where to cut.
//! - [`run`] does it: compare-and-append on the writer, one at a time per session, within
//!   one deadline per compaction, cut short by `/stop` or shutdown, backing off after
//!   failures.
//! - [`summarise`] asks the summarizer (in chunks when the input is larger than its
//!   window), refuses bad summaries and asks once more for a shorter one, and records every
//!   call in the ledger.
//! - [`extract`] is the fallback when no summary comes (pure): a digest of the summarised
//!   messages within a budget, recorded with `method: "extractive"`, so a weak or absent
//!   summarizer never ends a session.

pub mod bounds;
pub mod extract;
pub mod run;
pub mod summarise;

use crate::session::projection::{Context, Role};
use crate::tokens::ContextTokens;

pub use run::{Bounds, CompactionError, Compactor, Interrupt, PassOutcome, never};
pub use summarise::{Summarizer, SummaryError, SummaryInput, SummaryOutput};

/// Fewer live messages than this are never compacted: there would be nothing left to keep
/// verbatim.
pub const MIN_LIVE_MESSAGES: usize = 4;

/// How the context must fit the model about to serve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// The model's context window, in tokens.
    pub window: u64,
    /// Compact when the estimate exceeds this share of the window (`--compact-at`).
    pub compact_at: f64,
    /// Tokens kept free for the answer (`--max-output-tokens`; 0 when unset).
    pub output_reserve: u64,
}

impl Budget {
    /// Above this estimate a compaction is due.
    /// `compact_at` × window, but never above the hard limit: an output reserve larger than
    /// the headroom above the trigger would otherwise leave contexts between the two never
    /// compacted and failing with `context_overflow` (I4).
    pub fn trigger_tokens(&self) -> u64 {
        (((self.window as f64) * self.compact_at) as u64).min(self.limit_tokens())
    }

    /// No request may exceed this (I4).
    pub fn limit_tokens(&self) -> u64 {
        self.window.saturating_sub(self.output_reserve)
    }

    pub fn over_trigger(&self, estimate: u64) -> bool {
        estimate > self.trigger_tokens()
    }

    pub fn over_limit(&self, estimate: u64) -> bool {
        estimate > self.limit_tokens()
    }
}

/// Where to cut: summarise `messages[..=last]`, replacing every event up to `through_seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Index of the last message summarised.
    pub last: usize,
    /// The new boundary: that message's `last_seq`.
    pub through_seq: u64,
    /// The estimate of the whole context before compacting.
    pub tokens_before: u64,
    /// The estimate of the part summarised.
    pub tokens_summarised: u64,
}

/// Why no plan can be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("only {0} live messages (too few to compact)")]
    TooFewMessages(usize),
    #[error("no assistant message to cut after in the older half")]
    NoBoundary,
}

/// Plans a compaction of `ctx` (with its per-message estimate `tokens`): the oldest ~half
/// of the live messages, cut right after an assistant message so the summarised part
/// never ends on an unanswered user message, and the newest message always stays.
pub fn plan(ctx: &Context, tokens: &ContextTokens) -> Result<Plan, Refusal> {
    plan_with_floor(ctx, tokens, MIN_LIVE_MESSAGES)
}

/// The fewest live messages a compaction the next request *needs* (over the hard limit)
/// works on: an answer and the question before it can be summarised while the new message
/// stays, so only one message alone over the budget can still overflow (issue 15). SPEC §5's
/// floor of 4 stays for optional compactions.
pub const MIN_LIVE_MESSAGES_TO_FIT: usize = 3;

/// [`plan`] with another floor on the live messages.
pub fn plan_with_floor(
    ctx: &Context,
    tokens: &ContextTokens,
    min_live: usize,
) -> Result<Plan, Refusal> {
    let n = ctx.messages.len();
    if n < min_live.max(MIN_LIVE_MESSAGES_TO_FIT) {
        return Err(Refusal::TooFewMessages(n));
    }
    let half = n / 2;
    // The assistant message nearest the middle, preferring the older side; never the
    // newest message, which stays verbatim and last.
    let older = (0..half).rev();
    let newer = half..n - 1;
    let last = older
        .chain(newer)
        .find(|&i| ctx.messages[i].role == Role::Assistant)
        .ok_or(Refusal::NoBoundary)?;
    // The boundary ends an exchange: what stays begins with a user message, which the
    // summary is joined to (roles alternate in every context; a cut before an answer
    // would leave the summary followed by half an exchange).
    assert!(
        ctx.messages
            .get(last + 1)
            .is_some_and(|m| m.role == Role::User),
        "a compaction must cut right before a user message (cut after message {last})"
    );
    Ok(Plan {
        last,
        through_seq: ctx.messages[last].last_seq,
        tokens_before: tokens.total,
        tokens_summarised: tokens.messages[..=last].iter().sum(),
    })
}

#[cfg(test)]
mod tests;
