//! The turn engine (SPEC §6).
//!
//! [`Engine::send`] validates a message, checks that no attempt of the session is active
//! (I7), appends the user message (I2) and starts the attempt on its own thread: the
//! attempt belongs to the engine, so a client that goes away cancels nothing (I8); it can
//! re-attach ([`Engine::live`]) or stop it ([`Engine::stop`]). The attempt compacts if it
//! must, streams from the provider, checkpoints new text every 2 s (I5), and ends exactly
//! per the table of SPEC §6; post-turn work (distillation, post-persist compaction, the
//! automatic title) then runs in the background.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::frames::{ActiveTurn, EndStatus, Frame, Phase, Subscription};
use super::summarizer::ProviderSummarizer;
use crate::provider::{ChatRequest, ChatRole, Poll, Provider, ProviderError, StreamEvent};
use crate::session::compactor::{Budget, CompactionError, Compactor};
use crate::session::events::{
    AssistantTurn, Decoded, Payload, PendingState, TurnFailed, Usage, UserMessage, kind,
};
use crate::session::projection::{Role, llm_request};
use crate::session::store::{CallStatus, LedgerEntry, Purpose};
use crate::session::{SessionId, Store, StoreError};
use crate::tokens::Estimator;

/// How often new text is checkpointed while an attempt streams (I5: a crash loses at most
/// this much).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(2);
/// How often a streaming attempt looks at its stop flag.
pub const STOP_POLL: Duration = Duration::from_millis(50);
/// How long an ended attempt stays available to `/live`.
pub const LIVE_RETENTION: Duration = Duration::from_secs(30);
/// Shutdown's whole budget (SPEC §6: exit within 10 s).
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);
/// The default largest user message.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// What the engine needs to know about models and limits.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    pub chat_model: Option<String>,
    pub summarize_model: Option<String>,
    pub mini_model: Option<String>,
    /// `--context-window`: overrides the listing for the chat model.
    pub context_window: Option<u64>,
    pub compact_at: f64,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub distill: bool,
    pub max_message_bytes: usize,
    pub checkpoint_interval: Duration,
}

impl Default for EngineSettings {
    fn default() -> EngineSettings {
        EngineSettings {
            chat_model: None,
            summarize_model: None,
            mini_model: None,
            context_window: None,
            compact_at: 0.6,
            max_output_tokens: None,
            temperature: None,
            distill: true,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            checkpoint_interval: CHECKPOINT_INTERVAL,
        }
    }
}

/// Why the engine refused a request.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the message is empty")]
    EmptyMessage,
    #[error("the message is {0} bytes; the limit is {1}")]
    MessageTooLarge(usize, usize),
    #[error("a turn of this session is still running")]
    TurnInFlight,
    #[error("there is no message to retry (none, or compacted away)")]
    NothingToRetry,
    #[error("this session has no active turn")]
    NoActiveTurn,
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// What shutdown did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Attempts that were running and were ended.
    pub ended_attempts: usize,
    /// Attempts still running at the deadline.
    pub unfinished_attempts: usize,
    /// Background jobs not finished at the deadline (skipped).
    pub skipped_background: usize,
}

pub(super) struct Inner {
    pub store: Arc<Store>,
    pub provider: Arc<Provider>,
    pub compactor: Compactor,
    pub estimator: Arc<Estimator>,
    pub settings: EngineSettings,
    turns: Mutex<HashMap<SessionId, Arc<ActiveTurn>>>,
    accepting: AtomicBool,
    workers: Mutex<Vec<JoinHandle<()>>>,
    background: Mutex<Vec<JoinHandle<()>>>,
}

