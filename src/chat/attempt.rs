//! One attempt of a turn (SPEC §6): prepare the request (pick the model, compact before
//! sending if it must), stream it while relaying frames and checkpointing new text, then
//! end it per the table ([`super::end`]) and hand it to the post-turn work.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use super::budget::{ContextBudget, context_budget, listing_for};
use super::end::{end_attempt, end_in_time};
use super::engine::{Fault, Inner, STOP_POLL};
use super::frames::{ActiveTurn, EndStatus, Frame, Phase};
use super::summarizer::summarizer;
use crate::provider::{ChatRequest, ChatRole, Poll, ProviderError, StreamEvent, ToolCall};
use crate::session::StoreError;
use crate::session::compactor::{Bounds, Budget, CompactionError, Interrupt, PassOutcome};
use crate::session::events::{AttemptEnd, Payload, PendingState, Usage};
use crate::session::projection::{Role, llm_request};

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

/// The model serving this attempt and its budget.
struct Serving {
    model: String,
    budget: Budget,
    /// The tools offered to the model in this attempt (none for a tool-less model).
    offered: Vec<crate::tools::ToolSpec>,
}

/// Runs the attempt; a panic inside it (a bug) still ends it, as `internal`, so the
/// session is not left answering 409 until a restart.
pub(super) fn run_guarded(inner: &Arc<Inner>, turn: &ActiveTurn, model: Option<String>) {
    let ran = panic::catch_unwind(AssertUnwindSafe(|| run(inner, turn, model)));
    if let Err(payload) = ran {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        if !turn.is_done() {
            end_internal(inner, turn, &format!("the attempt panicked: {what}"));
        }
    }
}

/// Ends an attempt that could not run (no thread) or broke (a panic): `turn_failed`
/// `internal`, an `error` and an `end` frame.
pub(super) fn end_internal(inner: &Inner, turn: &ActiveTurn, why: &str) {
    if turn.frame_count() == 0 {
        turn.push(turn_frame(turn));
    }
    let end = end_attempt(
        inner,
        turn,
        "",
        &Streamed::default(),
        Stopped::Internal(why.to_owned()),
        Duration::ZERO,
    );
    turn.finish(end);
}

fn turn_frame(turn: &ActiveTurn) -> Frame {
    Frame::Turn {
        session_id: turn.session_id.to_string(),
        turn: turn.turn,
        attempt: turn.attempt,
    }
}

fn run(inner: &Arc<Inner>, turn: &ActiveTurn, model: Option<String>) {
    turn.push(turn_frame(turn));
    // The chat comes first: from now until the stream ends, background calls on this
    // provider stop (a running one is cancelled) and wait.
    let lane = inner.provider.lanes().foreground();
    let started = Instant::now();
    let mut out = Streamed::default();
    let (serving, stopped) = match prepare(inner, turn, model) {
        Ok((serving, request)) => {
            let stopped = super::steps::run(
                inner,
                turn,
                request,
                &serving.model,
                &serving.offered,
                serving.budget.limit_tokens(),
                &mut out,
            );
            (Some(serving), stopped)
        }
        Err(stopped) => (None, stopped),
    };
    let model = serving
        .as_ref()
        .map(|s| s.model.clone())
        .unwrap_or_default();
    drop(lane);
    let end = end_in_time(inner, turn, &model, &out, stopped, started.elapsed());
    let completed = matches!(
        &end,
        Frame::End {
            status: EndStatus::Completed,
            ..
        }
    );
    // Started before the end is announced, so whoever sees the end can count on the
    // post-turn job being there (`Engine::background_jobs`).
    if let Some(s) = serving {
        super::post_turn::spawn(
            inner,
            turn.session_id,
            turn.turn,
            turn.attempt,
            completed,
            s.model,
            s.budget,
        );
    }
    turn.finish(end);
}

