//! The two projections of a session's log (SPEC §4): what the model is sent
//! ([`llm_context`], [`llm_request`]) and what a person sees ([`ui_transcript`]).
//!
//! **Architecture invariant:** both are pure functions of the events: no clock, database or
//! network. An event whose payload does not decode is skipped by the LLM context and shown
//! by the transcript as `unreadable`, so one bad row never makes a session unreadable.
//!
//! The LLM context first drops the branches edits abandoned (step 0, [`tree`]), then looks
//! only at the *live* events, those after the newest visible compaction's boundary;
//! everything it decides (which attempt completed, whether a partial is superseded,
//! whether turn memory is late) is decided from them alone. A rewind at or before that
//! boundary hides only events before it, so the store can hand it just `session_started`
//! plus the live tail ([`crate::session::Store::events_for_context`]) and get the same
//! answer as the whole log.

use std::collections::HashMap;

use serde::Serialize;

pub mod page;
pub mod questions;
mod steps;
mod transcript;
pub mod tree;

pub use steps::StepText;
pub use transcript::{Item, ItemBody, ui_transcript};

pub use questions::Questions;

pub use tree::{
    BadForkPoint, NotEditable, abandoned, check_edit, fork_point, is_abandoned, visible,
    visible_compaction_boundary,
};

use super::events::{CompactionApplied, Decoded, Event, Payload, PendingState, TurnMemory};

/// Head of the summary message that stands for the compacted part.
pub const SUMMARY_HEAD: &str = "[Summary of the conversation so far]";
/// Appended (after a newline) to an interrupted partial the model should continue.
pub const INTERRUPTED_NOTE: &str = "[this response was interrupted mid-stream; continue from it]";
/// Head of a turn-memory block.
pub const MEMORY_HEAD: &str = "[turn memory]";
/// Stands in for the answer of a turn that left no trace at all (the process died before
/// its first checkpoint), so the next user message is not merged into the previous one
/// (which would change an earlier message and break I3).
pub const NO_ANSWER_NOTE: &str = "[no answer: this turn ended before any text]";

/// Who says a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One message of the LLM context, with the seqs of the events it came from (not sent to
/// the provider; compaction cuts on them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    pub first_seq: u64,
    pub last_seq: u64,
}

/// What the model is sent: the system prompt and the messages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Context {
    pub system: String,
    pub messages: Vec<Message>,
}

/// The context the model sees next: every live event of the log's current branch.
pub fn llm_context(events: &[Event]) -> Context {
    let decoded: Vec<(&Event, Payload)> = visible(events)
        .into_iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(p) => Some((e, p)),
            Decoded::UnknownKind | Decoded::Unreadable(_) => None,
        })
        .collect();
    project(&decoded)
}

/// The request for an attempt of `turn` (the seq of its `user_message`): the log as it was
/// when the turn's user message was written (its rewinds included), plus the visible
/// compactions since. It excludes the turn's own attempts (answers, partials, failures,
/// memory), so a retry resends exactly the request of the first attempt. A rewind is
/// always written just before a new user message, so none comes after the newest turn;
/// compactions a later rewind hid are left out all the same.
pub fn llm_request(events: &[Event], turn: u64) -> Context {
    let before: Vec<Event> = events
        .iter()
        .zip(abandoned(events))
        .filter(|(e, hidden)| {
            e.seq <= turn || (e.kind == super::events::kind::COMPACTION_APPLIED && !hidden)
        })
        .map(|(e, _)| e.clone())
        .collect();
    llm_context(&before)
}

/// What the live events say about each turn's attempts.
#[derive(Default)]
struct TurnFacts<'a> {
    /// turn → seq of its newest completed attempt's `assistant_turn`.
    newest_answer: HashMap<u64, (u64, u32)>,
    /// (turn, attempt) → the attempt's checkpoints (seq, payload), in seq order.
    checkpoints: HashMap<(u64, u32), Vec<(u64, &'a PendingState)>>,
    /// Seqs of user messages.
    user_seqs: Vec<u64>,
}

impl<'a> TurnFacts<'a> {
    fn gather(live: &[&'a (&'a Event, Payload)]) -> TurnFacts<'a> {
        let mut f = TurnFacts::default();
        for (e, p) in live.iter().map(|x| (x.0, &x.1)) {
            match p {
                Payload::AssistantTurn(a) => {
                    f.newest_answer.insert(a.turn, (e.seq, a.attempt));
                }
                Payload::PendingState(c) => f
                    .checkpoints
                    .entry((c.turn, c.attempt))
                    .or_default()
                    .push((e.seq, c)),
                Payload::UserMessage(_) => f.user_seqs.push(e.seq),
                _ => {}
            }
        }
        f
    }

    fn completed(&self, turn: u64) -> bool {
        self.newest_answer.contains_key(&turn)
    }

    /// Turn memory counts only for the newest completed attempt, and only if it was
    /// written before the next user message (late residue would change an earlier
    /// request's messages).
    fn memory_is_current(&self, seq: u64, m: &TurnMemory) -> bool {
        let newest = self.newest_answer.get(&m.turn).map(|(_, a)| *a) == Some(m.attempt);
        let late = self.user_seqs.iter().any(|u| *u > m.turn && *u < seq);
        newest && !late
    }
}

