//! The routes of SPEC §7: parse, call the engine or the store, shape the answer.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::http::{self, Answer, Request, json_body, number};
use super::request::{Head, Target};
use super::{Api, assets, views};
use crate::chat::frames::Subscription;
use crate::session::cursor::{ArchivedFilter, Cursor};
use crate::session::events::TitledBy;
use crate::session::projection::llm_context;
use crate::session::store::{ListQuery, SearchOrder, SearchQuery, Syntax};
use crate::session::{SessionId, SessionRow};

/// The longest title accepted, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// The largest seq a query may name: the database stores seqs as signed 64-bit integers,
/// so anything past it is a 400, not a failed conversion.
pub const MAX_SEQ: u64 = i64::MAX as u64;

/// What a route answers: a JSON answer, a stream of an attempt's frames, or an import's
/// progress lines.
pub enum Reply {
    Answer(Answer),
    Stream(SessionId, Subscription),
    Lines(super::import::Lines),
}

/// Decides from a request's head alone whether it may be served (Host, Origin, token),
/// before any of its body is read. `method` is the method routing uses.
pub fn admit(api: &Api, method: &str, head: &Head, target: &Target) -> Result<(), ApiError> {
    api.guards.check(
        method,
        &target.segments,
        head.header("Host"),
        head.header("Origin"),
        head.header("Authorization"),
    )
}

/// Answers one admitted request. Never panics on what a client sends; every error is
/// `{error, message}` with the SPEC's status.
pub fn handle(api: &Api, req: &Request) -> Reply {
    match route(api, req) {
        Ok(reply) => reply,
        Err(e) => Reply::Answer(http::error(&e)),
    }
}

fn route(api: &Api, req: &Request) -> Result<Reply, ApiError> {
    let method = req.method.as_str();
    let params = req.params();
    let path = req.target.path();
    let segments: Vec<&str> = req.target.segments.iter().map(String::as_str).collect();
    let answer = |a: Result<Answer, ApiError>| a.map(Reply::Answer);
    match (method, segments.as_slice()) {
        ("GET", ["health"]) => answer(Ok(health(api))),
        ("GET", ["v1", "models"]) => answer(Ok(models(api))),
        ("GET", ["v1", "sessions"]) => answer(list(api, params)),
        ("POST", ["v1", "sessions"]) => answer(create(api, req)),
        ("GET", ["v1", "search"]) => answer(search(api, params)),
        ("GET", ["v1", "usage"]) => answer(usage(api, params)),
        ("GET", ["v1", "tools"]) => answer(Ok(http::json(
            200,
            &views::tools(&api.engine.tools().status()),
        ))),
        (m, ["v1", "sessions", id, rest @ ..]) => session_route(api, req, m, id, rest, params),
        ("GET", [] | ["sessions", _]) => answer(Ok(http::asset(
            assets::INDEX_HTML,
            "text/html; charset=utf-8",
        ))),
        // Browsers ask for /favicon.ico whatever the page links; it is the same SVG.
        ("GET", ["favicon.ico"]) => match assets::find("favicon.svg") {
            Some((body, kind)) => answer(Ok(http::asset(body, kind))),
            None => Err(ApiError::not_found("no such file")),
        },
        ("GET", ["assets", rest @ ..]) => match assets::find(&rest.join("/")) {
            Some((body, kind)) => answer(Ok(http::asset(body, kind))),
            None => Err(ApiError::not_found("no such file")),
        },
        (
            _,
            ["health"]
            | [
                "v1",
                "models" | "sessions" | "search" | "usage" | "tools" | "import",
            ],
        ) => Err(ApiError::new(
            405,
            "method_not_allowed",
            format!("{method} is not allowed on {path}"),
        )),
        _ => Err(ApiError::not_found(format!("no route {path}"))),
    }
}