/// The turn engine. Cheap to clone; every clone is the same engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Engine {
    pub fn new(store: Arc<Store>, provider: Arc<Provider>, settings: EngineSettings) -> Engine {
        let estimator = Arc::new(Estimator::new());
        Engine {
            inner: Arc::new(Inner {
                compactor: Compactor::new(Arc::clone(&store), Arc::clone(&estimator)),
                store,
                provider,
                estimator,
                settings,
                turns: Mutex::new(HashMap::new()),
                accepting: AtomicBool::new(true),
                workers: Mutex::new(Vec::new()),
                background: Mutex::new(Vec::new()),
            }),
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }

    /// Sends a user message and starts its first attempt.
    pub fn send(
        &self,
        id: SessionId,
        text: &str,
        model: Option<String>,
    ) -> Result<Subscription, EngineError> {
        self.accepting()?;
        if text.trim().is_empty() {
            return Err(EngineError::EmptyMessage);
        }
        let limit = self.inner.settings.max_message_bytes;
        if text.len() > limit {
            return Err(EngineError::MessageTooLarge(text.len(), limit));
        }
        let mut turns = lock(&self.inner.turns);
        if turns.get(&id).is_some_and(|t| !t.is_done()) {
            return Err(EngineError::TurnInFlight);
        }
        // I2: the user message is durable before any provider call.
        let seq = self.inner.store.write(|w| {
            if w.session(id)?.archived {
                w.set_archived(id, false)?;
            }
            Ok(w.append(
                id,
                &Payload::UserMessage(UserMessage {
                    text: text.to_owned(),
                }),
            )?
            .seq)
        })?;
        Ok(self.start(&mut turns, ActiveTurn::new(id, seq, 1), model))
    }

    /// Starts a new attempt of the newest user message, with exactly its original request.
    pub fn retry(&self, id: SessionId, model: Option<String>) -> Result<Subscription, EngineError> {
        self.accepting()?;
        let mut turns = lock(&self.inner.turns);
        if turns.get(&id).is_some_and(|t| !t.is_done()) {
            return Err(EngineError::TurnInFlight);
        }
        // Only the live tail can hold a retryable message: one compacted away is gone.
        let events = self.inner.store.events_for_context(id)?;
        let turn = events
            .iter()
            .filter(|e| e.kind == kind::USER_MESSAGE)
            .map(|e| e.seq)
            .max()
            .ok_or(EngineError::NothingToRetry)?;
        let attempt = events
            .iter()
            .filter_map(|e| match e.decode() {
                Decoded::Known(Payload::AssistantTurn(a)) if a.turn == turn => Some(a.attempt),
                Decoded::Known(Payload::PendingState(p)) if p.turn == turn => Some(p.attempt),
                Decoded::Known(Payload::TurnFailed(f)) if f.turn == turn => Some(f.attempt),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            + 1;
        Ok(self.start(&mut turns, ActiveTurn::new(id, turn, attempt), model))
    }

    fn start(
        &self,
        turns: &mut HashMap<SessionId, Arc<ActiveTurn>>,
        turn: ActiveTurn,
        model: Option<String>,
    ) -> Subscription {
        let turn = Arc::new(turn);
        // Ended attempts are kept for `/live` only so long.
        turns.retain(|_, t| t.ended_ago().is_none_or(|ago| ago < LIVE_RETENTION));
        turns.insert(turn.session_id, Arc::clone(&turn));
        let subscription = turn.subscribe();
        let inner = Arc::clone(&self.inner);
        let handle = thread::spawn(move || run_attempt(&inner, &turn, model));
        let mut workers = lock(&self.inner.workers);
        workers.retain(|h| !h.is_finished());
        workers.push(handle);
        subscription
    }

    /// Asks the session's active attempt to stop.
    pub fn stop(&self, id: SessionId) -> Result<(), EngineError> {
        match lock(&self.inner.turns).get(&id) {
            Some(t) if !t.is_done() => {
                t.request_stop();
                Ok(())
            }
            _ => Err(EngineError::NoActiveTurn),
        }
    }

    /// The session's active attempt, or one that ended within [`LIVE_RETENTION`], from its
    /// first frame.
    pub fn live(&self, id: SessionId) -> Result<Subscription, EngineError> {
        match lock(&self.inner.turns).get(&id) {
            Some(t) if t.ended_ago().is_none_or(|ago| ago < LIVE_RETENTION) => Ok(t.subscribe()),
            _ => Err(EngineError::NoActiveTurn),
        }
    }

    /// Deletes a session, unless one of its attempts is running (409 `turn_in_flight`).
    pub fn delete(&self, id: SessionId) -> Result<(), EngineError> {
        let turns = lock(&self.inner.turns);
        if turns.get(&id).is_some_and(|t| !t.is_done()) {
            return Err(EngineError::TurnInFlight);
        }
        self.inner.store.delete_session(id)?;
        Ok(())
    }

    /// The provider this engine talks to.
    pub fn provider(&self) -> &Arc<Provider> {
        &self.inner.provider
    }

    /// The engine's settings.
    pub fn settings(&self) -> &EngineSettings {
        &self.inner.settings
    }

    /// Whether the session has an attempt running.
    pub fn turn_active(&self, id: SessionId) -> bool {
        lock(&self.inner.turns)
            .get(&id)
            .is_some_and(|t| !t.is_done())
    }

    /// The session's running attempt as (turn, attempt), if one is running: the transcript
    /// shows its checkpoints as the answer so far, not as a cut-off one.
    pub fn active_attempt(&self, id: SessionId) -> Option<(u64, u32)> {
        lock(&self.inner.turns)
            .get(&id)
            .filter(|t| !t.is_done())
            .map(|t| (t.turn, t.attempt))
    }

    fn accepting(&self) -> Result<(), EngineError> {
        if self.inner.accepting.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(EngineError::ShuttingDown)
        }
    }

    /// Stops accepting, ends every active attempt per the table (a final checkpoint, or
    /// `turn_failed shutdown`), and waits for post-turn work, all within `deadline`;
    /// what is still running then is skipped, with a log line.
    pub fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let until = Instant::now() + deadline;
        self.inner.accepting.store(false, Ordering::SeqCst);
        let mut report = ShutdownReport::default();
        for t in lock(&self.inner.turns).values() {
            if !t.is_done() {
                t.request_shutdown();
                report.ended_attempts += 1;
            }
        }
        let workers = std::mem::take(&mut *lock(&self.inner.workers));
        report.unfinished_attempts = wait_all(workers, until);
        let background = std::mem::take(&mut *lock(&self.inner.background));
        report.skipped_background = wait_all(background, until);
        if report.skipped_background > 0 {
            eprintln!(
                "brain: shutdown: skipping {} unfinished post-turn jobs",
                report.skipped_background
            );
        }
        report
    }
}