/// Picks the model, compacts before sending (I4), and builds the request. A `/stop` or a
/// shutdown ends it in every step, a hung listing or summariser included.
fn prepare(
    inner: &Inner,
    turn: &ActiveTurn,
    model: Option<String>,
) -> Result<(Serving, ChatRequest), Stopped> {
    let s = &inner.settings;
    if s.fault == Some(Fault::PanicInAttempt) {
        panic!("injected fault: a panic inside the attempt");
    }
    let configured = model.or_else(|| s.chat_model.clone());
    let provider = Arc::clone(&inner.provider);
    let (chat_model, context_window) = (s.chat_model.clone(), s.context_window);
    // The listing may take until its timeout: resolved on a thread of its own.
    let (model, list) = off_thread(turn, move || {
        let model = provider.resolve_model(configured.as_deref())?;
        let list = listing_for(&provider, chat_model.as_deref(), context_window, &model);
        Ok::<_, ProviderError>((model, list))
    })?
    .map_err(Stopped::Error)?;
    // The tool definitions go with every request: they take room in the window like the
    // answer's reserve, so compaction makes room for them (I4).
    let ContextBudget {
        budget, offered, ..
    } = context_budget(inner, &model, &list);
    let (_, tokens) = inner
        .compactor
        .estimate(turn.session_id)
        .map_err(compaction_stop)?;
    if budget.over_trigger(tokens) {
        turn.push(Frame::Status {
            phase: Phase::Compacting,
        });
        let summarizer = summarizer(inner, &model, budget.window);
        let interrupted = || turn.interrupt();
        if !turn.keep_claim(&inner.store) {
            return Err(Stopped::ByUser);
        }
        let passes = inner
            .compactor
            .pre_send(
                turn.session_id,
                budget,
                &summarizer,
                &Bounds::within(s.compaction_timeout, &interrupted),
            )
            .map_err(compaction_stop)?;
        for pass in passes {
            if let PassOutcome::Compacted { seq, .. } = pass {
                turn.wrote(seq);
            }
        }
    }
    if let Some(i) = turn.interrupt() {
        return Err(i.into());
    }
    let events = inner
        .store
        .events_for_context(turn.session_id)
        .map_err(Stopped::Store)?;
    let ctx = llm_request(&events, turn.turn);
    let estimate = inner.estimator.context(&ctx).total;
    if budget.over_limit(estimate) {
        return Err(Stopped::Overflow(format!(
            "the request is {estimate} tokens; the model's window allows {}",
            budget.limit_tokens()
        )));
    }
    let request = ChatRequest {
        model: model.clone(),
        system: ctx.system,
        messages: ctx
            .messages
            .into_iter()
            .map(|m| {
                let role = match m.role {
                    Role::User => ChatRole::User,
                    Role::Assistant => ChatRole::Assistant,
                };
                (role, m.content)
            })
            .collect(),
        max_tokens: s.max_output_tokens,
        temperature: s.temperature,
        tools: vec![],
        tool_choice_none: false,
        steps: vec![],
    };
    Ok((
        Serving {
            model,
            budget,
            offered,
        },
        request,
    ))
}

fn compaction_stop(e: CompactionError) -> Stopped {
    match e {
        CompactionError::Store(s) => Stopped::Store(s),
        CompactionError::Interrupted(i) => i.into(),
        other => Stopped::Overflow(other.to_string()),
    }
}

impl From<Interrupt> for Stopped {
    fn from(i: Interrupt) -> Stopped {
        match i {
            Interrupt::Stopped => Stopped::ByUser,
            Interrupt::Shutdown => Stopped::Shutdown,
        }
    }
}

/// Runs `f` (a provider call that may hang) on a thread of its own, so a `/stop` or a
/// shutdown ends the wait within [`STOP_POLL`]; an abandoned call ends by its own timeout.
fn off_thread<T: Send + 'static>(
    turn: &ActiveTurn,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Stopped> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("brain-prepare".into())
        .spawn(move || {
            // The attempt may have stopped waiting: the answer is dropped.
            let _ = tx.send(f());
        })
        .map_err(|e| Stopped::Internal(format!("cannot start a thread: {e}")))?;
    loop {
        if let Some(i) = turn.interrupt() {
            return Err(i.into());
        }
        match rx.recv_timeout(STOP_POLL) {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Stopped::Internal(
                    "a preparing step ended without an answer".into(),
                ));
            }
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
    let mut stream = inner.provider.stream_chat(request);
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
    if !turn.keep_claim(&inner.store) {
        return Ok(());
    }
    let Some(payload) = unsaved(turn, out) else {
        return Ok(());
    };
    let seq = turn.append(&inner.store, &payload)?.seq;
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
