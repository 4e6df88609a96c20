//! `brain sessions …`: history from the terminal.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::term::{count, json_text, printable, push_printable};
use super::{
    CliError, ExportFormat, ProviderArgs, SessionsCommand, ToolsArgs, decided_words, transfer,
};
use crate::api::views;
use crate::chat::compact::CompactReport;
use crate::chat::engine::{Engine, EngineError};
use crate::provider::Provider;
use crate::session::events::method;
use crate::session::projection::{Item, ItemBody, Role, llm_context, ui_transcript};
use crate::session::store::{ListQuery, SearchHit, SearchOrder, SearchQuery, Syntax};
use crate::session::{SessionId, SessionRow, Store};
use crate::tokens::Estimator;

/// Sessions fetched per page while listing everything.
const LIST_PAGE_SIZE: u32 = 200;

/// Runs `cmd` on `store`, the database `db` names.
pub fn run(
    store: Store,
    db: &std::path::Path,
    cmd: SessionsCommand,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let shared = Arc::new(store);
    let store = shared.as_ref();
    match cmd {
        SessionsCommand::Compact {
            id,
            provider,
            tools,
            ..
        } => compact(&shared, db, id.parse()?, (&provider, &tools), out),
        SessionsCommand::Fork { id, at, json, .. } => {
            super::fork::in_process(store, db, id.parse()?, at, json, out)
        }
        SessionsCommand::Export {
            id,
            all: _,
            format,
            output,
            force,
        } => {
            let which = match id {
                Some(id) => transfer::Which::One(id.parse()?),
                None => transfer::Which::All,
            };
            let mut file;
            let sink: &mut dyn Write = match &output {
                Some(path) => {
                    file = std::io::BufWriter::new(transfer::create_output(
                        path,
                        force,
                        store.path(),
                    )?);
                    &mut file
                }
                None => out,
            };
            match format {
                ExportFormat::Jsonl => transfer::export_jsonl(store, &which, sink)?,
                ExportFormat::Markdown => transfer::export_markdown(store, &which, sink)?,
            }
            Ok(sink.flush()?)
        }
        SessionsCommand::Import { file, from } => super::import::run(store, &file, from, out),
        SessionsCommand::List {
            query,
            archived,
            limit,
            json,
        } => {
            let q = ListQuery {
                before: None,
                limit: 0,
                archived: archived.map(Into::into),
                query,
            };
            list(store, q, limit, json, out)
        }
        SessionsCommand::Show {
            id,
            llm,
            events,
            json,
        } => {
            let id = id.parse()?;
            match (llm, events) {
                (true, _) => show_llm(store, id, json, out),
                (false, true) => show_events(store, id, json, out),
                (false, false) => show_transcript(store, id, json, out),
            }
        }
        SessionsCommand::Search {
            query,
            fts,
            limit,
            offset,
            recent,
            json,
        } => {
            let q = SearchQuery {
                text: query.join(" "),
                syntax: if fts { Syntax::Fts } else { Syntax::Plain },
                limit,
                offset,
                order: if recent {
                    SearchOrder::Recent
                } else {
                    SearchOrder::Relevance
                },
            };
            search(store, &q, json, out)
        }
    }
}

/// The session's JSON shape, as the API has it (less `turn_active`, which only a running
/// server knows).
fn session_json(s: &SessionRow) -> Value {
    views::session(s, None)
}

fn list(
    store: &Store,
    mut q: ListQuery,
    limit: Option<u32>,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let mut left = limit.unwrap_or(u32::MAX);
    let mut rows = Vec::new();
    while left > 0 {
        q.limit = left.min(LIST_PAGE_SIZE);
        let page = store.list_sessions(&q)?;
        left -= page.sessions.len() as u32;
        rows.extend(page.sessions);
        match page.next {
            Some(next) => q.before = Some(next),
            None => break,
        }
    }
    if as_json {
        let all: Vec<Value> = rows.iter().map(session_json).collect();
        writeln!(out, "{}", json_text(&Value::Array(all)))?;
        return Ok(());
    }
    for s in &rows {
        writeln!(
            out,
            "{}  {}  {}{}",
            s.updated_at,
            s.id,
            printable(s.title.as_deref().unwrap_or("(untitled)")),
            if s.archived { "  [archived]" } else { "" }
        )?;
    }
    Ok(())
}

