//! The UI transcript (SPEC §4): everything a person should see, in seq order, hiding
//! nothing: earlier versions, interrupted and failed attempts, summaries, tool calls and
//! the questions about them. Pure over the events.

use std::collections::HashMap;

use serde::Serialize;

use super::Questions;
use super::steps::{Split, StepText, split};
use super::tree::abandoned;
use crate::session::events::{
    AssistantTurn, AttemptEnd, Decoded, Event, Payload, PendingState, TitledBy, ToolExecution,
    TurnFailed, Usage,
};

/// One entry of the UI transcript.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Item {
    pub seq: u64,
    pub created_at: String,
    /// A later rewind hides this event from the model (SPEC §14): an earlier version,
    /// shown, never dropped.
    pub abandoned: bool,
    #[serde(flatten)]
    pub body: ItemBody,
}

/// What an item shows (SPEC §4's table); serialised with its `kind`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ItemBody {
    User {
        text: String,
    },
    Assistant {
        turn: u64,
        attempt: u32,
        text: String,
        reasoning: Option<String>,
        provider: String,
        model: String,
        usage: Usage,
        duration_ms: u64,
        finish_reason: Option<String>,
        /// Present when the attempt's earlier steps are shown as `step` items: what its
        /// last step wrote, which this item shows (`text` stays the whole answer).
        #[serde(skip_serializing_if = "Option::is_none")]
        last_step: Option<StepText>,
    },
    Interrupted {
        turn: u64,
        attempt: u32,
        text: String,
        reasoning: Option<String>,
        /// Why it ended, from its last checkpoint; `None` (null) when brain never said:
        /// the process died mid-answer.
        ended: Option<AttemptEnd>,
        /// As on `assistant`.
        #[serde(skip_serializing_if = "Option::is_none")]
        last_step: Option<StepText>,
    },
    /// The checkpoints of the attempt that is still running: a reader shows them as the
    /// answer so far and follows the rest through `/live`, not as a cut-off answer.
    Streaming {
        turn: u64,
        attempt: u32,
        text: String,
        reasoning: Option<String>,
        /// As on `assistant`.
        #[serde(skip_serializing_if = "Option::is_none")]
        last_step: Option<StepText>,
    },
    /// What the model wrote in a step that went on to call tools (SPEC §13), where it
    /// happened: before that step's calls. The attempt's own item still holds the whole
    /// answer as its `text`.
    Step {
        turn: u64,
        attempt: u32,
        step: u32,
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    Error {
        turn: u64,
        attempt: u32,
        code: String,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
    },
    Compaction {
        summary: String,
        replaces_through_seq: u64,
        tokens_before: u64,
        tokens_after: u64,
        /// `llm`, or `extractive` when no model could summarise.
        method: String,
    },
    Title {
        title: String,
        by: TitledBy,
    },
    Tool(ToolExecution),
    /// A question to the user about a tool call, with its answer once there is one.
    Permission {
        /// The attempt that asked: with the call id, what names the call.
        turn: u64,
        attempt: u32,
        call_id: String,
        name: String,
        args: String,
        /// `allow` or `deny`; null while the question waits.
        decision: Option<String>,
        by: Option<String>,
        remember: bool,
    },
    /// An edit: the conversation went on from `to_seq`, `edited_seq` being the message
    /// that was edited.
    Rewind {
        to_seq: u64,
        edited_seq: u64,
    },
    /// An event this brain cannot show: a payload that does not decode, or a kind from a
    /// newer brain.
    Unreadable {
        event_kind: String,
    },
}

impl ItemBody {
    /// An answer's text as this item shows it: its last step's when its earlier steps
    /// are items of their own, else all of it.
    pub fn shown_text(&self) -> Option<&str> {
        match self {
            ItemBody::Assistant {
                text, last_step, ..
            }
            | ItemBody::Interrupted {
                text, last_step, ..
            }
            | ItemBody::Streaming {
                text, last_step, ..
            } => Some(
                last_step
                    .as_ref()
                    .map_or(text.as_str(), |s| s.text.as_str()),
            ),
            ItemBody::Step { text, .. } | ItemBody::User { text } => Some(text),
            _ => None,
        }
    }
}

/// Everything a person should see, in seq order, compacted events included. `active` is
/// the attempt still running, as (turn, attempt), if the caller knows of one: its
/// checkpoints are one `streaming` item instead of an `interrupted` one. The log alone
/// cannot tell a running attempt from one whose process died, so a reader without the
/// server's engine passes `None` and sees it as interrupted.
pub fn ui_transcript(events: &[Event], active: Option<(u64, u32)>) -> Vec<Item> {
    let decoded: Vec<(&Event, Decoded)> = events.iter().map(|e| (e, e.decode())).collect();
    let mut attempts = Attempts {
        active,
        ..Attempts::default()
    };
    for (e, d) in &decoded {
        match d {
            Decoded::Known(Payload::AssistantTurn(a)) => {
                attempts.completed.insert((a.turn, a.attempt), a);
            }
            Decoded::Known(Payload::PendingState(c)) => {
                attempts
                    .partials
                    .entry((c.turn, c.attempt))
                    .or_default()
                    .push((e.seq, c));
            }
            Decoded::Known(Payload::PermissionRequested(q)) => attempts.questions.asked(e.seq, q),
            Decoded::Known(Payload::PermissionResolved(r)) => {
                attempts.questions.resolved(r);
            }
            _ => {}
        }
    }
    attempts.splits = attempts
        .partials
        .iter()
        .filter_map(|(key, cps)| Some((*key, split(cps, attempts.completed.get(key).copied())?)))
        .collect();
    let hidden = abandoned(events);
    let mut items = Vec::new();
    for ((e, d), abandoned) in decoded.iter().zip(hidden) {
        let body = match d {
            Decoded::Known(p) => match known_item(e.seq, p, &mut attempts) {
                Some(b) => b,
                None => continue,
            },
            Decoded::UnknownKind | Decoded::Unreadable(_) => ItemBody::Unreadable {
                event_kind: e.kind.clone(),
            },
        };
        items.push(Item {
            seq: e.seq,
            created_at: e.created_at.clone(),
            abandoned,
            body,
        });
    }
    items
}