/// Waits for threads until `until`; returns how many were still running.
impl Inner {
    /// Keeps a post-turn job so shutdown can wait for it.
    pub(super) fn track_background(&self, handle: JoinHandle<()>) {
        let mut jobs = lock(&self.background);
        jobs.retain(|h| !h.is_finished());
        jobs.push(handle);
    }
}

fn wait_all(handles: Vec<JoinHandle<()>>, until: Instant) -> usize {
    let mut left = handles;
    while !left.is_empty() && Instant::now() < until {
        left.retain(|h| !h.is_finished());
        thread::sleep(Duration::from_millis(10));
    }
    let unfinished = left.iter().filter(|h| !h.is_finished()).count();
    for h in left.into_iter().filter(|h| h.is_finished()) {
        let _ = h.join();
    }
    unfinished
}

/// What the stream produced, kept for the checkpoints and the ending.
#[derive(Default)]
struct Streamed {
    text: String,
    reasoning: String,
    saved_text: usize,
    saved_reasoning: usize,
    last_checkpoint_seq: Option<u64>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
}

/// Why the stream stopped.
enum Stopped {
    Completed,
    Error(ProviderError),
    ByUser,
    Shutdown,
    Overflow(String),
    Store(StoreError),
}

/// The model serving this attempt and its budget.
struct Serving {
    model: String,
    budget: Budget,
}

fn run_attempt(inner: &Arc<Inner>, turn: &ActiveTurn, model: Option<String>) {
    turn.push(Frame::Turn {
        session_id: turn.session_id.to_string(),
        turn: turn.turn,
        attempt: turn.attempt,
    });
    let started = Instant::now();
    let mut out = Streamed::default();
    let (serving, stopped) = match prepare(inner, turn, model) {
        Ok((serving, request)) => {
            let stopped = stream(inner, turn, &request, &mut out);
            (Some(serving), stopped)
        }
        Err(stopped) => (None, stopped),
    };
    let model = serving
        .as_ref()
        .map(|s| s.model.clone())
        .unwrap_or_default();
    let end = end_attempt(inner, turn, &model, &out, stopped, started.elapsed());
    let completed = matches!(
        &end,
        Frame::End {
            status: EndStatus::Completed,
            ..
        }
    );
    turn.finish(end);
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
}

/// Picks the model, compacts before sending (I4), and builds the request.
fn prepare(
    inner: &Inner,
    turn: &ActiveTurn,
    model: Option<String>,
) -> Result<(Serving, ChatRequest), Stopped> {
    let s = &inner.settings;
    let configured = model.or_else(|| s.chat_model.clone());
    let model = inner
        .provider
        .resolve_model(configured.as_deref())
        .map_err(Stopped::Error)?;
    let is_chat_model = s.chat_model.as_deref().is_none_or(|m| m == model);
    let window = inner
        .provider
        .window(&model, s.context_window.filter(|_| is_chat_model));
    let budget = Budget {
        window: window.tokens,
        compact_at: s.compact_at,
        output_reserve: s.max_output_tokens.map_or(0, u64::from),
    };
    let (_, tokens) = inner
        .compactor
        .estimate(turn.session_id)
        .map_err(compaction_stop)?;
    if budget.over_trigger(tokens) {
        turn.push(Frame::Status {
            phase: Phase::Compacting,
        });
        let summarizer = summarizer(inner, &model, budget.window);
        inner
            .compactor
            .pre_send(turn.session_id, budget, &summarizer)
            .map_err(compaction_stop)?;
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
    };
    Ok((Serving { model, budget }, request))
}

