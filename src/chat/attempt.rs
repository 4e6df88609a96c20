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
use super::frames::{ActiveTurn, EndStatus, Frame, Phase};
use super::state::{Fault, Inner, STOP_POLL};
use super::stream::{Stopped, Streamed};
use super::summarizer::summarizer;
use crate::provider::{ChatRequest, ChatRole, ProviderError};
use crate::session::compactor::{Bounds, Budget, CompactionError, PassOutcome};
use crate::session::projection::{Role, llm_request};

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
    let lane = inner.deps.provider.lanes().foreground();
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
    let provider = Arc::clone(&inner.deps.provider);
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
    compact_to_send(inner, turn, &model, budget)?;
    if let Some(i) = turn.interrupt() {
        return Err(i.into());
    }
    let events = inner
        .deps
        .store
        .events_for_context(turn.session_id)
        .map_err(Stopped::Store)?;
    let ctx = llm_request(&events, turn.turn);
    let estimate = inner.deps.estimator.context(&ctx).total;
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

/// Compacts before sending when the context is over the trigger (I4), under the
/// attempt's claim; each pass written counts as the attempt's own write.
fn compact_to_send(
    inner: &Inner,
    turn: &ActiveTurn,
    model: &str,
    budget: Budget,
) -> Result<(), Stopped> {
    let (_, tokens) = inner
        .deps
        .compactor
        .estimate(turn.session_id)
        .map_err(compaction_stop)?;
    if budget.over_trigger(tokens) {
        turn.push(Frame::Status {
            phase: Phase::Compacting,
        });
        let summarizer = summarizer(inner, model, budget.window);
        let interrupted = || turn.interrupt();
        if !turn.keep_claim(&inner.deps.store) {
            return Err(Stopped::ByUser);
        }
        let passes = inner
            .deps
            .compactor
            .pre_send(
                turn.session_id,
                budget,
                &summarizer,
                &Bounds::within(inner.settings.compaction_timeout, &interrupted),
            )
            .map_err(compaction_stop)?;
        for pass in passes {
            if let PassOutcome::Compacted { seq, .. } = pass {
                turn.wrote(seq);
            }
        }
    }
    Ok(())
}

fn compaction_stop(e: CompactionError) -> Stopped {
    match e {
        CompactionError::Store(s) => Stopped::Store(s),
        CompactionError::Interrupted(i) => i.into(),
        other => Stopped::Overflow(other.to_string()),
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
