//! The HTTP side of the provider: one ureq agent, a reader thread per stream, and the
//! timeouts and cancellation a turn needs.
//!
//! A stream's request and body reads run on their own thread and reach the caller through
//! a bounded channel, so the caller can give up on time (first-token and idle timeouts,
//! each its own setting) or on request (cancel) even while the provider hangs, and a
//! provider faster than its reader is held back by TCP rather than buffered. The thread
//! ends at its next read after that; its transport read timeout bounds how long a hung
//! provider can keep it. Non-streamed bodies are read up to named limits.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::sse::{Frame, SseParser};
use super::think::{Split, ThinkSplitter};
use super::wire::{parse_chunk, parse_models, request_body};
use super::{ChatRequest, Completion, ModelInfo, ProviderError, StreamEvent, Window};
use crate::config;

/// Where and how to reach the provider.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// The API base, e.g. `http://127.0.0.1:8080/v1` (no trailing slash needed).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    pub first_token_timeout: Duration,
    pub idle_timeout: Duration,
}

impl ProviderConfig {
    pub fn new(base_url: &str) -> ProviderConfig {
        ProviderConfig {
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: None,
            first_token_timeout: config::DEFAULT_FIRST_TOKEN_TIMEOUT,
            idle_timeout: config::DEFAULT_STREAM_IDLE_TIMEOUT,
        }
    }
}

/// Reads the API key from the variable named `var` (unset or empty: no key; local
/// servers need none).
pub fn api_key_from_env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|k| !k.trim().is_empty())
}

type ModelCache = Option<(Instant, Arc<Vec<ModelInfo>>)>;

/// An OpenAI-compatible provider.
pub struct Provider {
    cfg: ProviderConfig,
    agent: ureq::Agent,
    models: Mutex<ModelCache>,
}

impl Provider {
    pub fn new(cfg: ProviderConfig) -> Provider {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(config::PROVIDER_CONNECT_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Provider {
            cfg,
            agent,
            models: Mutex::new(None),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.cfg.base_url
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.cfg.base_url)
    }

    fn post(&self, path: &str) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut r = self
            .agent
            .post(&self.url(path))
            .header("Content-Type", "application/json");
        if let Some(k) = &self.cfg.api_key {
            r = r.header("Authorization", &format!("Bearer {k}"));
        }
        r
    }

    /// Starts a streamed chat completion. Errors (including an unreachable provider)
    /// arrive through the stream.
    pub fn stream_chat(&self, req: &ChatRequest) -> ChatStream {
        let (tx, rx) = mpsc::sync_channel(config::STREAM_BUFFER_CHUNKS);
        let cancel = Arc::new(AtomicBool::new(false));
        let body = request_body(req, true).to_string();
        // The transport gives up a little after the caller would have.
        let per_read =
            self.cfg.first_token_timeout.max(self.cfg.idle_timeout) + config::TRANSPORT_READ_GRACE;
        let request = self
            .post("chat/completions")
            .header("Accept", "text/event-stream")
            .config()
            .timeout_per_read(Some(per_read))
            .build();
        let flag = Arc::clone(&cancel);
        thread::spawn(move || read_stream(request, body, &tx, &flag));
        ChatStream::new(
            rx,
            cancel,
            self.cfg.first_token_timeout,
            self.cfg.idle_timeout,
        )
    }

    /// A whole completion, not streamed (summaries, distillation, titles), within
    /// `timeout`.
    pub fn complete(
        &self,
        req: &ChatRequest,
        timeout: Duration,
    ) -> Result<Completion, ProviderError> {
        let body = request_body(req, false).to_string();
        let request = self
            .post("chat/completions")
            .config()
            .timeout_global(Some(timeout))
            .build();
        let resp = request.send(body).map_err(|e| classify(e, timeout))?;
        let text = read_body(
            resp,
            config::MAX_COMPLETION_BODY_BYTES,
            "completion",
            timeout,
        )?;
        let parts = parse_chunk(&text).ok_or_else(|| ProviderError::Malformed(excerpt(&text)))?;
        if let Some(e) = parts.error {
            return Err(ProviderError::Remote(e));
        }
        let mut think = ThinkSplitter::new();
        let mut split = think.push(parts.content.as_deref().unwrap_or(""));
        let rest = think.finish();
        split.text.push_str(&rest.text);
        split.reasoning.push_str(&rest.reasoning);
        let mut reasoning = parts.reasoning.unwrap_or_default();
        reasoning.push_str(&split.reasoning);
        Ok(Completion {
            text: split.text,
            reasoning,
            usage: parts.usage.unwrap_or_default(),
            finish_reason: parts.finish_reason,
        })
    }