fn session_route(
    api: &Api,
    req: &Request,
    method: &str,
    id: &str,
    rest: &[&str],
    params: &HashMap<String, String>,
) -> Result<Reply, ApiError> {
    let id: SessionId = id
        .parse()
        .map_err(|_| ApiError::not_found("no such session (malformed id)"))?;
    let engine = &api.engine;
    match (method, rest) {
        ("GET", []) => transcript(api, id, params).map(Reply::Answer),
        ("PATCH", []) => patch(api, req, id).map(Reply::Answer),
        ("DELETE", []) => {
            engine.delete(id)?;
            Ok(Reply::Answer(http::empty(204)))
        }
        ("POST", ["messages"]) => send_message(api, req, id),
        ("POST", ["fork"]) => {
            let body = json_body(req)?;
            let through = seq_field(&body, "through_seq")?;
            let row = engine.fork(id, through)?;
            Ok(Reply::Answer(http::json(201, &session_json(api, &row))))
        }
        ("POST", ["retry"]) => {
            let body = json_body(req)?;
            let model = string_field(&body, "model")?;
            Ok(Reply::Stream(id, engine.retry(id, model)?))
        }
        ("POST", ["stop"]) => {
            engine.store().session(id)?;
            engine.stop(id)?;
            Ok(Reply::Answer(http::json(202, &json!({}))))
        }
        ("GET", ["live"]) => {
            engine.store().session(id)?;
            Ok(Reply::Stream(id, engine.live(id)?))
        }
        ("GET", ["context"]) => context(api, id).map(Reply::Answer),
        ("POST", ["compact"]) => compact(api, id).map(Reply::Answer),
        ("GET", ["events"]) => events(api, id, params).map(Reply::Answer),
        ("POST", ["permissions", call_id]) => answer_permission(api, req, id, call_id),
        (_, [] | ["messages" | "retry" | "stop" | "live" | "context" | "events" | "fork"])
        | (_, ["permissions", _]) => Err(ApiError::new(
            405,
            "method_not_allowed",
            format!("{method} is not allowed here"),
        )),
        _ => Err(ApiError::not_found("no such route")),
    }
}

/// `POST …/messages`: a new message (or, with `edit_of`, an edit) and its answer's stream.
fn send_message(api: &Api, req: &Request, id: SessionId) -> Result<Reply, ApiError> {
    let engine = &api.engine;
    let body = json_body(req)?;
    let message = string_field(&body, "message")?
        .ok_or_else(|| ApiError::bad_request("`message` is required"))?;
    let model = string_field(&body, "model")?;
    let sub = match seq_field(&body, "edit_of")? {
        Some(edited) => engine.edit(id, edited, &message, model)?,
        None => engine.send(id, &message, model)?,
    };
    Ok(Reply::Stream(id, sub))
}

/// `POST …/permissions/{call_id}`: the person's answer to a waiting question.
fn answer_permission(
    api: &Api,
    req: &Request,
    id: SessionId,
    call_id: &str,
) -> Result<Reply, ApiError> {
    let engine = &api.engine;
    let body = json_body(req)?;
    let allow = match string_field(&body, "decision")?.as_deref() {
        Some("allow") => true,
        Some("deny") => false,
        _ => {
            return Err(ApiError::bad_request(
                "`decision` must be \"allow\" or \"deny\"",
            ));
        }
    };
    let remember = match body.get("remember") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad_request("`remember` must be a boolean")),
    };
    engine.store().session(id)?;
    engine.answer_permission(
        id,
        call_id,
        crate::chat::consent::Answer { allow, remember },
    )?;
    Ok(Reply::Answer(http::json(200, &json!({}))))
}

/// An optional seq field: an integer from 1 to [`MAX_SEQ`]; anything else (a string, a
/// fraction, 0, a negative or huge number) is a 400.
fn seq_field(body: &Map<String, Value>, name: &str) -> Result<Option<u64>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(seq) if (1..=MAX_SEQ).contains(&seq) => Ok(Some(seq)),
            _ => Err(ApiError::bad_request(format!(
                "`{name}` must be a seq: an integer from 1 to {MAX_SEQ}"
            ))),
        },
    }
}

/// An optional string field; any other type is a 400.
fn string_field(body: &Map<String, Value>, name: &str) -> Result<Option<String>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::bad_request(format!("`{name}` must be a string"))),
    }
}

fn title_field(body: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    let Some(title) = string_field(body, "title")? else {
        return Ok(None);
    };
    let title = title.trim().to_owned();
    if title.is_empty() || title.chars().count() > MAX_TITLE_CHARS {
        return Err(ApiError::bad_request(format!(
            "`title` must be 1 to {MAX_TITLE_CHARS} characters"
        )));
    }
    Ok(Some(title))
}

fn session_json(api: &Api, s: &SessionRow) -> Value {
    views::session(s, Some(api.engine.turn_active(s.id)))
}

fn health(api: &Api) -> Answer {
    // From the last known state (a check on its own thread): never the database's wait.
    let store = std::sync::Arc::clone(api.engine.store());
    let db_ok = api.db_health.ok(crate::config::HEALTH_PROBE_WAIT, move || {
        let one = ListQuery {
            limit: 1,
            ..ListQuery::default()
        };
        store.list_sessions(&one).is_ok()
    });
    // What the last provider call or probe saw, within a short budget (I10): never a
    // provider call of its own length.
    let provider = api
        .engine
        .provider()
        .reachable(crate::config::HEALTH_PROBE_WAIT);
    let tools = api.engine.tools().status().health;
    let status = if db_ok && provider && tools != crate::tools::Health::Degraded {
        "ok"
    } else {
        "degraded"
    };
    http::json(
        200,
        &json!({
            "status": status,
            "version": env!("CARGO_PKG_VERSION"),
            "db": if db_ok { "ok" } else { "error" },
            "provider": if provider { "ok" } else { "unreachable" },
            "tools": tools,
        }),
    )
}

