//! A streamed chat completion: a reader thread per stream, and the timeouts and
//! cancellation a turn needs.
//!
//! A stream's request and body reads run on their own thread and reach the caller through
//! a bounded channel, so the caller can give up on time (first-token and idle timeouts,
//! each its own setting) or on request (cancel) even while the provider hangs, and a
//! provider faster than its reader is held back by TCP rather than buffered. Each stream
//! has its own agent, shut down when the stream fails, is cancelled or is dropped: that
//! closes its connection, so the reader thread ends at once even behind a hung provider
//! (waiting for headers or for a byte), and the provider frees the request's slot. A line or event over [`super::sse::MAX_SSE_FRAME_BYTES`] ends the
//! stream as malformed.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use super::body::{classify, excerpt, http_error, read_limited};
use super::client::Shared;
use super::sse::{Frame, SseParser};
use super::think::{Split, ThinkSplitter};
use super::toolcalls::Assembler;
use super::wire::{parse_chunk, refuses_tools};
use super::{ProviderConfig, ProviderError, StreamEvent};
use crate::config;

/// What the reader thread tells the stream.
pub(super) enum Wire {
    Bytes(Vec<u8>),
    End,
    Failed(ProviderError),
}

/// The same request without `tools`, for a server that refuses them (SPEC §13).
pub(super) struct WithoutTools {
    pub request: ureq::RequestBuilder<ureq::typestate::WithBody>,
    pub body: String,
    /// Called when the request without tools is answered: the model is tool-less.
    pub answered: Box<dyn FnOnce() + Send>,
}

/// Sends a request; a non-200 is its error.
fn open(
    request: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: String,
) -> Result<ureq::http::Response<ureq::Body>, ProviderError> {
    let resp = request
        .send(body)
        .map_err(|e| classify(e, Duration::ZERO))?;
    let status = resp.status().as_u16();
    if status != 200 {
        let text = read_limited(resp, config::MAX_PROVIDER_ERROR_BODY_BYTES).unwrap_or_default();
        return Err(http_error(status, &text));
    }
    Ok(resp)
}

pub(super) fn read_stream(
    request: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: String,
    without_tools: Option<WithoutTools>,
    tx: &SyncSender<Wire>,
    cancel: &AtomicBool,
) {
    let resp = match (open(request, body), without_tools) {
        (Err(ProviderError::Http { status, body }), Some(retry))
            if refuses_tools(status, &body) && !cancel.load(Ordering::SeqCst) =>
        {
            let resp = open(retry.request, retry.body);
            if resp.is_ok() {
                (retry.answered)();
            }
            resp
        }
        (resp, _) => resp,
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Wire::Failed(e));
            return;
        }
    };
    let mut reader = resp.into_body().into_reader();
    let mut buf = vec![0u8; config::PROVIDER_READ_CHUNK_BYTES];
    while !cancel.load(Ordering::SeqCst) {
        let msg = match reader.read(&mut buf) {
            Ok(0) => Wire::End,
            Ok(n) => Wire::Bytes(buf[..n].to_vec()),
            Err(e) => Wire::Failed(ProviderError::Cut(e.to_string())),
        };
        let last = !matches!(msg, Wire::Bytes(_));
        if tx.send(msg).is_err() || last {
            return;
        }
    }
}

/// A streamed chat completion: an iterator of events that ends after the provider's
/// `[DONE]` (or its end after a `finish_reason`), or with one error.
pub struct ChatStream {
    rx: Receiver<Wire>,
    cancel: Arc<AtomicBool>,
    /// This stream's own agent: shutting it down closes the stream's connection.
    agent: ureq::Agent,
    first_token_timeout: Duration,
    idle_timeout: Duration,
    /// Where the stream's outcome is recorded for `/health`.
    observer: Arc<Shared>,
    observed_answer: bool,
    started: Instant,
    last_data: Instant,
    seen_token: bool,
    saw_finish: bool,
    finished: bool,
    parser: SseParser,
    think: ThinkSplitter,
    /// The step's tool calls so far; `None` once they were given out.
    calls: Option<Assembler>,
    calls_overflowed: bool,
    frames: Vec<Frame>,
    pending: VecDeque<StreamEvent>,
}

impl ChatStream {
    pub(super) fn new(
        rx: Receiver<Wire>,
        cancel: Arc<AtomicBool>,
        agent: ureq::Agent,
        cfg: &ProviderConfig,
        observer: Arc<Shared>,
    ) -> ChatStream {
        let now = Instant::now();
        ChatStream {
            rx,
            cancel,
            agent,
            first_token_timeout: cfg.first_token_timeout,
            idle_timeout: cfg.idle_timeout,
            observer,
            observed_answer: false,
            started: now,
            last_data: now,
            seen_token: false,
            saw_finish: false,
            finished: false,
            parser: SseParser::new(),
            think: ThinkSplitter::new(),
            calls: Some(Assembler::new()),
            calls_overflowed: false,
            frames: Vec::new(),
            pending: VecDeque::new(),
        }
    }

    /// A handle that stops the stream from another thread: the next call to `next`
    /// returns [`ProviderError::Cancelled`] within [`config::STREAM_CANCEL_POLL`].
    pub fn cancel_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// Whether the model asked for more than [`config::MAX_TOOL_CALLS_PER_STEP`] calls:
    /// [`StreamEvent::ToolCalls`] has the first ones only.
    pub fn tool_calls_overflowed(&self) -> bool {
        self.calls_overflowed || self.calls.as_ref().is_some_and(Assembler::overflowed)
    }

    fn fail(&mut self, e: ProviderError) -> Option<Result<StreamEvent, ProviderError>> {
        self.observer.observe(Err(&e));
        self.finished = true;
        self.close();
        Some(Err(e))
    }

