//! `brain sessions …`: history from the terminal.

mod show;

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::term::{json_text, printable, push_printable};
use super::{CliError, ExportFormat, ProviderArgs, SessionsCommand, ToolsArgs, transfer};
use crate::api::views;
use crate::chat::compact::CompactReport;
use crate::chat::engine::{Engine, EngineError};
use crate::provider::Provider;
use crate::session::events::method;
use crate::session::store::{ListQuery, SearchHit, SearchOrder, SearchQuery, Syntax};
use crate::session::{SessionId, SessionRow, Store};

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
        } => export(store, id, format, output.as_deref(), force, out),
        SessionsCommand::Import { file, from, .. } => super::import::run(store, &file, from, out),
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
                (true, _) => show::show_llm(store, id, json, out),
                (false, true) => show::show_events(store, id, json, out),
                (false, false) => show::show_transcript(store, id, json, out),
            }
        }
        SessionsCommand::Search {
            query,
            fts,
            limit,
            offset,
            recent,
            stem,
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
                stem,
            };
            search(store, &q, json, out)
        }
    }
}

/// `brain sessions export`: one session (`id`) or all of them, to `output` or `out`.
fn export(
    store: &Store,
    id: Option<String>,
    format: ExportFormat,
    output: Option<&std::path::Path>,
    force: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let which = match id {
        Some(id) => transfer::Which::One(id.parse()?),
        None => transfer::Which::All,
    };
    let mut file;
    let sink: &mut dyn Write = match output {
        Some(path) => {
            file = std::io::BufWriter::new(transfer::create_output(path, force, store.path())?);
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
        for copy in &h.also_in {
            writeln!(
                out,
                "    also in {}  {}",
                copy.session_id,
                printable(copy.title.as_deref().unwrap_or("(untitled)"))
            )?;
        }
    }
    if hits.is_empty() {
        writeln!(out, "no matches")?;
    }
    Ok(())
}

/// The snippet on one line with its highlights shown: bold and reverse video on a
/// terminal; in a pipe `⟦…⟧`, which markdown gives no meaning (`**…**` read as the
/// text's own bold).
fn marked_snippet(h: &SearchHit, terminal: bool) -> String {
    let (open, close) = if terminal {
        ("\x1b[1;7m", "\x1b[0m")
    } else {
        ("⟦", "⟧")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highlights_are_terminal_attributes_or_brackets_never_markdown() {
        let hit = SearchHit {
            session_id: SessionId::generate(),
            title: None,
            seq: 2,
            kind: "user_message".into(),
            snippet: "a C++ book\nand more".into(),
            highlights: vec![[2, 5]],
            created_at: String::new(),
            abandoned: false,
            also_in: vec![],
        };
        assert_eq!(
            marked_snippet(&hit, true),
            "a \x1b[1;7mC++\x1b[0m book and more"
        );
        assert_eq!(marked_snippet(&hit, false), "a ⟦C++⟧ book and more");
    }
}
