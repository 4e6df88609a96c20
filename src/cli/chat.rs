//! `brain chat`: a terminal chat. It talks to the server holding the database (its URL is
//! in the lock file) or to `--url`, and runs the engine in-process only when no server
//! holds the database. Ctrl-C stops the answer being written; a second Ctrl-C (or one at
//! the prompt) leaves.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use signal_hook::consts::SIGINT;

use super::lock::{DbLock, Holder, LockError};
use super::term::printable;
use super::{ChatArgs, CliError, ProviderArgs, open_at, resolve_db_path};
use crate::chat::consent::Answer;
use crate::chat::engine::{Engine, SHUTDOWN_DEADLINE};

/// How long `brain chat` waits to reach the server and hand it a request.
const SERVER_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long `brain chat` waits for the server's answer to begin (a stream's head comes at
/// once; a stopped or wedged server never sends one).
const SERVER_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
use crate::provider::Provider;
use crate::session::projection::ui_transcript;
use crate::session::{SessionId, Store, SyncMode};

/// Transcript items shown when a session is resumed.
const RESUME_ITEMS: usize = 20;

pub(super) type Frames = Box<dyn Iterator<Item = Value> + Send>;

/// Where the chat goes: a server, or an engine in this process.
pub(super) trait Backend: Send + Sync {
    fn describe(&self) -> String;
    fn create(&self) -> Result<SessionId, CliError>;
    /// The newest transcript items, as the API shapes them.
    fn history(&self, id: SessionId) -> Result<Vec<Value>, CliError>;
    fn send(&self, id: SessionId, text: &str) -> Result<Frames, CliError>;
    fn retry(&self, id: SessionId) -> Result<Frames, CliError>;
    /// Edits the user message at `seq` and sends the new text (SPEC §14).
    fn edit(&self, id: SessionId, seq: u64, text: &str) -> Result<Frames, CliError>;
    /// Forks the session at its newest event; the new session's id.
    fn fork(&self, id: SessionId) -> Result<SessionId, CliError>;
    fn stop(&self, id: SessionId);
    /// The person's answer to the question the session's attempt waits on.
    fn answer(&self, id: SessionId, call_id: &str, answer: Answer) -> Result<(), CliError>;
    fn close(&self) {}
}

struct Http {
    url: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Http {
    fn new(url: &str, token: Option<String>) -> Http {
        // A server that accepts and then says nothing (stopped, wedged) is given up on
        // rather than waited for forever; a stream itself may be long (pings every 15 s).
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(SERVER_CONNECT_TIMEOUT))
            .timeout_send_request(Some(SERVER_CONNECT_TIMEOUT))
            .timeout_recv_response(Some(SERVER_ANSWER_TIMEOUT))
            .build()
            .new_agent();
        Http {
            url: url.trim_end_matches('/').to_owned(),
            token,
            agent,
        }
    }

    fn auth<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => r.header("Authorization", &format!("Bearer {t}")),
            None => r,
        }
    }

    fn post(&self, path: &str, body: Value) -> Result<ureq::http::Response<ureq::Body>, CliError> {
        let r = self.auth(self.agent.post(&format!("{}{path}", self.url)));
        r.header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| CliError::Serve(format!("cannot reach {}: {e}", self.url)))
    }

    fn json(resp: ureq::http::Response<ureq::Body>) -> Result<Value, CliError> {
        let status = resp.status().as_u16();
        let text = resp.into_body().read_to_string().unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status >= 400 {
            let msg = body["message"]
                .as_str()
                .unwrap_or("the server refused")
                .to_owned();
            return Err(CliError::Serve(msg));
        }
        Ok(body)
    }

    fn stream(resp: ureq::http::Response<ureq::Body>) -> Result<Frames, CliError> {
        if resp.status().as_u16() != 200 {
            return Http::json(resp).map(|_| Box::new(std::iter::empty()) as Frames);
        }
        let lines = BufReader::new(resp.into_body().into_reader()).lines();
        Ok(Box::new(lines.map_while(Result::ok).filter_map(|l| {
            l.strip_prefix("data: ")
                .and_then(|d| serde_json::from_str(d).ok())
        })))
    }
}

impl Backend for Http {
    fn describe(&self) -> String {
        format!("server {}", self.url)
    }

    fn create(&self) -> Result<SessionId, CliError> {
        let s = Http::json(self.post("/v1/sessions", json!({}))?)?;
        Ok(s["id"].as_str().unwrap_or_default().parse()?)
    }

