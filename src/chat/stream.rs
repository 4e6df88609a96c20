//! One provider call of an attempt, streamed (SPEC §6, I5): frames relayed to the
//! subscribers as they arrive, new text checkpointed every interval while the session is
//! still the attempt's, and what arrived kept ([`Streamed`]) for the step loop and the
//! ending; why it stopped is a [`Stopped`].

use std::time::Instant;

use super::frames::{ActiveTurn, Frame, Phase};
use super::state::{Inner, STOP_POLL};
use crate::provider::{ChatRequest, Poll, ProviderError, StreamEvent, ToolCall};
use crate::session::StoreError;
use crate::session::compactor::Interrupt;
use crate::session::events::{AttemptEnd, Payload, PendingState, Usage};

/// What the stream produced, kept for the checkpoints and the ending.
#[derive(Default)]
pub(super) struct Streamed {
    pub text: String,
    pub reasoning: String,
    pub saved_text: usize,
    pub saved_reasoning: usize,
    pub last_checkpoint_seq: Option<u64>,
    /// Usage summed over the attempt's steps.
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    /// Provider calls made so far (one per step).
    pub steps: u32,
    /// The current step: its usage as the provider reported it, its own text (without
    /// the blank line joining it to the previous step's), the calls it asked for, and
    /// when it started (each step is its own ledger row).
    pub step_usage: Option<Usage>,
    pub step_text: String,
    pub step_calls: Vec<ToolCall>,
    pub step_started: Option<Instant>,
    /// Usage of the steps before the current one.
    pub prior_usage: Usage,
    /// The next text starts a new step's: a blank line goes before it.
    pub join_pending: bool,
}

impl Streamed {
    /// A new step begins: its own text, calls and usage start empty.
    pub(super) fn begin_step(&mut self) {
        self.steps += 1;
        self.step_usage = None;
        self.step_text.clear();
        self.step_calls.clear();
        self.step_started = Some(Instant::now());
        self.prior_usage = self.usage.unwrap_or_default();
    }
}

/// `a + b`, field by field.
pub(super) fn add_usage(a: Usage, b: Usage) -> Usage {
    Usage {
        input_tokens: a.input_tokens + b.input_tokens,
        output_tokens: a.output_tokens + b.output_tokens,
        cache_read_tokens: a.cache_read_tokens + b.cache_read_tokens,
        cache_write_tokens: a.cache_write_tokens + b.cache_write_tokens,
    }
}

/// Why the stream stopped.
pub(super) enum Stopped {
    Completed,
    Error(ProviderError),
    ByUser,
    Shutdown,
    Overflow(String),
    Store(StoreError),
    /// A bug or a resource limit inside brain (a panic, no thread): logged, `internal`.
    Internal(String),
}

impl From<Interrupt> for Stopped {
    fn from(i: Interrupt) -> Stopped {
        match i {
            Interrupt::Stopped => Stopped::ByUser,
            Interrupt::Shutdown => Stopped::Shutdown,
        }
    }
}

/// Streams the request (one step), relaying frames and checkpointing new text.
pub(super) fn stream(
    inner: &Inner,
    turn: &ActiveTurn,
    request: &ChatRequest,
    out: &mut Streamed,
) -> Stopped {
    turn.push(Frame::Status {
        phase: Phase::Waiting,
    });
    let mut stream = inner.deps.provider.stream_chat(request);
    let interval = inner.settings.checkpoint_interval;
    let mut last_checkpoint = Instant::now();
    let mut streaming = false;
    loop {
        if let Some(i) = turn.interrupt() {
            return i.into();
        }
        let wait = interval
            .saturating_sub(last_checkpoint.elapsed())
            .min(STOP_POLL);
        match stream.poll(wait) {
            Poll::Event(Ok(ev)) => {
                if !streaming && matches!(ev, StreamEvent::Text(_) | StreamEvent::Reasoning(_)) {
                    streaming = true;
                    turn.push(Frame::Status {
                        phase: Phase::Streaming,
                    });
                }
                relay(turn, ev, out);
                if out.text.len() + out.reasoning.len() > crate::config::MAX_ANSWER_BYTES {
                    return Stopped::Error(ProviderError::Malformed(format!(
                        "the answer is larger than {} bytes",
                        crate::config::MAX_ANSWER_BYTES
                    )));
                }
            }
            Poll::Event(Err(e)) => return Stopped::Error(e),
            Poll::Done => return Stopped::Completed,
            Poll::Idle => {}
        }
        if last_checkpoint.elapsed() >= interval {
            if let Err(e) = checkpoint(inner, turn, out) {
                return Stopped::Store(e);
            }
            last_checkpoint = Instant::now();
        }
    }
}