/// The last known listing (a bounded wait when none is known yet) and the chat model:
/// the configured one, else the first listed.
fn known_models(api: &Api) -> (Vec<crate::provider::ModelInfo>, Option<String>) {
    let list = api
        .engine
        .provider()
        .models_within(crate::config::MODELS_ROUTE_WAIT)
        .map(|l| l.to_vec())
        .unwrap_or_default();
    let chat = api
        .engine
        .settings()
        .chat_model
        .clone()
        .filter(|m| !m.is_empty())
        .or_else(|| list.first().map(|m| m.id.clone()));
    (list, chat)
}

fn models(api: &Api) -> Answer {
    let s = api.engine.settings();
    let (list, chat) = known_models(api);
    // Where brain looks for the model and whether it answers, so the page can explain a
    // first run with no model server (`--provider-url`) instead of an empty picker.
    let reachable = api
        .engine
        .provider()
        .reachable(crate::config::HEALTH_PROBE_WAIT);
    let provider = json!({
        "url": api.engine.provider().base_url(),
        "status": if reachable { "ok" } else { "unreachable" },
    });
    let models: Vec<Value> = list
        .iter()
        .map(|m| {
            let is_chat = chat.as_deref() == Some(m.id.as_str());
            let w = crate::provider::window_in(&list, &m.id, s.context_window.filter(|_| is_chat));
            let paused = api.engine.paused(&m.id);
            let tools = api.engine.provider().offers_tools(&m.id);
            json!({"id": m.id, "window": w.tokens, "window_source": w.source, "paused": paused,
                "tools": tools})
        })
        .collect();
    http::json(
        200,
        &json!({
            "models": models,
            "chat_model": chat,
            "summarize_model": s.summarize_model.clone().or_else(|| chat.clone()),
            "mini_model": s.mini_model.clone().or_else(|| chat.clone()),
            "provider": provider,
        }),
    )
}

fn list(api: &Api, params: &HashMap<String, String>) -> Result<Answer, ApiError> {
    let before = Cursor::from_parts(
        params.get("before").map(String::as_str),
        params.get("before_id").map(String::as_str),
    )?;
    let archived = match params.get("archived") {
        None => None,
        Some(a) => Some(
            a.parse::<ArchivedFilter>()
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        ),
    };
    let query = params
        .get("query")
        .filter(|q| !q.trim().is_empty())
        .cloned();
    let page = api.engine.store().list_sessions(&ListQuery {
        before,
        limit: number(params, "limit", 50, 1, 200)? as u32,
        archived,
        query,
    })?;
    // One look for the page's sessions (on PostgreSQL, one query for every server's).
    let ids: Vec<SessionId> = page.sessions.iter().map(|s| s.id).collect();
    let active = api.engine.turns_active(&ids);
    let sessions: Vec<Value> = page
        .sessions
        .iter()
        .map(|s| views::session(s, Some(active.contains(&s.id))))
        .collect();
    let next = page
        .next
        .map(|c| json!({"before": c.updated_at, "before_id": c.id.to_string()}));
    Ok(http::json(
        200,
        &json!({"sessions": sessions, "next": next}),
    ))
}

fn create(api: &Api, req: &Request) -> Result<Answer, ApiError> {
    let body = json_body(req)?;
    let title = title_field(&body)?;
    let system = string_field(&body, "system")?.unwrap_or_else(|| api.config.system_prompt.clone());
    if system.len() > api.engine.settings().max_message_bytes {
        return Err(ApiError::new(
            413,
            "too_large",
            "the system prompt is too long",
        ));
    }
    let row = api.engine.store().create_session(title, system)?;
    Ok(http::json(201, &session_json(api, &row)))
}

fn patch(api: &Api, req: &Request, id: SessionId) -> Result<Answer, ApiError> {
    let body = json_body(req)?;
    let title = title_field(&body)?;
    let archived = match body.get("archived") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(ApiError::bad_request("`archived` must be true or false")),
    };
    if title.is_none() && archived.is_none() {
        return Err(ApiError::bad_request("give `title` or `archived`"));
    }
    let row = api.engine.store().write(|w| {
        if let Some(t) = title.clone() {
            w.rename(id, t, TitledBy::User)?;
        }
        if let Some(a) = archived {
            w.set_archived(id, a)?;
        }
        w.session(id)
    })?;
    Ok(http::json(200, &session_json(api, &row)))
}

