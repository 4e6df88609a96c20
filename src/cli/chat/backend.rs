//! Where `brain chat` goes: the server holding the database (HTTP), or an engine in this
//! process when none does.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use super::super::lock::{DbLock, Holder, LockError};
use super::super::{ChatArgs, CliError, ProviderArgs, coordinator, open_at, resolve_db_path};
use super::{Frames, RESUME_ITEMS, path_segment};
use crate::chat::consent::Answer;
use crate::chat::engine::{Engine, SHUTDOWN_DEADLINE};
use crate::provider::Provider;
use crate::session::projection::ui_transcript;
use crate::session::{SessionId, Store, SyncMode};

/// How long `brain chat` waits to reach the server and hand it a request.
const SERVER_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long `brain chat` waits for the server's answer to begin (a stream's head comes at
/// once; a stopped or wedged server never sends one).
const SERVER_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Where the chat goes: a server, or an engine in this process.
pub(crate) trait Backend: Send + Sync {
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
        tools: &super::super::ToolsArgs,
    ) -> Result<Local, CliError> {
        let store = Arc::new(open_at(&db, sync)?);
        let cfg = p.provider_config();
        let mut settings = p.engine_settings();
        settings.tool_limits.tool_timeout = std::time::Duration::from_secs(tools.tool_timeout);
        // As `serve`: what a killed chat left running ends here.
        let links = crate::tools::mcp::LinkOptions {
            groups: super::super::tools::server_groups(&db),
            ..crate::tools::mcp::LinkOptions::for_results(
                settings.tool_limits.max_tool_result_bytes,
            )
        };
        let tools = Arc::new(tools.start(Some(Arc::clone(&store)), links)?);
        // On PostgreSQL running servers share the database: sessions are claimed against
        // them (SPEC §16), as a server would.
        let engine = Engine::coordinated(
            Arc::clone(&store),
            Arc::new(Provider::new(cfg)),
            settings,
            tools,
            coordinator(&db)?,
        );
        super::super::serve::recover_questions(&engine);
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

pub(super) fn backend(
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