    /// The provider's models, from a listing at most [`config::MODELS_CACHE_TTL`] old.
    pub fn models(&self) -> Result<Arc<Vec<ModelInfo>>, ProviderError> {
        let mut cache = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, list)) = cache.as_ref() {
            if at.elapsed() < config::MODELS_CACHE_TTL {
                return Ok(Arc::clone(list));
            }
        }
        let list = Arc::new(self.fetch_models()?);
        *cache = Some((Instant::now(), Arc::clone(&list)));
        Ok(list)
    }

    fn fetch_models(&self) -> Result<Vec<ModelInfo>, ProviderError> {
        let timeout = config::MODELS_TIMEOUT;
        let mut r = self.agent.get(&self.url("models"));
        if let Some(k) = &self.cfg.api_key {
            r = r.header("Authorization", &format!("Bearer {k}"));
        }
        let resp = r
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
            .map_err(|e| classify(e, timeout))?;
        let text = read_body(
            resp,
            config::MAX_MODELS_BODY_BYTES,
            "model listing",
            timeout,
        )?;
        let body: Value =
            serde_json::from_str(&text).map_err(|_| ProviderError::Malformed(excerpt(&text)))?;
        Ok(parse_models(&body))
    }

    /// The model to use: the configured one, else the first the provider lists.
    pub fn resolve_model(&self, configured: Option<&str>) -> Result<String, ProviderError> {
        if let Some(m) = configured.filter(|m| !m.is_empty()) {
            return Ok(m.to_owned());
        }
        self.models()?
            .first()
            .map(|m| m.id.clone())
            .ok_or_else(|| ProviderError::Malformed("the provider lists no models".into()))
    }

    /// A model's context window: `override_tokens` (the `--context-window` flag, for the
    /// chat model) if given, else the listing's, else [`config::DEFAULT_WINDOW_TOKENS`].
    pub fn window(&self, model: &str, override_tokens: Option<u64>) -> Window {
        if let Some(tokens) = override_tokens {
            return Window {
                tokens,
                source: "--context-window",
            };
        }
        let listed = self.models().ok().and_then(|list| {
            list.iter()
                .find(|m| m.id == model)
                .and_then(|m| Some((m.window?, m.window_source?)))
        });
        match listed {
            Some((tokens, source)) => Window { tokens, source },
            None => Window {
                tokens: config::DEFAULT_WINDOW_TOKENS,
                source: "default",
            },
        }
    }
}

/// What the reader thread tells the stream.
enum Wire {
    Bytes(Vec<u8>),
    End,
    Failed(ProviderError),
}

fn read_stream(
    request: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: String,
    tx: &SyncSender<Wire>,
    cancel: &AtomicBool,
) {
    let resp = match request.send(body) {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Wire::Failed(classify(e, Duration::ZERO)));
            return;
        }
    };
    let status = resp.status().as_u16();
    if status != 200 {
        let text = read_limited(resp, config::MAX_PROVIDER_ERROR_BODY_BYTES).unwrap_or_default();
        let _ = tx.send(Wire::Failed(http_error(status, &text)));
        return;
    }
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

