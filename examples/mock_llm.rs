//! A stand-in LLM: a real OpenAI-compatible HTTP server for tests and demos.
//!
//! ```sh
//! cargo run --example mock_llm -- [--port 0] [--n-ctx 4096] [--models-fail N]
//! ```
//!
//! It prints `mock_llm listening on http://127.0.0.1:PORT/v1` and serves:
//!
//! - `GET /v1/models`: models with windows the way each server reports them
//!   (`mock-model`: llama.cpp `meta.n_ctx`; `mock-vllm`: `max_model_len`; `mock-router`:
//!   `context_length`; `mock-studio`: LM Studio fields; `mock-plain`: none, like Ollama).
//!   The first `--models-fail N` listings answer HTTP 500. `POST /_mock/models`
//!   `{"mode": …}` sets how later listings answer: `ok` (the default), `fail` (HTTP 500),
//!   `hang` (no answer at all: the connection stays open and silent) or `endless` (a 200
//!   whose body never ends).
//! - `POST /v1/chat/completions`, streamed or not. What it answers is the next step queued
//!   with `POST /_mock/script` (one step or an array), else a step given in the last user
//!   message as `[[mock {…}]]`, else a default answer. A step's fields, all optional:
//!   `text`, `reasoning`, `think` (send reasoning as a leading `<think>` block),
//!   `chunks`, `delay_ms`, `first_delay_ms`, `headers_delay_ms`, `cut_after` (close after
//!   that many chunks, no `[DONE]`), `garbage_after`, `status` (an HTTP error), `hang`
//!   (headers, then silence until the client hangs up, recorded as `_cancelled`),
//!   `hang_before_headers` (silence at once, likewise), `finish_reason`, `no_usage`, `endless`
//!   (a 200 whose body never ends: streamed, one `data:` line without a newline; not
//!   streamed, a JSON completion whose content never closes), `endless_chunks` (a stream
//!   of valid 64 KiB text chunks that never finishes).
//! - Tools (`mock_llm/tools.rs`). A step's `tool_calls`, `[{"id"?, "name", "arguments"}]`
//!   (`arguments` a string, JSON or not, sent as is), are asked for after the step's text
//!   (if any), `finish_reason` `tool_calls`: streamed OpenAI-style, per call a first delta
//!   with `index`, `id` (only when scripted), `type` and `function.name`, then the
//!   arguments cut in `tool_call_pieces` deltas (default 3); not streamed, whole in
//!   `message.tool_calls` (`content` null without text). `reject_tools: true` answers a
//!   request carrying `tools` with HTTP 400 `tools param requires --jinja flag` (llama.cpp
//!   without `--jinja`) and keeps the step for the next request, which it serves as usual
//!   when sent without `tools`. `quote_tools: true` answers with one line per `tool`
//!   message received, `tool <tool_call_id>: <content>`; so does a step without `text` or
//!   `tool_calls` when the request has `tool` messages. A streamed request whose last
//!   message is not the user's (a later step of a turn) does not replay that user
//!   message's `[[mock …]]`: unscripted, it quotes its tool results. `tools` and each
//!   message's `tool_calls` count in the prompt's tokens (tools first, as a server renders
//!   them into the system prompt).
//! - `POST /_mock/defaults` `{"summary": {…}, "memory": {…}, "title": {…}}` (any of them):
//!   the step a non-streamed request of that purpose gets when no queued step is for it,
//!   for as long as the mock runs (a weak model: e.g. every summary cut at
//!   `"finish_reason": "length"`, or `"status": 500`). The purpose is read from the system
//!   prompt, as for the default answers.
//! - Prompt-cache accounting: `cached_tokens` is the longest common prefix, in the mock's
//!   whitespace tokens, between this prompt and any earlier one.
//! - `GET /_mock/requests`: every chat request body received (with its `Authorization`
//!   header as `_authorization`, and its times in ms since the mock started: `_arrived_ms`,
//!   `_started_ms` when it was served, `_ended_ms`, and `_cancelled: true` when the client
//!   hung up first); `GET /_mock/stats`; `POST /_mock/reset`.
//! - `stop` strings in a request cut the answer there (`finish_reason: stop`).
//!
//! Options that make it behave like a small local model:
//!
//! - `--one-slot`: one completion at a time, like llama.cpp with one slot. Others queue in
//!   arrival order; a client that hangs up (queued or being served) gives its place up at
//!   once, as llama.cpp cancels a task whose connection closed.
//! - `--service-ms N`: every completion takes at least N ms before its answer.
//! - `--weak`: unscripted background answers are those of a weak model: never JSON, titles
//!   that ramble over several lines, everything running on until `max_tokens` (in words,
//!   `finish_reason: length`).
//! - `--refuse-response-format`: a request with `response_format` gets HTTP 400, as from a
//!   server without structured output.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "mock_llm/answer.rs"]
mod answer;
#[path = "mock_llm/slot.rs"]
mod slot;
#[path = "mock_llm/tools.rs"]
mod tools;

use answer::{endless, serve};

use slot::{hold, pause, take_slot};

const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