fn project(decoded: &[(&Event, Payload)]) -> Context {
    let system = decoded
        .iter()
        .find_map(|(_, p)| match p {
            Payload::SessionStarted(s) => Some(s.system.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let compaction: Option<&CompactionApplied> = decoded.iter().rev().find_map(|(_, p)| match p {
        Payload::CompactionApplied(c) => Some(c),
        _ => None,
    });
    let boundary = compaction.map_or(0, |c| c.replaces_through_seq);
    let live: Vec<&(&Event, Payload)> = decoded.iter().filter(|(e, _)| e.seq > boundary).collect();
    let facts = TurnFacts::gather(&live);

    let mut out = Builder::default();
    if let Some(c) = compaction {
        let content = format!("{SUMMARY_HEAD}\n{}", c.summary);
        out.push(Role::User, content, 1, boundary);
    }
    for (e, p) in live.iter().map(|x| (x.0, &x.1)) {
        match p {
            Payload::UserMessage(m) => {
                out.user_message(m.text.clone(), e.seq);
            }
            Payload::AssistantTurn(a)
                if facts.newest_answer.get(&a.turn).map(|x| x.0) == Some(e.seq) =>
            {
                out.push(Role::Assistant, a.text.clone(), e.seq, e.seq);
            }
            Payload::PendingState(c) if !facts.completed(c.turn) => {
                if let Some(cps) = facts.checkpoints.get(&(c.turn, c.attempt)) {
                    partial(&mut out, e.seq, cps);
                }
            }
            Payload::TurnFailed(f) if !facts.completed(f.turn) => {
                let note = format!("[no answer: this turn failed ({})]", f.code);
                out.push(Role::Assistant, note, e.seq, e.seq);
            }
            Payload::TurnMemory(m) if facts.memory_is_current(e.seq, m) => {
                if let Some(block) = memory_block(m) {
                    out.push(Role::User, block, e.seq, e.seq);
                }
            }
            _ => {}
        }
    }
    Context {
        system,
        messages: out.messages,
    }
}

/// The partial of one attempt, at its first checkpoint; nothing at the others, or when it
/// holds no text to continue from.
fn partial(out: &mut Builder, seq: u64, checkpoints: &[(u64, &PendingState)]) {
    let (Some(first), Some(last)) = (checkpoints.first(), checkpoints.last()) else {
        return;
    };
    if first.0 != seq {
        return;
    }
    let text: String = checkpoints.iter().map(|(_, c)| c.text.as_str()).collect();
    if text.is_empty() {
        return;
    }
    out.push(
        Role::Assistant,
        format!("{text}\n{INTERRUPTED_NOTE}"),
        first.0,
        last.0,
    );
}

fn memory_block(m: &TurnMemory) -> Option<String> {
    let mut lines = Vec::new();
    if !m.files_changed.is_empty() {
        lines.push(format!("files changed: {}", m.files_changed.join(", ")));
    }
    for f in &m.failures {
        lines.push(format!("failure: {} — {}", f.what, f.why));
    }
    for k in &m.key_findings {
        lines.push(format!("finding: {k}"));
    }
    (!lines.is_empty()).then(|| format!("{MEMORY_HEAD}\n{}", lines.join("\n")))
}

/// Collects messages, merging adjacent ones of the same role (many chat templates reject
/// two user messages in a row).
#[derive(Default)]
struct Builder {
    messages: Vec<Message>,
    /// The seq of the newest user message that no assistant message has followed yet.
    unanswered_user: Option<u64>,
}

impl Builder {
    fn push(&mut self, role: Role, content: String, first_seq: u64, last_seq: u64) {
        if role == Role::Assistant {
            self.unanswered_user = None;
        }
        match self.messages.last_mut() {
            Some(last) if last.role == role => {
                last.content.push_str("\n\n");
                last.content.push_str(&content);
                last.last_seq = last.last_seq.max(last_seq);
            }
            _ => self.messages.push(Message {
                role,
                content,
                first_seq,
                last_seq,
            }),
        }
    }

    fn user_message(&mut self, text: String, seq: u64) {
        if let Some(previous) = self.unanswered_user.take() {
            self.push(
                Role::Assistant,
                NO_ANSWER_NOTE.to_owned(),
                previous,
                previous,
            );
        }
        self.push(Role::User, text, seq, seq);
        self.unanswered_user = Some(seq);
    }
}

#[cfg(test)]
mod examples;
#[cfg(test)]
mod examples_partials;
#[cfg(test)]
mod page_properties;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod rewind_examples;
#[cfg(test)]
mod step_properties;
