//! One page of the UI transcript (SPEC §7 `GET /v1/sessions/{id}`: the newest `limit` items
//! before `before_seq`, and whether older ones exist) read from a bounded part of the log,
//! with the same items, flags and `more` as [`ui_transcript`] of the whole log, sliced.
//!
//! An item is decided by its own event plus a few others, which the page asks for by name
//! instead of reading the whole log:
//! - a checkpoint: the other checkpoints of its attempt (the first one carries the item,
//!   the text is all of them; with several steps, each step's first one carries that
//!   step's text) and the attempt's `assistant_turn`, if any (a completed attempt's
//!   checkpoints are no item but its steps'); all of them belong to the checkpoint's turn;
//! - an `assistant_turn` of several steps: its attempt's checkpoints (which say what its
//!   earlier steps wrote);
//! - a permission question: the questions and answers of its call id (an answer names its
//!   attempt, or, in an older log, belongs to the newest unanswered question of its call id
//!   before it: [`super::Questions`]);
//! - `abandoned`: the session's rewinds (a rewind's effect depends on later rewinds alone).
//!
//! Everything else is the event itself, so projecting the window plus those extras gives
//! the window's items exactly as the whole log would. The walk is pure over a
//! [`PageSource`]; the store supplies one that reads a snapshot of SQLite.

use std::collections::{BTreeMap, HashSet};

use super::{Item, ui_transcript};
use crate::session::events::{AssistantTurn, Decoded, Event, Payload, PendingState};

/// The first window read back from `before_seq`, in events, when the page is smaller: a
/// window of about `limit` events usually holds fewer than `limit` items (a completed
/// attempt's checkpoints, answers to questions and turn memory are no items), so the read
/// starts with a little more than the page and doubles until the page is full.
pub const MIN_WINDOW: usize = 64;

/// What a transcript page reads from a session's log.
pub trait PageSource {
    type Error;
    /// At most `n` events with `seq < before`, newest first.
    fn events_before(&mut self, before: u64, n: usize) -> Result<Vec<Event>, Self::Error>;
    /// The checkpoints and `assistant_turn`s of the turn whose user message is at `turn`
    /// (every attempt's; more is harmless), in any order.
    fn turn_attempts(&mut self, turn: u64) -> Result<Vec<Event>, Self::Error>;
    /// The permission questions about `call_id` and their answers (more is harmless).
    fn permission_events(&mut self, call_id: &str) -> Result<Vec<Event>, Self::Error>;
    /// Every rewind of the session (more is harmless).
    fn rewinds(&mut self) -> Result<Vec<Event>, Self::Error>;
}

/// A page of the transcript: its items in seq order, and whether older items exist.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    pub items: Vec<Item>,
    pub more: bool,
}

/// The newest `limit` items with `seq < before`, as `ui_transcript(whole log, active)`
/// would give them, reading only a window of events ending before `before` and what its
/// items need (module docs).
pub fn transcript_page<S: PageSource>(
    source: &mut S,
    before: u64,
    limit: usize,
    active: Option<(u64, u32)>,
) -> Result<Page, S::Error> {
    // Every event read so far, window and extras, by seq (extras may repeat window events).
    let mut known: BTreeMap<u64, Event> = BTreeMap::new();
    for e in source.rewinds()? {
        known.insert(e.seq, e);
    }
    let mut turns_read: HashSet<u64> = HashSet::new();
    let mut calls_read: HashSet<String> = HashSet::new();
    // The window is every event with `low <= seq < before`.
    let mut low = before;
    let mut want = (limit.saturating_add(1)).max(MIN_WINDOW);
    loop {
        let got = source.events_before(low, want)?;
        let reached_start = got.len() < want;
        for e in got {
            low = low.min(e.seq);
            if let Decoded::Known(p) = e.decode() {
                if let Some(turn) = attempts_needed(&p).filter(|&t| turns_read.insert(t)) {
                    for x in source.turn_attempts(turn)? {
                        known.insert(x.seq, x);
                    }
                }
                if let Payload::PermissionRequested(q) = &p
                    && calls_read.insert(q.call_id.clone())
                {
                    for x in source.permission_events(&q.call_id)? {
                        known.insert(x.seq, x);
                    }
                }
            }
            known.insert(e.seq, e);
        }
        let events: Vec<Event> = known.values().cloned().collect();
        let mut items: Vec<Item> = ui_transcript(&events, active)
            .into_iter()
            .filter(|i| low <= i.seq && i.seq < before)
            .collect();
        if items.len() > limit || reached_start {
            let start = items.len().saturating_sub(limit);
            let more = start > 0;
            items.drain(..start);
            return Ok(Page { items, more });
        }
        want = want.saturating_mul(2);
    }
}

/// The turn whose attempts an event's item depends on, if it does: a checkpoint's always,
/// an answer's when it took several steps (its earlier steps' text is shown apart,
/// [`super::steps`]).
pub fn attempts_needed(p: &Payload) -> Option<u64> {
    match p {
        Payload::PendingState(PendingState { turn, .. }) => Some(*turn),
        Payload::AssistantTurn(AssistantTurn {
            turn, steps: 2.., ..
        }) => Some(*turn),
        _ => None,
    }
}

/// A [`PageSource`] over a whole log in memory (seq order): tests, and a reader that
/// already holds the log.
pub struct InMemory<'a>(pub &'a [Event]);

impl PageSource for InMemory<'_> {
    type Error = std::convert::Infallible;

    fn events_before(&mut self, before: u64, n: usize) -> Result<Vec<Event>, Self::Error> {
        Ok(self
            .0
            .iter()
            .rev()
            .filter(|e| e.seq < before)
            .take(n)
            .cloned()
            .collect())
    }

    fn turn_attempts(&mut self, turn: u64) -> Result<Vec<Event>, Self::Error> {
        Ok(self
            .0
            .iter()
            .filter(|e| match e.decode() {
                Decoded::Known(Payload::PendingState(c)) => c.turn == turn,
                Decoded::Known(Payload::AssistantTurn(a)) => a.turn == turn,
                _ => false,
            })
            .cloned()
            .collect())
    }

    fn permission_events(&mut self, call_id: &str) -> Result<Vec<Event>, Self::Error> {
        Ok(self
            .0
            .iter()
            .filter(|e| match e.decode() {
                Decoded::Known(Payload::PermissionRequested(q)) => q.call_id == call_id,
                Decoded::Known(Payload::PermissionResolved(r)) => r.call_id == call_id,
                _ => false,
            })
            .cloned()
            .collect())
    }

    fn rewinds(&mut self) -> Result<Vec<Event>, Self::Error> {
        Ok(self
            .0
            .iter()
            .filter(|e| e.kind == crate::session::events::kind::REWIND)
            .cloned()
            .collect())
    }
}