#[derive(Default)]
struct State {
    script: VecDeque<Value>,
    requests: Vec<Value>,
    prompts: Vec<Vec<String>>,
    models_calls: u64,
    models_fail: u64,
    /// How listings answer once `models_fail` is used up: `ok`, `fail`, `hang`, `endless`.
    models_mode: String,
    chat_calls: u64,
    /// Purpose (`summary`, `memory`, `title`) → the step its requests get by default.
    defaults: serde_json::Map<String, Value>,
}

type Shared = Arc<Mutex<State>>;

/// How this mock behaves (its command-line options).
#[derive(Default)]
struct Options {
    one_slot: bool,
    service_ms: u64,
    weak: bool,
    refuse_response_format: bool,
}

static OPTIONS: OnceLock<Options> = OnceLock::new();
static STARTED: OnceLock<Instant> = OnceLock::new();

fn options() -> &'static Options {
    OPTIONS.get_or_init(Options::default)
}

fn now_ms() -> u64 {
    STARTED.get_or_init(Instant::now).elapsed().as_millis() as u64
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let has = |name: &str| args.iter().any(|a| a == name);
    let _ = OPTIONS.set(Options {
        one_slot: has("--one-slot"),
        service_ms: flag("--service-ms").unwrap_or(0),
        weak: has("--weak"),
        refuse_response_format: has("--refuse-response-format"),
    });
    now_ms();
    let port = flag("--port").unwrap_or(0);
    let n_ctx = flag("--n-ctx").unwrap_or(4096);
    let state: Shared = Arc::new(Mutex::new(State {
        models_fail: flag("--models-fail").unwrap_or(0),
        ..State::default()
    }));
    let listener = match TcpListener::bind(("127.0.0.1", port as u16)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mock_llm: cannot listen: {e}");
            std::process::exit(1);
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    println!("mock_llm listening on http://{addr}/v1");
    let _ = std::io::stdout().flush();
    for stream in listener.incoming().flatten() {
        let state = Arc::clone(&state);
        thread::spawn(move || {
            let _ = handle(stream, &state, n_ctx);
        });
    }
}

struct Request {
    method: String,
    path: String,
    authorization: Option<String>,
    body: Vec<u8>,
}

fn read_request(stream: &TcpStream) -> std::io::Result<Request> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut head = String::new();
    let mut content_length = 0usize;
    let mut authorization = None;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
        if head.len() > MAX_HEAD_BYTES {
            return Err(std::io::Error::other("head too large"));
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                content_length = v.trim().parse().unwrap_or(0);
            }
            if k.trim().eq_ignore_ascii_case("authorization") {
                authorization = Some(v.trim().to_owned());
            }
        }
    }
    let mut body = vec![0; content_length.min(MAX_BODY_BYTES)];
    reader.read_exact(&mut body)?;
    Ok(Request {
        method,
        path,
        authorization,
        body,
    })
}

fn respond(stream: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let text = body.to_string();
    write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    stream.flush()
}

fn handle(mut stream: TcpStream, state: &Shared, n_ctx: u64) -> std::io::Result<()> {
    let req = read_request(&stream)?;
    let mut body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    if let (Some(auth), Some(obj)) = (&req.authorization, body.as_object_mut()) {
        // Recorded for tests; not part of what the model "sees".
        obj.insert("_authorization".into(), json!(auth));
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/models") => models(&mut stream, state, n_ctx),
        ("POST", "/v1/chat/completions") => chat(&mut stream, state, body),
        ("POST", "/_mock/models") => {
            let mode = body["mode"].as_str().unwrap_or("ok").to_owned();
            lock(state).models_mode = mode;
            respond(&mut stream, 200, &json!({}))
        }
        ("POST", "/_mock/script") => {
            let steps = match body {
                Value::Array(a) => a,
                other => vec![other],
            };
            lock(state).script.extend(steps);
            respond(&mut stream, 200, &json!({}))
        }
        ("POST", "/_mock/defaults") => {
            if let Value::Object(purposes) = body {
                lock(state).defaults.extend(purposes);
            }
            respond(&mut stream, 200, &json!({}))
        }
        ("GET", "/_mock/requests") => {
            let all = lock(state).requests.clone();
            respond(&mut stream, 200, &Value::Array(all))
        }
        ("GET", "/_mock/stats") => {
            let s = lock(state);
            let stats = json!({"models_calls": s.models_calls, "chat_calls": s.chat_calls});
            drop(s);
            respond(&mut stream, 200, &stats)
        }
        ("POST", "/_mock/reset") => {
            let mut s = lock(state);
            s.script.clear();
            s.requests.clear();
            s.prompts.clear();
            s.models_mode.clear();
            s.defaults.clear();
            drop(s);
            respond(&mut stream, 200, &json!({}))
        }
        _ => respond(
            &mut stream,
            404,
            &json!({"error": {"message": "no such route"}}),
        ),
    }
}