fn compaction_stop(e: CompactionError) -> Stopped {
    match e {
        CompactionError::Store(s) => Stopped::Store(s),
        other => Stopped::Overflow(other.to_string()),
    }
}

/// The summarize model as compaction's summarizer; its window is the chat window when it
/// is the chat model.
pub(super) fn summarizer<'a>(
    inner: &'a Inner,
    chat_model: &str,
    chat_window: u64,
) -> ProviderSummarizer<'a> {
    let model = inner
        .settings
        .summarize_model
        .clone()
        .unwrap_or_else(|| chat_model.to_owned());
    let window = if model == chat_model {
        chat_window
    } else {
        inner.provider.window(&model, None).tokens
    };
    ProviderSummarizer {
        provider: &inner.provider,
        model,
        window,
    }
}

/// Streams the request, relaying frames and checkpointing new text.
fn stream(inner: &Inner, turn: &ActiveTurn, request: &ChatRequest, out: &mut Streamed) -> Stopped {
    turn.push(Frame::Status {
        phase: Phase::Waiting,
    });
    let mut stream = inner.provider.stream_chat(request);
    let interval = inner.settings.checkpoint_interval;
    let mut last_checkpoint = Instant::now();
    let mut streaming = false;
    loop {
        if turn.stop_requested() {
            return if turn.shutdown_requested() {
                Stopped::Shutdown
            } else {
                Stopped::ByUser
            };
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
            out.text.push_str(&t);
            turn.push(Frame::Chunk { text: t });
        }
        StreamEvent::Reasoning(r) => {
            out.reasoning.push_str(&r);
            turn.push(Frame::Reasoning { text: r });
        }
        StreamEvent::Usage(u) => {
            out.usage = Some(u);
            turn.push(Frame::Usage(u));
        }
        StreamEvent::Finish(f) => out.finish_reason = Some(f),
    }
}

/// Appends a `pending_state` with what arrived since the last one, if anything did.
fn checkpoint(inner: &Inner, turn: &ActiveTurn, out: &mut Streamed) -> Result<(), StoreError> {
    let text = &out.text[out.saved_text..];
    let reasoning = &out.reasoning[out.saved_reasoning..];
    if text.is_empty() && reasoning.is_empty() {
        return Ok(());
    }
    let payload = Payload::PendingState(PendingState {
        turn: turn.turn,
        attempt: turn.attempt,
        text: text.to_owned(),
        reasoning: (!reasoning.is_empty()).then(|| reasoning.to_owned()),
    });
    let seq = inner.store.append(turn.session_id, &payload)?.seq;
    out.saved_text = out.text.len();
    out.saved_reasoning = out.reasoning.len();
    out.last_checkpoint_seq = Some(seq);
    turn.push(Frame::Checkpoint { seq });
    Ok(())
}

/// Writes what ends the attempt (SPEC §6's table) and returns its `end` frame.
fn end_attempt(
    inner: &Inner,
    turn: &ActiveTurn,
    model: &str,
    out: &Streamed,
    stopped: Stopped,
    took: Duration,
) -> Frame {
    let provider = inner.provider.base_url().to_owned();
    let (code, message, retryable) = match &stopped {
        Stopped::Completed if !out.text.is_empty() => {
            return complete(inner, turn, model, out, took);
        }
        Stopped::Completed => (
            "empty_answer".to_owned(),
            "the model answered with no text".to_owned(),
            true,
        ),
        Stopped::Error(e) => (e.code().to_owned(), e.to_string(), e.retryable()),
        Stopped::ByUser => ("stopped".to_owned(), "stopped on request".to_owned(), true),
        Stopped::Shutdown => (
            "shutdown".to_owned(),
            "the server shut down".to_owned(),
            true,
        ),
        Stopped::Overflow(why) => ("context_overflow".to_owned(), why.clone(), false),
        Stopped::Store(e) => {
            eprintln!("brain: turn of {}: database error: {e}", turn.session_id);
            (
                "internal".to_owned(),
                "the database failed".to_owned(),
                true,
            )
        }
    };
    if !matches!(stopped, Stopped::ByUser | Stopped::Shutdown) || code == "empty_answer" {
        turn.push(Frame::Error {
            code: code.clone(),
            message: message.clone(),
            retryable,
        });
    }
    let interrupted = !out.text.is_empty() && code != "empty_answer";
    let written = if interrupted {
        final_checkpoint(inner, turn, out)
    } else {
        let failed = Payload::TurnFailed(TurnFailed {
            turn: turn.turn,
            attempt: turn.attempt,
            code: code.clone(),
            message,
            reasoning: (!out.reasoning.is_empty()).then(|| out.reasoning.clone()),
        });
        inner
            .store
            .append(turn.session_id, &failed)
            .map(|e| Some(e.seq))
    };
    let seq = written.unwrap_or_else(|e| {
        eprintln!(
            "brain: turn of {}: could not record its end: {e}",
            turn.session_id
        );
        None
    });
    if !model.is_empty() {
        let status = if interrupted {
            CallStatus::Interrupted
        } else {
            CallStatus::Error
        };
        record_chat(inner, turn, model, out, took, status, Some(&code));
    }
    Frame::End {
        status: if interrupted {
            EndStatus::Interrupted
        } else {
            EndStatus::Failed
        },
        seq,
        provider,
        model: model.to_owned(),
        usage: out.usage,
        finish_reason: out.finish_reason.clone(),
    }
}