fn relay(turn: &ActiveTurn, ev: StreamEvent, out: &mut Streamed) {
    match ev {
        StreamEvent::Text(t) => {
            out.step_text.push_str(&t);
            // The answer is the steps' text joined by a blank line (SPEC §13).
            let t = if std::mem::take(&mut out.join_pending) && !out.text.is_empty() {
                format!("\n\n{t}")
            } else {
                t
            };
            out.text.push_str(&t);
            turn.push(Frame::Chunk { text: t });
        }
        StreamEvent::Reasoning(r) => {
            out.reasoning.push_str(&r);
            turn.push(Frame::Reasoning { text: r });
        }
        StreamEvent::Usage(u) => {
            out.step_usage = Some(u);
            let total = add_usage(out.prior_usage, u);
            out.usage = Some(total);
            turn.push(Frame::Usage(total));
        }
        StreamEvent::ToolCalls(calls) => out.step_calls = calls,
        StreamEvent::Finish(f) => out.finish_reason = Some(f),
    }
}

/// The `pending_state` holding what arrived since the last checkpoint, if anything did.
pub(super) fn unsaved(turn: &ActiveTurn, out: &Streamed) -> Option<Payload> {
    let text = &out.text[out.saved_text..];
    let reasoning = &out.reasoning[out.saved_reasoning..];
    if text.is_empty() && reasoning.is_empty() {
        return None;
    }
    Some(Payload::PendingState(PendingState {
        turn: turn.turn,
        attempt: turn.attempt,
        text: text.to_owned(),
        reasoning: (!reasoning.is_empty()).then(|| reasoning.to_owned()),
        ended: None,
        step: Some(out.steps),
    }))
}

/// The last checkpoint of an attempt that ended abnormally: what was not saved yet (maybe
/// nothing) and why it ended.
pub(super) fn last_checkpoint(turn: &ActiveTurn, out: &Streamed, ended: AttemptEnd) -> Payload {
    let reasoning = &out.reasoning[out.saved_reasoning..];
    Payload::PendingState(PendingState {
        turn: turn.turn,
        attempt: turn.attempt,
        text: out.text[out.saved_text..].to_owned(),
        reasoning: (!reasoning.is_empty()).then(|| reasoning.to_owned()),
        ended: Some(ended),
        step: Some(out.steps),
    })
}

/// Appends a `pending_state` with what arrived since the last one, if anything did,
/// while the session is still this attempt's (checked every checkpoint interval).
pub(super) fn checkpoint(
    inner: &Inner,
    turn: &ActiveTurn,
    out: &mut Streamed,
) -> Result<(), StoreError> {
    // The claim first (one query on its connection): an attempt whose session another
    // server took appends nothing more but its end.
    if !turn.keep_claim(&inner.deps.store) {
        return Ok(());
    }
    let Some(payload) = unsaved(turn, out) else {
        return Ok(());
    };
    let seq = turn.append(&inner.deps.store, &payload)?.seq;
    turn.wrote(seq);
    out.saved(seq);
    turn.push(Frame::Checkpoint { seq });
    Ok(())
}

impl Streamed {
    /// Everything so far is in the checkpoint `seq`.
    pub(super) fn saved(&mut self, seq: u64) {
        self.saved_text = self.text.len();
        self.saved_reasoning = self.reasoning.len();
        self.last_checkpoint_seq = Some(seq);
    }
}