fn transcript(
    api: &Api,
    id: SessionId,
    params: &HashMap<String, String>,
) -> Result<Answer, ApiError> {
    let store = api.engine.store();
    let session = store.session(id)?;
    let before = number(params, "before_seq", MAX_SEQ, 1, MAX_SEQ)?;
    let limit = number(params, "limit", 500, 1, 1000)? as usize;
    // The running attempt is read before the events: if it ends in between, the events
    // hold its end, and at worst an attempt that has just ended shows as streaming (`/live`
    // still has its end). The other order could show a running answer as interrupted.
    let active = api.engine.active_attempt(id);
    let page = store.transcript_page(id, before, limit, active)?;
    Ok(http::json(
        200,
        &json!({"session": session_json(api, &session), "items": page.items, "more": page.more}),
    ))
}

fn context(api: &Api, id: SessionId) -> Result<Answer, ApiError> {
    let store = api.engine.store();
    let ctx = llm_context(&store.events_for_context(id)?);
    let tokens = api.estimator.context(&ctx);
    // Like `/v1/models`: the last known listing, or a bounded wait when none is known, so
    // a hung provider cannot hold this page.
    let (list, model) = known_models(api);
    // The turn's own budget, tool definitions included.
    let b = api
        .engine
        .context_budget(model.as_deref().unwrap_or_default(), &list);
    let messages: Vec<Value> = ctx
        .messages
        .iter()
        .zip(&tokens.messages)
        .map(|(m, t)| json!({"role": m.role, "content": m.content, "tokens": t}))
        .collect();
    Ok(http::json(
        200,
        &json!({
            "system": ctx.system,
            "messages": messages,
            "tokens": tokens.total,
            "window": b.window.tokens,
            "trigger_tokens": b.budget.trigger_tokens(),
            "tools_tokens": b.tools_tokens,
            "model": model,
        }),
    ))
}

/// `POST /v1/sessions/{id}/compact` (no body): compacts now, whatever the backoff.
fn compact(api: &Api, id: SessionId) -> Result<Answer, ApiError> {
    let report = api.engine.compact(id)?;
    Ok(http::json(200, &json!(report)))
}

fn events(api: &Api, id: SessionId, params: &HashMap<String, String>) -> Result<Answer, ApiError> {
    let after = number(params, "after_seq", 0, 0, MAX_SEQ)?;
    let limit = number(params, "limit", 500, 1, 1000)? as u32;
    let events = api.engine.store().events(id, after, Some(limit))?;
    let events: Vec<Value> = events
        .iter()
        .map(|e| {
            let payload = serde_json::from_str::<Value>(&e.payload)
                .unwrap_or(Value::String(e.payload.clone()));
            json!({"seq": e.seq, "kind": e.kind, "payload": payload, "created_at": e.created_at})
        })
        .collect();
    Ok(http::json(200, &json!({"events": events})))
}

fn search(api: &Api, params: &HashMap<String, String>) -> Result<Answer, ApiError> {
    let q = params.get("q").map(|q| q.trim()).unwrap_or_default();
    if q.is_empty() {
        return Err(ApiError::new(400, "bad_query", "the search is empty"));
    }
    let syntax = match params.get("syntax").map(String::as_str) {
        None | Some("plain") => Syntax::Plain,
        Some("fts") => Syntax::Fts,
        Some(_) => return Err(ApiError::bad_request("`syntax` must be plain or fts")),
    };
    let order = match params.get("order").map(String::as_str) {
        None | Some("relevance") => SearchOrder::Relevance,
        Some("recent") => SearchOrder::Recent,
        Some(_) => return Err(ApiError::bad_request("`order` must be relevance or recent")),
    };
    let stem = match params.get("stem").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("`stem` must be true or false")),
    };
    let hits = api.engine.store().search(&SearchQuery {
        text: q.to_owned(),
        syntax,
        limit: number(params, "limit", 20, 1, 100)? as u32,
        offset: number(params, "offset", 0, 0, 100_000)? as u32,
        order,
        stem,
    })?;
    let hits: Vec<Value> = hits.iter().map(views::hit).collect();
    Ok(http::json(200, &json!({"hits": hits})))
}

fn usage(api: &Api, params: &HashMap<String, String>) -> Result<Answer, ApiError> {
    let session = match params.get("session_id") {
        None => None,
        Some(s) => Some(
            s.parse::<SessionId>()
                .map_err(|_| ApiError::bad_request("`session_id` is not a session id"))?,
        ),
    };
    let report = api.engine.store().usage(session)?;
    let totals = |t: &crate::session::store::UsageTotals| {
        json!({
            "calls": t.calls, "input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
            "cache_read_tokens": t.cache_read_tokens, "cache_write_tokens": t.cache_write_tokens,
        })
    };
    let mut body = totals(&report.total);
    let by: Map<String, Value> = report
        .by_purpose
        .iter()
        .map(|(k, t)| (k.clone(), totals(t)))
        .collect();
    body["by_purpose"] = Value::Object(by);
    Ok(http::json(200, &body))
}