fn session_header(session: &SessionRow, out: &mut dyn Write) -> Result<(), CliError> {
    writeln!(
        out,
        "{}  {}{}",
        session.id,
        printable(session.title.as_deref().unwrap_or("(untitled)")),
        if session.archived { "  [archived]" } else { "" }
    )?;
    writeln!(
        out,
        "created {}, updated {}\n",
        session.created_at, session.updated_at
    )?;
    Ok(())
}

fn show_transcript(
    store: &Store,
    id: SessionId,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let session = store.session(id)?;
    let items = ui_transcript(&store.events(id, 0, None)?, None);
    if as_json {
        let items = serde_json::to_value(&items).unwrap_or(Value::Null);
        writeln!(
            out,
            "{}",
            json_text(&json!({"session": session_json(&session), "items": items}))
        )?;
        return Ok(());
    }
    session_header(&session, out)?;
    for item in &items {
        write_item(item, out)?;
    }
    Ok(())
}

/// One transcript item as text: a header line, then its text indented.
fn write_item(item: &Item, out: &mut dyn Write) -> Result<(), CliError> {
    let at = &item.created_at;
    let (head, body): (String, Option<&str>) = match &item.body {
        ItemBody::User { text } => ("you".into(), Some(text)),
        ItemBody::Assistant {
            turn,
            attempt,
            text,
            model,
            usage,
            duration_ms,
            finish_reason,
            ..
        } => (
            format!(
                "assistant (turn {turn}, attempt {attempt}; {model}; {} in, {} cached, {} out; \
                 {duration_ms} ms; {})",
                usage.input_tokens,
                usage.cache_read_tokens,
                usage.output_tokens,
                finish_reason.as_deref().unwrap_or("no finish reason")
            ),
            Some(text),
        ),
        ItemBody::Interrupted {
            turn,
            attempt,
            text,
            ended,
            ..
        } => {
            let why = match ended.as_ref().map(|e| (e.code.as_str(), e)) {
                None => "brain stopped before the answer finished".to_owned(),
                Some(("stopped", _)) => "stopped by the user".to_owned(),
                Some(("shutdown", _)) => "the server stopped while answering".to_owned(),
                Some((code, e)) => format!("cut off ({code}: {})", e.message),
            };
            (
                format!("interrupted (turn {turn}, attempt {attempt}): {why}"),
                Some(text),
            )
        }
        ItemBody::Streaming {
            turn,
            attempt,
            text,
            ..
        } => (
            format!("answering (turn {turn}, attempt {attempt}): the answer so far"),
            Some(text),
        ),
        ItemBody::Error {
            turn,
            attempt,
            code,
            message,
            ..
        } => (
            format!("failed (turn {turn}, attempt {attempt}): {code}: {message}"),
            None,
        ),
        ItemBody::Compaction {
            summary,
            replaces_through_seq,
            tokens_before,
            tokens_after,
            method: how,
        } => {
            let done = if how == method::LLM {
                "summarised".to_owned()
            } else {
                format!("condensed to an {how} digest (no summary could be written)")
            };
            (
                format!(
                    "── compacted: #{replaces_through_seq} and before {done}, \
                     {tokens_before} → {tokens_after} tokens ──"
                ),
                Some(summary),
            )
        }
        ItemBody::Title { title, by } => (format!("renamed to {title:?} ({by:?})"), None),
        ItemBody::Tool(t) => (
            format!(
                "tool {} ({}, step {}): {}, {} ms{}",
                t.name,
                t.call_id,
                t.step,
                t.status,
                t.duration_ms,
                t.error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
            Some(&t.result_digest.preview),
        ),
        ItemBody::Permission {
            call_id,
            name,
            decision,
            by,
            ..
        } => (
            match (decision, by) {
                (Some(d), Some(by)) => {
                    format!(
                        "permission for {name} ({call_id}): {}",
                        decided_words(d, by)
                    )
                }
                _ => format!("permission for {name} ({call_id}): waiting for an answer"),
            },
            None,
        ),
        ItemBody::Rewind { to_seq, edited_seq } => (
            format!("── edited #{edited_seq}: the conversation goes on from #{to_seq} ──"),
            None,
        ),
        ItemBody::Unreadable { event_kind } => (format!("unreadable {event_kind} event"), None),
    };
    // An earlier version stays in the history, marked (SPEC §14).
    let head = if item.abandoned {
        format!("[earlier version] {head}")
    } else {
        head
    };
    // The head quotes titles, models and error messages: untrusted too.
    writeln!(out, "#{} {at}  {}", item.seq, printable(&head))?;
    if let Some(text) = body {
        for line in printable(text).lines() {
            writeln!(out, "    {line}")?;
        }
    }
    writeln!(out)?;
    Ok(())
}

fn show_llm(
    store: &Store,
    id: SessionId,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let session = store.session(id)?;
    let ctx = llm_context(&store.events_for_context(id)?);
    let tokens = Estimator::new().context(&ctx);
    if as_json {
        let messages: Vec<Value> = ctx
            .messages
            .iter()
            .zip(&tokens.messages)
            .map(|(m, t)| {
                json!({"role": m.role, "content": m.content, "tokens": t,
                                 "first_seq": m.first_seq, "last_seq": m.last_seq})
            })
            .collect();
        writeln!(
            out,
            "{}",
            json_text(
                &json!({"system": ctx.system, "system_tokens": tokens.system,
                   "messages": messages, "tokens": tokens.total})
            )
        )?;
        return Ok(());
    }
    session_header(&session, out)?;
    writeln!(out, "system ({})", count(tokens.system, "token"))?;
    for line in printable(&ctx.system).lines() {
        writeln!(out, "    {line}")?;
    }
    for (m, t) in ctx.messages.iter().zip(&tokens.messages) {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        writeln!(
            out,
            "\n{role} (#{}..#{}, {})",
            m.first_seq,
            m.last_seq,
            count(*t, "token")
        )?;
        for line in printable(&m.content).lines() {
            writeln!(out, "    {line}")?;
        }
    }
    writeln!(out, "\ntotal: {}", count(tokens.total, "token"))?;
    Ok(())
}

fn show_events(
    store: &Store,
    id: SessionId,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let session = store.session(id)?;
    let events = store.events(id, 0, None)?;
    if as_json {
        let events: Vec<Value> = events.iter().map(views::event).collect();
        let mut s = session_json(&session);
        s["system"] = json!(session.system);
        writeln!(
            out,
            "{}",
            json_text(&json!({"session": s, "events": events}))
        )?;
        return Ok(());
    }
    session_header(&session, out)?;
    for e in &events {
        writeln!(
            out,
            "#{:<5} {}  {:<18} {}",
            e.seq,
            printable(&e.created_at),
            printable(&e.kind),
            printable(&e.payload)
        )?;
    }
    Ok(())
}

fn search(
    store: &Store,
    q: &SearchQuery,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let hits = store.search(q)?;
    if as_json {
        let all: Vec<Value> = hits.iter().map(views::hit).collect();
        writeln!(out, "{}", json_text(&json!({"hits": all})))?;
        return Ok(());
    }
    let bold = std::io::stdout().is_terminal();
    for h in &hits {
        writeln!(
            out,
            "{}  #{} {}{}  {}\n    {}",
            h.session_id,
            h.seq,
            crate::session::search::label(&h.kind),
            if h.abandoned {
                " (earlier version)"
            } else {
                ""
            },
            printable(h.title.as_deref().unwrap_or("(untitled)")),
            marked_snippet(h, bold)
        )?;
    }
    if hits.is_empty() {
        writeln!(out, "no matches")?;
    }
    Ok(())
}

/// The snippet on one line with its highlights shown: bold on a terminal, `**…**` in a
/// pipe.
fn marked_snippet(h: &SearchHit, bold: bool) -> String {
    let (open, close) = if bold {
        ("\x1b[1m", "\x1b[0m")
    } else {
        ("**", "**")
    };
    let mut out = String::new();
    for (i, c) in h.snippet.chars().enumerate() {
        if h.highlights.iter().any(|r| r[0] == i) {
            out.push_str(open);
        }
        push_printable(&mut out, if c == '\n' { ' ' } else { c });
        if h.highlights.iter().any(|r| r[1] == i + 1) {
            out.push_str(close);
        }
    }
    out
}

/// `brain sessions compact ID` in-process: one compaction pass now, whatever the
/// session's size and backoff (the engine's compaction by hand).
/// On PostgreSQL it claims the session like a server would, so it never compacts under an
/// attempt another server runs (409 `turn_in_flight` then, as the server's route says).
/// The tools count in the budget as in a turn's (`chat::budget`), so it compacts with the
/// trigger a server with the same settings reports.
fn compact(
    store: &Arc<Store>,
    db: &std::path::Path,
    id: SessionId,
    (args, tools): (&ProviderArgs, &ToolsArgs),
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let provider = Arc::new(Provider::new(args.provider_config()));
    let settings = args.engine_settings();
    // As `serve`: the stdio servers' process groups are recorded beside the database.
    let links = crate::tools::mcp::LinkOptions {
        groups: super::tools::server_groups(db),
        ..crate::tools::mcp::LinkOptions::for_results(settings.tool_limits.max_tool_result_bytes)
    };
    let tools = Arc::new(tools.start(Some(Arc::clone(store)), links)?);
    let engine = Engine::coordinated(
        Arc::clone(store),
        provider,
        settings,
        Arc::clone(&tools),
        super::coordinator(db)?,
    );
    let report = engine.compact(id).map_err(|e| match e {
        EngineError::Store(s) => CliError::Store(s),
        other => CliError::Serve(other.to_string()),
    });
    tools.shutdown();
    print_compaction(id, &report?, out)
}

/// How long `brain sessions compact` waits for the server: its compaction deadline and
/// some slack.
const COMPACT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// `brain sessions compact ID` through the server that holds the database
/// (`POST /v1/sessions/{id}/compact`).
pub fn compact_on_server(
    url: &str,
    id: &str,
    token: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let id: SessionId = id.parse()?;
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(COMPACT_REQUEST_TIMEOUT))
        .build()
        .new_agent();
    let address = format!("{}/v1/sessions/{id}/compact", url.trim_end_matches('/'));
    let mut request = agent.post(&address);
    if let Some(t) = token {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let unreachable = |e: &dyn std::fmt::Display| {
        CliError::Serve(format!(
            "the brain server at {url} holds the database, but: {e}"
        ))
    };
    let resp = request.send_empty().map_err(|e| unreachable(&e))?;
    let status = resp.status().as_u16();
    let text = resp
        .into_body()
        .read_to_string()
        .map_err(|e| unreachable(&e))?;
    if status != 200 {
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let message = body["message"].as_str().unwrap_or("it refused").to_owned();
        return Err(CliError::Serve(format!("the server at {url}: {message}")));
    }
    let report: CompactReport = serde_json::from_str(&text)
        .map_err(|e| unreachable(&format!("an unexpected answer ({e})")))?;
    print_compaction(id, &report, out)
}

fn print_compaction(id: SessionId, r: &CompactReport, out: &mut dyn Write) -> Result<(), CliError> {
    let (before, after) = (r.tokens_before, r.tokens_after);
    let budget = format!(
        "window {} from {}, trigger {}",
        r.window, r.window_source, r.trigger_tokens
    );
    if r.compacted {
        // An extractive digest says so: the summarizer failed and a digest stands in.
        let how = match r.method.as_deref() {
            Some(m) if m != method::LLM => format!(", {m} digest"),
            _ => String::new(),
        };
        writeln!(
            out,
            "compacted {id}: {before} → {after} tokens ({budget}{how})"
        )?;
    } else {
        writeln!(
            out,
            "{id} was not compacted (too few messages, or another compaction landed first): {after} tokens ({budget})"
        )?;
    }
    Ok(())
}