    /// The time left before the current timeout, and which error it would be.
    fn deadline(&self) -> (Duration, ProviderError) {
        if self.seen_token {
            let left = self.idle_timeout.saturating_sub(self.last_data.elapsed());
            (left, ProviderError::IdleTimeout(self.idle_timeout))
        } else {
            let left = self
                .first_token_timeout
                .saturating_sub(self.started.elapsed());
            (
                left,
                ProviderError::FirstTokenTimeout(self.first_token_timeout),
            )
        }
    }

    fn on_bytes(&mut self, bytes: &[u8]) -> Result<(), ProviderError> {
        let mut frames = std::mem::take(&mut self.frames);
        let fed = self.parser.feed(bytes, &mut frames);
        let mut result = fed.map_err(|e| ProviderError::Malformed(e.to_string()));
        for f in frames.drain(..) {
            if result.is_ok() && !self.finished {
                result = self.on_frame(&f.data);
            }
        }
        self.frames = frames;
        result
    }

    fn on_frame(&mut self, data: &str) -> Result<(), ProviderError> {
        self.last_data = Instant::now();
        if data.trim() == "[DONE]" {
            self.end_of_content();
            self.finished = true;
            return Ok(());
        }
        let parts = parse_chunk(data).ok_or_else(|| ProviderError::Malformed(excerpt(data)))?;
        if let Some(e) = parts.error {
            return Err(ProviderError::Remote(e));
        }
        if let Some(r) = parts.reasoning.filter(|r| !r.is_empty()) {
            self.token(StreamEvent::Reasoning(r));
        }
        if let Some(c) = parts.content {
            let split = self.think.push(&c);
            self.queue_split(split);
        }
        if let Some(calls) = self.calls.as_mut() {
            for piece in parts.tool_calls {
                self.seen_token = true;
                calls
                    .push(piece)
                    .map_err(|e| ProviderError::Malformed(e.to_string()))?;
            }
        }
        if let Some(u) = parts.usage {
            self.pending.push_back(StreamEvent::Usage(u));
        }
        if let Some(f) = parts.finish_reason {
            self.end_of_content();
            self.saw_finish = true;
            self.pending.push_back(StreamEvent::Finish(f));
        }
        Ok(())
    }

    fn token(&mut self, ev: StreamEvent) {
        self.seen_token = true;
        self.pending.push_back(ev);
    }

    fn queue_split(&mut self, split: Split) {
        if !split.reasoning.is_empty() {
            self.token(StreamEvent::Reasoning(split.reasoning));
        }
        if !split.text.is_empty() {
            self.token(StreamEvent::Text(split.text));
        }
    }

    /// The text's end, then the step's calls (once; pieces after that are ignored).
    fn end_of_content(&mut self) {
        let rest = self.think.finish();
        self.queue_split(rest);
        if let Some(calls) = self.calls.take() {
            self.calls_overflowed = calls.overflowed();
            if !calls.is_empty() {
                self.pending
                    .push_back(StreamEvent::ToolCalls(calls.finish()));
            }
        }
    }
}

/// What [`ChatStream::poll`] found within its wait.
#[derive(Debug, PartialEq)]
pub enum Poll {
    Event(Result<StreamEvent, ProviderError>),
    /// Nothing yet: the stream is alive and within its timeouts.
    Idle,
    /// The stream is over.
    Done,
}

impl ChatStream {
    /// Waits at most `wait` for the next event, so a caller can do timed work (a
    /// checkpoint every 2 s) while the provider is slow.
    pub fn poll(&mut self, wait: Duration) -> Poll {
        let until = Instant::now() + wait;
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Poll::Event(Ok(ev));
            }
            if self.finished {
                return Poll::Done;
            }
            if self.cancel.load(Ordering::SeqCst) {
                return self.failed(ProviderError::Cancelled);
            }
            let (left, timeout_error) = self.deadline();
            if left.is_zero() {
                return self.failed(timeout_error);
            }
            let now = Instant::now();
            if now >= until {
                return Poll::Idle;
            }
            let slice = left.min(config::STREAM_CANCEL_POLL).min(until - now);
            match self.rx.recv_timeout(slice) {
                Ok(Wire::Bytes(b)) => {
                    if !self.observed_answer {
                        self.observed_answer = true;
                        self.observer.observe(Ok(()));
                    }
                    if let Err(e) = self.on_bytes(&b) {
                        return self.failed(e);
                    }
                }
                Ok(Wire::End) if self.saw_finish => {
                    self.end_of_content();
                    self.finished = true;
                }
                Ok(Wire::End) | Err(RecvTimeoutError::Disconnected) => {
                    return self
                        .failed(ProviderError::Cut("the stream ended before [DONE]".into()));
                }
                Ok(Wire::Failed(e)) => return self.failed(e),
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn failed(&mut self, e: ProviderError) -> Poll {
        match self.fail(e) {
            Some(r) => Poll::Event(r),
            None => Poll::Done,
        }
    }
}

impl Iterator for ChatStream {
    type Item = Result<StreamEvent, ProviderError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.poll(Duration::from_secs(3600)) {
                Poll::Event(e) => return Some(e),
                Poll::Done => return None,
                Poll::Idle => {}
            }
        }
    }
}

impl ChatStream {
    /// Stops the reader thread and closes the connection now: a reader blocked on a hung
    /// provider gets an error from its read at once.
    fn close(&self) {
        self.cancel.store(true, Ordering::SeqCst);
        // Clones share the pool: shutting one down closes the stream's connection.
        self.agent.clone().shutdown();
    }
}

impl Drop for ChatStream {
    fn drop(&mut self) {
        self.close();
    }
}