/// What the transcript knows about attempts while it walks the log.
#[derive(Default)]
struct Attempts<'a> {
    /// The attempt still running, if any.
    active: Option<(u64, u32)>,
    /// (turn, attempt) → its answer.
    completed: HashMap<(u64, u32), &'a AssistantTurn>,
    /// (turn, attempt) → its checkpoints with their seqs, in seq order.
    partials: HashMap<(u64, u32), Vec<(u64, &'a PendingState)>>,
    /// The attempts whose earlier steps are shown as their own items.
    splits: HashMap<(u64, u32), Split>,
    /// The questions and their answers (an answer is shown with its question).
    questions: Questions<'a>,
}

impl Attempts<'_> {
    fn split_of(&self, turn: u64, attempt: u32) -> Option<&Split> {
        self.splits.get(&(turn, attempt))
    }
}

/// A checkpoint's item, if it carries one: the text of a step that went on to call tools
/// (at the step's first checkpoint), or an attempt that did not complete (at the first
/// checkpoint of its last part); a completed attempt's answer is its `assistant_turn`.
fn checkpoint_item(seq: u64, c: &PendingState, attempts: &Attempts) -> Option<ItemBody> {
    let key = (c.turn, c.attempt);
    let (turn, attempt) = key;
    let split = attempts.split_of(turn, attempt);
    if let Some(e) = split.and_then(|s| s.earlier.iter().find(|e| e.first_seq == seq)) {
        return Some(ItemBody::Step {
            turn,
            attempt,
            step: e.step,
            text: e.shown.text.clone(),
            reasoning: e.shown.reasoning.clone(),
        });
    }
    if attempts.completed.contains_key(&key) {
        return None;
    }
    let cps = attempts
        .partials
        .get(&key)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let first = split
        .and_then(|s| s.last_first_seq)
        .or(cps.first().map(|c| c.0));
    if first != Some(seq) {
        return None;
    }
    let text: String = cps.iter().map(|(_, c)| c.text.as_str()).collect();
    let reasoning: String = cps
        .iter()
        .filter_map(|(_, c)| c.reasoning.as_deref())
        .collect();
    let reasoning = (!reasoning.is_empty()).then_some(reasoning);
    let last_step = split.map(|s| s.last.clone());
    Some(if attempts.active == Some(key) {
        ItemBody::Streaming {
            turn,
            attempt,
            text,
            reasoning,
            last_step,
        }
    } else {
        ItemBody::Interrupted {
            turn,
            attempt,
            text,
            reasoning,
            ended: cps.iter().rev().find_map(|(_, c)| c.ended.clone()),
            last_step,
        }
    })
}

fn known_item(seq: u64, p: &Payload, attempts: &mut Attempts) -> Option<ItemBody> {
    Some(match p {
        Payload::UserMessage(m) => ItemBody::User {
            text: m.text.clone(),
        },
        Payload::AssistantTurn(a) => {
            let last_step = attempts.split_of(a.turn, a.attempt).map(|s| s.last.clone());
            assistant_item(a, last_step)
        }
        Payload::PendingState(c) => return checkpoint_item(seq, c, attempts),
        Payload::TurnFailed(f) => failed_item(f),
        Payload::CompactionApplied(c) => ItemBody::Compaction {
            summary: c.summary.clone(),
            replaces_through_seq: c.replaces_through_seq,
            tokens_before: c.tokens_before,
            tokens_after: c.tokens_after,
            method: c.method.clone(),
        },
        Payload::SessionTitled(t) => ItemBody::Title {
            title: t.title.clone(),
            by: t.by,
        },
        Payload::ToolExecution(t) => ItemBody::Tool(t.clone()),
        Payload::PermissionRequested(q) => {
            let answer = attempts.questions.answer(seq);
            ItemBody::Permission {
                turn: q.turn,
                attempt: q.attempt,
                call_id: q.call_id.clone(),
                name: q.name.clone(),
                args: q.args.clone(),
                decision: answer.map(|a| a.decision.clone()),
                by: answer.map(|a| a.by.clone()),
                remember: answer.is_some_and(|a| a.remember),
            }
        }
        Payload::Rewind(r) => ItemBody::Rewind {
            to_seq: r.to_seq,
            edited_seq: r.edited_seq,
        },
        Payload::PermissionResolved(_) => return None,
        Payload::SessionStarted(_) | Payload::SessionArchived(_) | Payload::TurnMemory(_) => {
            return None;
        }
    })
}

fn assistant_item(a: &AssistantTurn, last_step: Option<StepText>) -> ItemBody {
    ItemBody::Assistant {
        turn: a.turn,
        attempt: a.attempt,
        text: a.text.clone(),
        reasoning: a.reasoning.clone(),
        provider: a.provider.clone(),
        model: a.model.clone(),
        usage: a.usage,
        duration_ms: a.duration_ms,
        finish_reason: a.finish_reason.clone(),
        last_step,
    }
}

fn failed_item(f: &TurnFailed) -> ItemBody {
    ItemBody::Error {
        turn: f.turn,
        attempt: f.attempt,
        code: f.code.clone(),
        message: f.message.clone(),
        reasoning: f.reasoning.clone(),
    }
}