/// A 200's body of at most `limit` bytes; a longer one is [`ProviderError::Malformed`] (a
/// broken or hostile provider must not fill our memory), any other status its error.
fn read_body(
    resp: ureq::http::Response<ureq::Body>,
    limit: usize,
    what: &str,
    timeout: Duration,
) -> Result<String, ProviderError> {
    let status = resp.status().as_u16();
    if status != 200 {
        let text = read_limited(resp, config::MAX_PROVIDER_ERROR_BODY_BYTES)
            .map_err(|e| classify_io(&e, timeout))?;
        return Err(http_error(status, &text));
    }
    let bytes = read_bytes(resp, limit + 1).map_err(|e| classify_io(&e, timeout))?;
    if bytes.len() > limit {
        return Err(ProviderError::Malformed(format!(
            "the {what} is larger than {limit} bytes"
        )));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// At most `limit` bytes of a body, as text (an error body, kept as an excerpt).
fn read_limited(resp: ureq::http::Response<ureq::Body>, limit: usize) -> std::io::Result<String> {
    Ok(String::from_utf8_lossy(&read_bytes(resp, limit)?).into_owned())
}

fn read_bytes(resp: ureq::http::Response<ureq::Body>, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let reader = resp.into_body().into_reader();
    reader.take(limit as u64).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn http_error(status: u16, body: &str) -> ProviderError {
    ProviderError::Http {
        status,
        body: excerpt(body),
    }
}

/// At most [`config::MAX_PROVIDER_ERROR_BODY_BYTES`] of a body, cut on a char boundary.
fn excerpt(text: &str) -> String {
    let mut end = text.len().min(config::MAX_PROVIDER_ERROR_BODY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].trim().to_owned()
}

fn classify(e: ureq::Error, timeout: Duration) -> ProviderError {
    match e {
        ureq::Error::Io(io) => classify_io(&io, timeout),
        ureq::Error::Timeout(_) => ProviderError::Timeout(timeout),
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
            ProviderError::Unreachable(e.to_string())
        }
        other => ProviderError::Unreachable(other.to_string()),
    }
}

fn classify_io(e: &std::io::Error, timeout: Duration) -> ProviderError {
    use std::io::ErrorKind::*;
    match e.kind() {
        TimedOut | WouldBlock => ProviderError::Timeout(timeout),
        ConnectionRefused | ConnectionReset | ConnectionAborted | NotConnected
        | AddrNotAvailable => ProviderError::Unreachable(e.to_string()),
        _ => ProviderError::Cut(e.to_string()),
    }
}

/// A streamed chat completion: an iterator of events that ends after the provider's
/// `[DONE]` (or its end after a `finish_reason`), or with one error.
pub struct ChatStream {
    rx: Receiver<Wire>,
    cancel: Arc<AtomicBool>,
    first_token_timeout: Duration,
    idle_timeout: Duration,
    started: Instant,
    last_data: Instant,
    seen_token: bool,
    saw_finish: bool,
    finished: bool,
    parser: SseParser,
    think: ThinkSplitter,
    frames: Vec<Frame>,
    pending: VecDeque<StreamEvent>,
}

impl ChatStream {
    fn new(
        rx: Receiver<Wire>,
        cancel: Arc<AtomicBool>,
        first: Duration,
        idle: Duration,
    ) -> ChatStream {
        let now = Instant::now();
        ChatStream {
            rx,
            cancel,
            first_token_timeout: first,
            idle_timeout: idle,
            started: now,
            last_data: now,
            seen_token: false,
            saw_finish: false,
            finished: false,
            parser: SseParser::new(),
            think: ThinkSplitter::new(),
            frames: Vec::new(),
            pending: VecDeque::new(),
        }
    }

    /// A handle that stops the stream from another thread: the next call to `next`
    /// returns [`ProviderError::Cancelled`] within [`config::STREAM_CANCEL_POLL`].
    pub fn cancel_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    fn fail(&mut self, e: ProviderError) -> Option<Result<StreamEvent, ProviderError>> {
        self.finished = true;
        self.cancel.store(true, Ordering::SeqCst);
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

    fn end_of_content(&mut self) {
        let rest = self.think.finish();
        self.queue_split(rest);
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

impl Drop for ChatStream {
    fn drop(&mut self) {
        // Tells the reader thread to stop at its next read.
        self.cancel.store(true, Ordering::SeqCst);
    }
}