    fn history(&self, id: SessionId) -> Result<Vec<Value>, CliError> {
        let r = self.auth(self.agent.get(&format!(
            "{}/v1/sessions/{id}?limit={RESUME_ITEMS}",
            self.url
        )));
        let resp = r
            .call()
            .map_err(|e| CliError::Serve(format!("cannot reach {}: {e}", self.url)))?;
        Ok(Http::json(resp)?["items"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    fn send(&self, id: SessionId, text: &str) -> Result<Frames, CliError> {
        Http::stream(self.post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"message": text}),
        )?)
    }

    fn retry(&self, id: SessionId) -> Result<Frames, CliError> {
        Http::stream(self.post(&format!("/v1/sessions/{id}/retry"), json!({}))?)
    }

    fn edit(&self, id: SessionId, seq: u64, text: &str) -> Result<Frames, CliError> {
        Http::stream(self.post(
            &format!("/v1/sessions/{id}/messages"),
            json!({"message": text, "edit_of": seq}),
        )?)
    }

    fn fork(&self, id: SessionId) -> Result<SessionId, CliError> {
        let s = Http::json(self.post(&format!("/v1/sessions/{id}/fork"), json!({}))?)?;
        Ok(s["id"].as_str().unwrap_or_default().parse()?)
    }

    fn stop(&self, id: SessionId) {
        let _ = self.post(&format!("/v1/sessions/{id}/stop"), json!({}));
    }

    fn answer(&self, id: SessionId, call_id: &str, answer: Answer) -> Result<(), CliError> {
        let decision = if answer.allow { "allow" } else { "deny" };
        // The id is the model's: whatever it holds stays one path segment.
        let call = path_segment(call_id);
        Http::json(self.post(
            &format!("/v1/sessions/{id}/permissions/{call}"),
            json!({"decision": decision, "remember": answer.remember}),
        )?)
        .map(|_| ())
    }
}

struct Local {
    engine: Engine,
    store: Arc<Store>,
    /// The database's lock, held while this chat writes to it.
    _lock: DbLock,
}

impl Local {
    fn new(
        db: PathBuf,
        lock: DbLock,
        sync: SyncMode,
        p: &ProviderArgs,
        tools: &super::ToolsArgs,
    ) -> Result<Local, CliError> {
        let store = Arc::new(open_at(&db, sync)?);
        let cfg = p.provider_config();
        let mut settings = p.engine_settings();
        settings.tool_limits.tool_timeout = std::time::Duration::from_secs(tools.tool_timeout);
        let tools = Arc::new(tools.start(Some(Arc::clone(&store)))?);
        let engine = Engine::with_tools(
            Arc::clone(&store),
            Arc::new(Provider::new(cfg)),
            settings,
            tools,
        );
        Ok(Local {
            engine,
            store,
            _lock: lock,
        })
    }

    fn frames(sub: crate::chat::frames::Subscription) -> Frames {
        Box::new(sub.filter_map(|f| serde_json::to_value(f).ok()))
    }
}

impl Backend for Local {
    fn describe(&self) -> String {
        format!("in-process, database {}", self.store.path().display())
    }

    fn create(&self) -> Result<SessionId, CliError> {
        Ok(self
            .store
            .create_session(None, crate::config::DEFAULT_SYSTEM_PROMPT.into())?
            .id)
    }

    fn history(&self, id: SessionId) -> Result<Vec<Value>, CliError> {
        let items = ui_transcript(
            &self.store.events(id, 0, None)?,
            self.engine.active_attempt(id),
        );
        let start = items.len().saturating_sub(RESUME_ITEMS);
        Ok(items[start..]
            .iter()
            .filter_map(|i| serde_json::to_value(i).ok())
            .collect())
    }

    fn send(&self, id: SessionId, text: &str) -> Result<Frames, CliError> {
        self.engine
            .send(id, text, None)
            .map(Local::frames)
            .map_err(|e| CliError::Serve(e.to_string()))
    }

    fn retry(&self, id: SessionId) -> Result<Frames, CliError> {
        self.engine
            .retry(id, None)
            .map(Local::frames)
            .map_err(|e| CliError::Serve(e.to_string()))
    }

    fn edit(&self, id: SessionId, seq: u64, text: &str) -> Result<Frames, CliError> {
        self.engine
            .edit(id, seq, text, None)
            .map(Local::frames)
            .map_err(|e| CliError::Serve(e.to_string()))
    }