/// The last checkpoint of an interrupted attempt: whatever was not saved yet.
fn final_checkpoint(
    inner: &Inner,
    turn: &ActiveTurn,
    out: &Streamed,
) -> Result<Option<u64>, StoreError> {
    let mut rest = Streamed {
        text: out.text.clone(),
        reasoning: out.reasoning.clone(),
        saved_text: out.saved_text,
        saved_reasoning: out.saved_reasoning,
        last_checkpoint_seq: out.last_checkpoint_seq,
        ..Streamed::default()
    };
    checkpoint(inner, turn, &mut rest)?;
    Ok(rest.last_checkpoint_seq)
}

/// A completed attempt: its ledger row and its `assistant_turn`, in one transaction.
fn complete(
    inner: &Inner,
    turn: &ActiveTurn,
    model: &str,
    out: &Streamed,
    took: Duration,
) -> Frame {
    let provider = inner.provider.base_url().to_owned();
    let usage = out.usage.unwrap_or_default();
    let written = inner.store.write(|w| {
        let ledger_id = w.record_call(&chat_entry(
            turn,
            &provider,
            model,
            usage,
            took,
            CallStatus::Ok,
            None,
        ))?;
        let answer = Payload::AssistantTurn(AssistantTurn {
            turn: turn.turn,
            attempt: turn.attempt,
            text: out.text.clone(),
            reasoning: (!out.reasoning.is_empty()).then(|| out.reasoning.clone()),
            provider: provider.clone(),
            model: model.to_owned(),
            finish_reason: out.finish_reason.clone(),
            usage,
            duration_ms: took.as_millis() as u64,
            ledger_id: Some(ledger_id),
        });
        Ok(w.append(turn.session_id, &answer)?.seq)
    });
    match written {
        Ok(seq) => Frame::End {
            status: EndStatus::Completed,
            seq: Some(seq),
            provider,
            model: model.to_owned(),
            usage: out.usage,
            finish_reason: out.finish_reason.clone(),
        },
        Err(e) => {
            // The answer could not be stored: what the checkpoints hold is the partial.
            eprintln!(
                "brain: turn of {}: could not store the answer: {e}",
                turn.session_id
            );
            turn.push(Frame::Error {
                code: "internal".into(),
                message: "the answer could not be stored".into(),
                retryable: true,
            });
            let seq = final_checkpoint(inner, turn, out).ok().flatten();
            Frame::End {
                status: EndStatus::Interrupted,
                seq,
                provider,
                model: model.to_owned(),
                usage: out.usage,
                finish_reason: out.finish_reason.clone(),
            }
        }
    }
}

fn chat_entry(
    turn: &ActiveTurn,
    provider: &str,
    model: &str,
    usage: Usage,
    took: Duration,
    status: CallStatus,
    code: Option<&str>,
) -> LedgerEntry {
    LedgerEntry {
        session_id: Some(turn.session_id),
        purpose: Purpose::Chat,
        provider: provider.to_owned(),
        model: model.to_owned(),
        usage,
        latency_ms: took.as_millis() as u64,
        status,
        error_code: code.map(str::to_owned),
    }
}

fn record_chat(
    inner: &Inner,
    turn: &ActiveTurn,
    model: &str,
    out: &Streamed,
    took: Duration,
    status: CallStatus,
    code: Option<&str>,
) {
    let entry = chat_entry(
        turn,
        inner.provider.base_url(),
        model,
        out.usage.unwrap_or_default(),
        took,
        status,
        code,
    );
    if let Err(e) = inner.store.record_call(&entry) {
        eprintln!("brain: could not record a chat call in the ledger: {e}");
    }
}