fn models(stream: &mut TcpStream, state: &Shared, n_ctx: u64) -> std::io::Result<()> {
    let mode = {
        let mut s = lock(state);
        s.models_calls += 1;
        if s.models_fail > 0 {
            s.models_fail -= 1;
            "fail".to_owned()
        } else {
            s.models_mode.clone()
        }
    };
    match mode.as_str() {
        "hang" => {
            thread::sleep(Duration::from_secs(3600));
            return Ok(());
        }
        "endless" => return endless(stream, "{\"object\": \"list\", \"data\": [{\"id\": \""),
        _ => {}
    }
    if mode == "fail" {
        return respond(
            stream,
            500,
            &json!({"error": {"message": "listing failed (scripted)"}}),
        );
    }
    let listing = json!({"object": "list", "data": [
        {"id": "mock-model", "object": "model", "meta": {"n_ctx": n_ctx, "n_ctx_train": 131072}},
        {"id": "mock-vllm", "object": "model", "max_model_len": 8192},
        {"id": "mock-router", "object": "model", "context_length": 128000},
        {"id": "mock-studio", "object": "model", "loaded_context_length": 2048, "max_context_length": 32768},
        {"id": "mock-plain", "object": "model"},
    ]});
    respond(stream, 200, &listing)
}

/// The prompt as the mock's tokens: each message's role marker, then its words.
fn prompt_tokens(body: &Value) -> Vec<String> {
    let mut tokens = tools::tools_tokens(body);
    for m in body["messages"].as_array().into_iter().flatten() {
        tokens.push(format!("<|{}|>", m["role"].as_str().unwrap_or("?")));
        let content = m["content"].as_str().unwrap_or_default();
        tokens.extend(content.split_whitespace().map(str::to_owned));
        tokens.extend(tools::calls_tokens(m));
        tokens.push("<|end|>".into());
    }
    tokens
}

fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The step for this request: the first queued step for its kind (a step's optional
/// `"kind"` is `"stream"` or `"complete"`), else (streamed requests only) a step in the last
/// user message, else the default answer.
fn next_step(state: &Shared, body: &Value, n: u64) -> Value {
    let streamed = body["stream"] == true;
    let want = if streamed { "stream" } else { "complete" };
    {
        let mut s = lock(state);
        let at = s
            .script
            .iter()
            .position(|step| step["kind"].as_str().is_none_or(|k| k == want));
        if let Some(step) = at.and_then(|i| s.script.remove(i)) {
            return step;
        }
    }
    let last = last_user_text(body);
    if streamed && tools::after_user(body) {
        // A later step of a turn: the tool results are quoted (the user's step was
        // for the first step).
        return json!({});
    }
    if streamed {
        if let Some(start) = last.find("[[mock ") {
            if let Some(end) = last[start..].find("]]") {
                if let Ok(step) = serde_json::from_str(&last[start + 7..start + end]) {
                    return step;
                }
            }
        }
    }
    let short: String = last.chars().take(60).collect();
    if streamed {
        return json!({"text": format!("mock answer {n} to: {short}")});
    }
    // Background work: what each kind of request expects.
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    let purpose = if system.contains("JSON") {
        "memory"
    } else if system.contains("title") {
        "title"
    } else {
        "summary"
    };
    if let Some(step) = lock(state).defaults.get(purpose) {
        return step.clone();
    }
    if options().weak {
        let ramble = if system.contains("JSON") {
            "Sure! The user asked something and the assistant answered it, which is a key finding."
        } else if system.contains("title") {
            "Sure! Here is a title for this conversation:\n\n**A Title**\n\nI hope it helps."
        } else {
            "The conversation so far covered many things, and all of them matter a lot."
        };
        return json!({"text": vec![ramble; 200].join(" ")});
    }
    if system.contains("JSON") {
        let memory = json!({"files_changed": [], "failures": [], "key_findings": [format!("mock finding {n}")]});
        json!({"text": memory.to_string()})
    } else if system.contains("title") {
        json!({"text": format!("Mock Title {n}")})
    } else {
        json!({"text": format!("Mock summary {n}: {short}")})
    }
}

/// Sets `_key: value` on the recorded request `at`.
fn note(state: &Shared, at: usize, key: &str, value: Value) {
    if let Some(r) = lock(state)
        .requests
        .get_mut(at)
        .and_then(Value::as_object_mut)
    {
        r.insert(key.into(), value);
    }
}

fn chat(stream: &mut TcpStream, state: &Shared, mut body: Value) -> std::io::Result<()> {
    body["_arrived_ms"] = json!(now_ms());
    let at = {
        let mut s = lock(state);
        s.requests.push(body.clone());
        s.requests.len() - 1
    };
    let held = if options().one_slot {
        match take_slot(stream, at) {
            Some(held) => Some(held),
            None => {
                note(state, at, "_cancelled", json!(true));
                note(state, at, "_ended_ms", json!(now_ms()));
                return Ok(());
            }
        }
    } else {
        None
    };
    note(state, at, "_started_ms", json!(now_ms()));
    let served = serve(stream, state, body);
    // Recorded before the slot is freed, so the next request's `_started_ms` can never
    // read as earlier than this one's end (a race CI met at millisecond resolution).
    if served.is_err() {
        note(state, at, "_cancelled", json!(true));
    }
    note(state, at, "_ended_ms", json!(now_ms()));
    drop(held);
    served
}
