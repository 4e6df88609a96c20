//! The HTTP side of the provider: a shared ureq agent for the listing and plain calls (each
//! stream and each cancellable call has its own), and the model listing; streams are in [`super::stream`].
//!
//! The listing and the latest observation of the provider live in one [`State`] behind a
//! mutex that is never held during I/O: a listing is fetched on its own thread, one at a
//! time, while callers take the last known listing at once or wait for it within their own
//! bound. Every call records what it saw, and `/health` answers from that.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::body::{classify, excerpt, read_body};
use super::lanes::{DEFAULT_BACKGROUND_SLOTS, Lanes};
use super::state::{Listing, State, Ttls};
use super::stream::{ChatStream, WithoutTools, read_stream};
use super::think::ThinkSplitter;
use super::toolcalls::Assembler;
use super::toolless::ToolLess;
use super::wire::{
    parse_chunk, parse_models, refuses_structured_output, request_body, shaped_body, without_tools,
};
use super::{ChatRequest, Completion, ModelInfo, ProviderError, Shape, Window};
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
    /// How long a listing is reused ([`config::MODELS_CACHE_TTL`]).
    pub models_ttl: Duration,
    /// How long a failed listing is remembered ([`config::MODELS_FAILURE_TTL`]).
    pub models_failure_ttl: Duration,
    /// How old an observation may be before `/health` probes ([`config::PROVIDER_PROBE_AFTER`]).
    pub probe_after: Duration,
    /// Background calls that may run at once ([`Lanes`]); more for a server with
    /// parallel slots.
    pub background_slots: usize,
}

impl ProviderConfig {
    pub fn new(base_url: &str) -> ProviderConfig {
        ProviderConfig {
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: None,
            first_token_timeout: config::DEFAULT_FIRST_TOKEN_TIMEOUT,
            idle_timeout: config::DEFAULT_STREAM_IDLE_TIMEOUT,
            models_ttl: config::MODELS_CACHE_TTL,
            models_failure_ttl: config::MODELS_FAILURE_TTL,
            probe_after: config::PROVIDER_PROBE_AFTER,
            background_slots: DEFAULT_BACKGROUND_SLOTS,
        }
    }

    fn ttls(&self) -> Ttls {
        Ttls {
            listing: self.models_ttl,
            failure: self.models_failure_ttl,
            probe_after: self.probe_after,
        }
    }
}

/// Reads the API key from the variable named `var` (unset or empty: no key; local
/// servers need none).
pub fn api_key_from_env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|k| !k.trim().is_empty())
}

/// The state a provider shares with its fetch thread and its streams.
#[derive(Default)]
pub(super) struct Shared {
    state: Mutex<State>,
    /// Signalled when a fetch ends.
    fetched: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a call's outcome for `/health`.
    pub(super) fn observe(&self, outcome: Result<(), &ProviderError>) {
        self.lock().observe(Instant::now(), outcome);
    }

    fn fetch_ended(&self, result: Result<Vec<ModelInfo>, ProviderError>) {
        self.lock().fetch_ended(Instant::now(), result);
        self.fetched.notify_all();
    }
}

/// An OpenAI-compatible provider.
pub struct Provider {
    cfg: ProviderConfig,
    agent: ureq::Agent,
    shared: Arc<Shared>,
    lanes: Lanes,
    /// Models whose server refused `response_format`: asked without it from then on.
    no_schema: Mutex<HashSet<String>>,
    /// Models whose server refused `tools`: asked without them for a while.
    tool_less: Arc<Mutex<ToolLess>>,
}

fn new_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(config::PROVIDER_CONNECT_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .new_agent()
}

fn post_on(
    agent: &ureq::Agent,
    cfg: &ProviderConfig,
    path: &str,
) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
    let mut r = agent
        .post(&url(cfg, path))
        .header("Content-Type", "application/json");
    if let Some(k) = &cfg.api_key {
        r = r.header("Authorization", &format!("Bearer {k}"));
    }
    r
}