    fn fork(&self, id: SessionId) -> Result<SessionId, CliError> {
        self.engine
            .fork(id, None)
            .map(|row| row.id)
            .map_err(|e| CliError::Serve(e.to_string()))
    }

    fn stop(&self, id: SessionId) {
        let _ = self.engine.stop(id);
    }

    fn answer(&self, id: SessionId, call_id: &str, answer: Answer) -> Result<(), CliError> {
        self.engine
            .answer_permission(id, call_id, answer)
            .map_err(|e| CliError::Serve(e.to_string()))
    }

    fn close(&self) {
        self.engine.shutdown(SHUTDOWN_DEADLINE);
    }
}

fn backend(
    db: Option<PathBuf>,
    sync: SyncMode,
    args: &ChatArgs,
) -> Result<Arc<dyn Backend>, CliError> {
    if let Some(url) = &args.url {
        return Ok(Arc::new(Http::new(url, args.api_token.clone())));
    }
    let db = resolve_db_path(db)?;
    // Taking the lock is how we learn whether a server holds the database: whoever holds
    // it is alive (the kernel frees a dead process's lock), and a server wrote its URL.
    match DbLock::acquire(&db, "chat") {
        Ok(lock) => Ok(Arc::new(Local::new(
            db,
            lock,
            sync,
            &args.provider,
            &args.tools,
        )?)),
        Err(LockError::Held {
            holder: Holder { url: Some(url), .. },
            ..
        }) => Ok(Arc::new(Http::new(&url, args.api_token.clone()))),
        Err(e) => Err(CliError::Locked(
            e,
            "wait until it is done, or pass --url to talk to a server",
        )),
    }
}

pub fn run(
    db: Option<PathBuf>,
    sync: SyncMode,
    args: ChatArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let backend = backend(db, sync, &args)?;
    let id = match &args.session {
        Some(s) => {
            let id: SessionId = s.parse()?;
            for item in backend.history(id)? {
                show_item(&item, out)?;
            }
            id
        }
        None => backend.create()?,
    };
    writeln!(
        out,
        "session {id} ({}). Type a message; /retry answers the last one again; /edit [text] \
         replaces your last message; /fork continues in a copy; /quit or Ctrl-D leaves; \
         Ctrl-C stops an answer.",
        backend.describe()
    )?;
    out.flush()?;
    let active = Arc::new(AtomicBool::new(false));
    // `/fork` moves the chat to the new session; Ctrl-C stops the current one's answer.
    let current = Arc::new(Mutex::new(id));
    watch_interrupts(
        Arc::clone(&backend),
        Arc::clone(&current),
        Arc::clone(&active),
    )?;
    let stdin = std::io::stdin();
    // A visible prompt on a terminal; through a pipe nothing is echoed, so the line read
    // is shown after it instead and the output reads as the conversation it was.
    let terminal = stdin.is_terminal();
    let mut lines = stdin.lock().lines();
    loop {
        if terminal {
            write!(out, "{PROMPT}")?;
            out.flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line?;
        let text = line.trim();
        if !terminal && !text.is_empty() {
            writeln!(out, "{PROMPT}{}", printable(text))?;
        }
        let id = *current.lock().unwrap_or_else(PoisonError::into_inner);
        let frames = match text {
            "" => continue,
            "/quit" | "/exit" => break,
            "/retry" => backend.retry(id),
            "/fork" => {
                match backend.fork(id) {
                    Ok(new) => {
                        *current.lock().unwrap_or_else(PoisonError::into_inner) = new;
                        writeln!(out, "[forked into session {new}; continuing there]\n")?;
                    }
                    Err(e) => writeln!(out, "[{}]\n", printable(&e.to_string()))?,
                }
                out.flush()?;
                continue;
            }
            t if t == "/edit" || t.starts_with("/edit ") => {
                let mut read_line = || lines.next().and_then(Result::ok);
                match super::chat_edit::edit_text(t, terminal, &mut read_line, out)? {
                    Some(new_text) => super::chat_edit::edit_last(backend.as_ref(), id, &new_text),
                    None => continue,
                }
            }
            _ => backend.send(id, text),
        };
        match frames {
            Ok(frames) => {
                active.store(true, Ordering::SeqCst);
                let mut read_line = || lines.next().and_then(Result::ok);
                let mut consent = Consent {
                    backend: backend.as_ref(),
                    id,
                    read_line: &mut read_line,
                    terminal,
                };
                let shown = show_frames(frames, out, &mut consent);
                active.store(false, Ordering::SeqCst);
                shown?;
            }
            Err(e) => writeln!(out, "[{}]\n", printable(&e.to_string()))?,
        }
        out.flush()?;
    }
    backend.close();
    Ok(())
}

/// Ctrl-C stops the running answer; a second one (or one at the prompt) leaves.
fn watch_interrupts(
    backend: Arc<dyn Backend>,
    current: Arc<Mutex<SessionId>>,
    active: Arc<AtomicBool>,
) -> Result<(), CliError> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT])
        .map_err(|e| CliError::Serve(format!("cannot handle Ctrl-C: {e}")))?;
    std::thread::spawn(move || {
        let mut stopping = false;
        for _ in signals.forever() {
            if active.load(Ordering::SeqCst) && !stopping {
                stopping = true;
                eprintln!("\n[stopping the answer; Ctrl-C again to leave]");
                backend.stop(*current.lock().unwrap_or_else(PoisonError::into_inner));
                continue;
            }
            backend.close();
            std::process::exit(130);
        }
    });
    Ok(())
}

/// What the user's lines start with, typed or shown.
const PROMPT: &str = "you › ";

/// How a permission question is put to the person and answered.
struct Consent<'a> {
    backend: &'a dyn Backend,
    id: SessionId,
    /// The person's next line; None at the end of input.
    read_line: &'a mut dyn FnMut() -> Option<String>,
    terminal: bool,
}

impl Consent<'_> {
    /// Asks about one call (`Allow NAME(args)? [y]es / [n]o / [a]lways `), reads one line
    /// and answers through the backend. Anything but yes or always, and the end of input,
    /// is no.
    fn ask(&mut self, f: &Value, out: &mut dyn Write) -> Result<(), CliError> {
        let name = f["name"].as_str().unwrap_or_default();
        let args = f["args"].as_str().unwrap_or_default();
        write!(
            out,
            "\nAllow {}({})? [y]es / [n]o / [a]lways ",
            printable(name),
            printable(&short_args(args, PERMISSION_ARGS_CHARS))
        )?;
        out.flush()?;
        let line = (self.read_line)();
        // Through a pipe nothing is echoed: the answer read is shown, as typed lines are.
        if !self.terminal {
            writeln!(out, "{}", printable(line.as_deref().unwrap_or("").trim()))?;
        }
        let answer = consent_answer(line.as_deref());
        let call_id = f["call_id"].as_str().unwrap_or_default();
        if let Err(e) = self.backend.answer(self.id, call_id, answer) {
            writeln!(out, "[could not answer: {}]", printable(&e.to_string()))?;
        }
        Ok(())
    }
}

/// `text` percent-encoded as one path segment (all but RFC 3986's unreserved characters).
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Characters of a call's arguments shown inline, and in a question.
const CALL_ARGS_CHARS: usize = 60;
const PERMISSION_ARGS_CHARS: usize = 300;

/// The arguments on one line (compact JSON when they parse), cut at `max` characters.
fn short_args(args: &str, max: usize) -> String {
    let compact = serde_json::from_str::<Value>(args)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| args.to_owned());
    if compact.chars().count() <= max {
        return compact;
    }
    let mut cut: String = compact.chars().take(max).collect();
    cut.push('…');
    cut
}

/// The person's line as an answer: y/yes allows, a/always allows for the session, anything
/// else (and the end of input) denies.
fn consent_answer(line: Option<&str>) -> Answer {
    let word = line.unwrap_or_default().trim().to_lowercase();
    let (allow, remember) = match word.as_str() {
        "y" | "yes" => (true, false),
        "a" | "always" => (true, true),
        _ => (false, false),
    };
    Answer { allow, remember }
}

/// A call's end in words, with its time: `ok, 12 ms`.
fn call_status(status: &str, ms: u64) -> String {
    let words = match status {
        "timeout" => "timed out",
        other => other,
    };
    format!("{}, {ms} ms", printable(words))
}