impl Provider {
    pub fn new(cfg: ProviderConfig) -> Provider {
        Provider {
            lanes: Lanes::new(cfg.background_slots),
            cfg,
            agent: new_agent(),
            shared: Arc::default(),
            no_schema: Mutex::default(),
            tool_less: Arc::default(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.cfg.base_url
    }

    /// Who may use this provider now: chat attempts first, background calls after.
    pub fn lanes(&self) -> &Lanes {
        &self.lanes
    }

    /// Starts a streamed chat completion. Errors (including an unreachable provider)
    /// arrive through the stream.
    pub fn stream_chat(&self, req: &ChatRequest) -> ChatStream {
        let (tx, rx) = std::sync::mpsc::sync_channel(config::STREAM_BUFFER_CHUNKS);
        // An agent of its own, so ending the stream (shutting the agent down) closes this
        // stream's connection at once: its reader thread ends, and the provider, seeing
        // the connection go, frees its slot.
        let agent = new_agent();
        let cancel = Arc::default();
        let mut body = request_body(req, true);
        let offered = !req.tools.is_empty() && self.offers_tools(&req.model);
        let mut without = None;
        if !req.tools.is_empty() {
            let mut bare = body.clone();
            without_tools(&mut bare);
            if offered {
                let (tool_less, model) = (Arc::clone(&self.tool_less), req.model.clone());
                without = Some(WithoutTools {
                    request: self.stream_request(&agent),
                    body: bare.to_string(),
                    answered: Box::new(move || {
                        log::warn!(
                            "{model} refused tools: sent none for {:?}",
                            config::TOOL_LESS_FOR
                        );
                        lock(&tool_less).mark(&model, Instant::now());
                    }),
                });
            } else {
                body = bare;
            }
        }
        let stream = ChatStream::new(
            rx,
            cancel,
            agent.clone(),
            &self.cfg,
            Arc::clone(&self.shared),
        );
        let flag = stream.cancel_handle();
        let (request, body) = (self.stream_request(&agent), body.to_string());
        let spawned = thread::Builder::new()
            .name("brain-stream".into())
            .spawn(move || read_stream(request, body, without, &tx, &flag));
        if let Err(e) = spawned {
            // The sender went with the closure: the stream reports it as cut.
            log::error!("cannot start a stream's reader thread: {e}");
        }
        stream
    }

    fn stream_request(
        &self,
        agent: &ureq::Agent,
    ) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        // The transport gives up a little after the caller would have.
        let per_read =
            self.cfg.first_token_timeout.max(self.cfg.idle_timeout) + config::TRANSPORT_READ_GRACE;
        post_on(agent, &self.cfg, "chat/completions")
            .header("Accept", "text/event-stream")
            .config()
            .timeout_per_read(Some(per_read))
            .build()
    }

    /// Whether `model` is offered tools: not when its server refused them in the last
    /// [`config::TOOL_LESS_FOR`] (a stream for it is sent without them).
    pub fn offers_tools(&self, model: &str) -> bool {
        lock(&self.tool_less).offers(model, Instant::now())
    }

    /// A whole completion, not streamed (summaries, distillation, titles), within
    /// `timeout`.
    pub fn complete(
        &self,
        req: &ChatRequest,
        timeout: Duration,
    ) -> Result<Completion, ProviderError> {
        let result = self.complete_inner(req, timeout);
        self.shared.observe(result.as_ref().map(|_| ()));
        result
    }

    fn complete_inner(
        &self,
        req: &ChatRequest,
        timeout: Duration,
    ) -> Result<Completion, ProviderError> {
        let body = request_body(req, false).to_string();
        complete_on(&self.agent, &self.cfg, body, timeout)
    }

    /// A whole completion for background work: shaped (`stop`, a JSON schema), within
    /// `timeout`, and ended at once when `cancel` is set (the connection is closed, so a
    /// server that notices, like llama.cpp, frees its slot for the chat). A server that
    /// refuses `response_format` is asked once more without it, and that model is never
    /// sent one again.
    pub fn complete_shaped(
        &self,
        req: &ChatRequest,
        shape: &Shape,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Result<Completion, ProviderError> {
        let started = Instant::now();
        let mut shape = shape.clone();
        if shape.schema.is_some() && self.refuses_schema(&req.model) {
            shape.schema = None;
        }
        let body = shaped_body(req, false, &shape).to_string();
        let mut result = self.cancellable(body, timeout, cancel);
        if let Err(ProviderError::Http { status, body }) = &result {
            if shape.schema.is_some() && refuses_structured_output(*status, body) {
                log::warn!(
                    "{} refused response_format for {}: asking without it from now on",
                    self.cfg.base_url,
                    req.model
                );
                lock(&self.no_schema).insert(req.model.clone());
                shape.schema = None;
                let body = shaped_body(req, false, &shape).to_string();
                result = self.cancellable(body, timeout.saturating_sub(started.elapsed()), cancel);
            }
        }
        self.shared.observe(result.as_ref().map(|_| ()));
        result
    }

    /// Whether this model's server refused `response_format` before.
    pub fn refuses_schema(&self, model: &str) -> bool {
        lock(&self.no_schema).contains(model)
    }

    /// One non-streamed call on an agent of its own, so cancelling it (shutting that agent
    /// down) closes this call's connection and no other.
    fn cancellable(
        &self,
        body: String,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Result<Completion, ProviderError> {
        if cancel.load(Ordering::SeqCst) {
            return Err(ProviderError::Cancelled);
        }
        if timeout.is_zero() {
            return Err(ProviderError::Timeout(timeout));
        }
        let agent = new_agent();
        let (tx, rx) = mpsc::channel();
        let (worker, cfg) = (agent.clone(), self.cfg.clone());
        thread::Builder::new()
            .name("brain-complete".into())
            .spawn(move || {
                // The caller may have stopped waiting (cancelled): the answer is dropped.
                let _ = tx.send(complete_on(&worker, &cfg, body, timeout));
            })
            .map_err(|e| ProviderError::Unreachable(format!("cannot start a thread: {e}")))?;
        loop {
            match rx.recv_timeout(config::STREAM_CANCEL_POLL) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Timeout) => {
                    if cancel.load(Ordering::SeqCst) {
                        agent.shutdown();
                        return Err(ProviderError::Cancelled);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(ProviderError::Unreachable(
                        "the provider call ended without an answer".into(),
                    ));
                }
            }
        }
    }

    /// The provider's models: a listing at most [`ProviderConfig::models_ttl`] old, else
    /// the last known one (refreshed in the background), else the outcome of a fetch,
    /// waited for as long as a fetch may take. For a turn, which needs the listing.
    pub fn models(&self) -> Result<Arc<Vec<ModelInfo>>, ProviderError> {
        self.models_within(config::MODELS_TIMEOUT + config::TRANSPORT_READ_GRACE)
    }

    /// As [`Provider::models`], but waits at most `wait` when no listing is known: a
    /// request handler must not hang on a hung provider. Past `wait` it is
    /// [`ProviderError::Timeout`], and the fetch goes on for the next caller.
    pub fn models_within(&self, wait: Duration) -> Result<Arc<Vec<ModelInfo>>, ProviderError> {
        let deadline = Instant::now() + wait;
        let mut st = self.shared.lock();
        let mut waiting_since: Option<u64> = None;
        loop {
            if waiting_since.is_some_and(|n| st.fetches_ended() != n) {
                return st.last_outcome();
            }
            let now = Instant::now();
            let (answer, fetch) = st.listing(now, self.cfg.ttls());
            if let Listing::Answer(answer) = answer {
                if fetch {
                    self.start_fetch(&mut st);
                }
                return answer;
            }
            waiting_since.get_or_insert(st.fetches_ended());
            if fetch {
                self.start_fetch(&mut st);
                continue;
            }
            if now >= deadline {
                return Err(ProviderError::Timeout(wait));
            }
            st = self
                .shared
                .fetched
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Whether the provider answered its latest call or probe, for `/health`. When that is
    /// older than [`ProviderConfig::probe_after`], probes it (one listing fetch); a probe
    /// gets `wait` from its start to answer, after which every caller takes the last known
    /// state at once.
    pub fn reachable(&self, wait: Duration) -> bool {
        let mut st = self.shared.lock();
        if st.wants_probe(Instant::now(), self.cfg.ttls()) {
            self.start_fetch(&mut st);
        }
        if let Some(started) = st.fetching() {
            let until = started + wait;
            loop {
                let now = Instant::now();
                if st.fetching() != Some(started) || now >= until {
                    break;
                }
                st = self
                    .shared
                    .fetched
                    .wait_timeout(st, until - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        st.reachable()
    }

    /// Starts the one listing fetch, on its own thread so no caller holds anything while
    /// the provider takes its time.
    fn start_fetch(&self, st: &mut State) {
        st.fetch_started(Instant::now());
        let agent = self.agent.clone();
        let cfg = self.cfg.clone();
        let shared = Arc::clone(&self.shared);
        let spawned = thread::Builder::new()
            .name("brain-models".into())
            .spawn(move || shared.fetch_ended(fetch_models(&agent, &cfg)));
        if let Err(e) = spawned {
            let why = format!("cannot start a thread to list the models: {e}");
            st.fetch_ended(Instant::now(), Err(ProviderError::Unreachable(why)));
            self.shared.fetched.notify_all();
        }
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
        if override_tokens.is_some() {
            return window_in(&[], model, override_tokens);
        }
        match self.models() {
            Ok(list) => window_in(&list, model, None),
            Err(_) => window_in(&[], model, None),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One non-streamed completion on `agent`, its body read and parsed.
fn complete_on(
    agent: &ureq::Agent,
    cfg: &ProviderConfig,
    body: String,
    timeout: Duration,
) -> Result<Completion, ProviderError> {
    let request = post_on(agent, cfg, "chat/completions")
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
    let mut calls = Assembler::new();
    for piece in parts.tool_calls {
        calls
            .push(piece)
            .map_err(|e| ProviderError::Malformed(e.to_string()))?;
    }
    Ok(Completion {
        text: split.text,
        reasoning,
        usage: parts.usage.unwrap_or_default(),
        finish_reason: parts.finish_reason,
        tool_calls: calls.finish(),
    })
}

/// A model's window in `list`, as [`Provider::window`] decides it, for a caller that
/// already holds a listing.
pub fn window_in(list: &[ModelInfo], model: &str, override_tokens: Option<u64>) -> Window {
    if let Some(tokens) = override_tokens {
        return Window {
            tokens,
            source: "--context-window",
        };
    }
    let listed = list
        .iter()
        .find(|m| m.id == model)
        .and_then(|m| Some((m.window?, m.window_source?)));
    match listed {
        Some((tokens, source)) => Window { tokens, source },
        None => Window {
            tokens: config::DEFAULT_WINDOW_TOKENS,
            source: "default",
        },
    }
}

fn url(cfg: &ProviderConfig, path: &str) -> String {
    format!("{}/{path}", cfg.base_url)
}

fn fetch_models(
    agent: &ureq::Agent,
    cfg: &ProviderConfig,
) -> Result<Vec<ModelInfo>, ProviderError> {
    let timeout = config::MODELS_TIMEOUT;
    let mut r = agent.get(&url(cfg, "models"));
    if let Some(k) = &cfg.api_key {
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