fn show_frames(
    frames: Frames,
    out: &mut dyn Write,
    consent: &mut Consent<'_>,
) -> Result<(), CliError> {
    let mut thinking = false;
    let mut after_call = false;
    write!(out, "assistant: ")?;
    for f in frames {
        match f["type"].as_str().unwrap_or_default() {
            "tool_call" => write!(
                out,
                "\n[tool {} {}] ",
                printable(f["name"].as_str().unwrap_or_default()),
                printable(&short_args(
                    f["args"].as_str().unwrap_or_default(),
                    CALL_ARGS_CHARS
                ))
            )?,
            "permission" => consent.ask(&f, out)?,
            "tool_result" => {
                after_call = true;
                write!(
                    out,
                    "[{}]",
                    call_status(
                        f["status"].as_str().unwrap_or_default(),
                        f["duration_ms"].as_u64().unwrap_or_default()
                    )
                )?
            }
            "status" if f["phase"] == "compacting" => {
                write!(out, "[compacting the conversation…] ")?
            }
            "reasoning" if !thinking => {
                thinking = true;
                write!(out, "[thinking…] ")?
            }
            // Each chunk on its own: `printable` needs no state, so a sequence split
            // between chunks is made visible all the same.
            "chunk" => {
                let text = f["text"].as_str().unwrap_or_default();
                // Text after a call starts on a line of its own (a step's text has a blank
                // line before it only when an earlier step had text).
                if std::mem::take(&mut after_call) && !text.starts_with('\n') {
                    writeln!(out)?;
                }
                write!(out, "{}", printable(text))?
            }
            "error" => write!(
                out,
                "\n[error {}: {}]",
                printable(f["code"].as_str().unwrap_or("?")),
                printable(f["message"].as_str().unwrap_or(""))
            )?,
            "end" => {
                match f["status"].as_str().unwrap_or_default() {
                    "interrupted" => write!(
                        out,
                        "\n[interrupted: the answer was cut off; /retry, or say more to continue]"
                    )?,
                    "failed" => write!(out, "\n[failed: no answer; /retry to try again]")?,
                    _ => {}
                }
                // The end of the answer, then a blank line between turns.
                writeln!(out, "\n")?;
            }
            _ => {}
        }
        out.flush()?;
    }
    Ok(())
}

fn show_item(item: &Value, out: &mut dyn Write) -> Result<(), CliError> {
    let field = |name: &str| printable(item[name].as_str().unwrap_or_default()).into_owned();
    let text = field("text");
    match item["kind"].as_str().unwrap_or_default() {
        "user" => writeln!(out, "{PROMPT}{text}")?,
        "assistant" => writeln!(out, "assistant: {text}\n")?,
        "interrupted" => writeln!(out, "assistant (interrupted): {text}\n")?,
        "streaming" => writeln!(out, "assistant (still answering): {text}\n")?,
        "error" => writeln!(out, "[failed: {}]\n", field("code"))?,
        "compaction" => writeln!(out, "[compacted: {}]", field("summary"))?,
        "title" => writeln!(out, "[renamed to {:?}]", field("title"))?,
        "tool" => writeln!(
            out,
            "[tool {} {}: {}]",
            field("name"),
            printable(&short_args(
                item["args"].as_str().unwrap_or_default(),
                CALL_ARGS_CHARS
            )),
            call_status(
                item["status"].as_str().unwrap_or_default(),
                item["duration_ms"].as_u64().unwrap_or_default()
            )
        )?,
        "permission" => writeln!(
            out,
            "[asked about {}: {}]",
            field("name"),
            match (item["decision"].as_str(), item["by"].as_str()) {
                (None, _) => "not answered".to_owned(),
                (Some(d), Some(by)) => format!("{} by {}", printable(d), printable(by)),
                (Some(d), None) => printable(d).into_owned(),
            }
        )?,
        other => writeln!(out, "[{}]", printable(other))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_yes_and_always_allow() {
        let a = |l: Option<&str>| {
            let x = consent_answer(l);
            (x.allow, x.remember)
        };
        for yes in ["y", "Y", " yes ", "YES"] {
            assert_eq!(a(Some(yes)), (true, false), "{yes}");
        }
        for always in ["a", "always", "A\r"] {
            assert_eq!(a(Some(always)), (true, true), "{always}");
        }
        for no in ["n", "no", "", "yy", "sure", "y es", "\u{1b}y"] {
            assert_eq!(a(Some(no)), (false, false), "{no:?}");
        }
        assert_eq!(a(None), (false, false), "the end of input is no");
    }

    #[test]
    fn short_args_are_compact_and_cut_on_characters() {
        assert_eq!(short_args("{ \"a\" : 1 }", 60), "{\"a\":1}");
        assert_eq!(short_args("not json", 60), "not json");
        assert_eq!(short_args(&"é".repeat(10), 4), "éééé…");
    }

    #[test]
    fn a_call_id_is_one_path_segment() {
        assert_eq!(path_segment("call_1-a.b~"), "call_1-a.b~");
        assert_eq!(path_segment("a/b c?é"), "a%2Fb%20c%3F%C3%A9");
    }
}
