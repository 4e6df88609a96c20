//! `brain sessions …`: history from the terminal.

use std::io::{IsTerminal, Write};

use serde_json::{Value, json, value::RawValue};

use super::{CliError, SessionsCommand};
use crate::session::store::{ListQuery, SearchHit, SearchQuery, Syntax};
use crate::session::{Event, SessionId, SessionRow, Store};

/// Sessions fetched per page while listing everything.
const LIST_PAGE_SIZE: u32 = 200;

pub fn run(store: &Store, cmd: SessionsCommand, out: &mut dyn Write) -> Result<(), CliError> {
    match cmd {
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
        SessionsCommand::Show { id, json } => show(store, id.parse()?, json, out),
        SessionsCommand::Search {
            query,
            fts,
            limit,
            offset,
            json,
        } => {
            let q = SearchQuery {
                text: query.join(" "),
                syntax: if fts { Syntax::Fts } else { Syntax::Plain },
                limit,
                offset,
            };
            search(store, &q, json, out)
        }
    }
}

/// The session's JSON shape, as the API has it (less `turn_active`, which only a running
/// server knows).
fn session_json(s: &SessionRow) -> Value {
    json!({
        "id": s.id.to_string(),
        "title": s.title,
        "archived": s.archived,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    })
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
        writeln!(out, "{}", Value::Array(all))?;
        return Ok(());
    }
    for s in &rows {
        writeln!(
            out,
            "{}  {}  {}{}",
            s.updated_at,
            s.id,
            s.title.as_deref().unwrap_or("(untitled)"),
            if s.archived { "  [archived]" } else { "" }
        )?;
    }
    Ok(())
}

fn show(store: &Store, id: SessionId, as_json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let session = store.session(id)?;
    let events = store.events(id, 0, None)?;
    if as_json {
        let events: Vec<Value> = events.iter().map(event_json).collect();
        let mut s = session_json(&session);
        s["system"] = json!(session.system);
        writeln!(out, "{}", json!({"session": s, "events": events}))?;
        return Ok(());
    }
    writeln!(
        out,
        "{}  {}{}",
        session.id,
        session.title.as_deref().unwrap_or("(untitled)"),
        if session.archived { "  [archived]" } else { "" }
    )?;
    writeln!(
        out,
        "created {}, updated {}\n",
        session.created_at, session.updated_at
    )?;
    for e in &events {
        writeln!(
            out,
            "#{:<5} {}  {:<18} {}",
            e.seq, e.created_at, e.kind, e.payload
        )?;
    }
    Ok(())
}

/// An event with its payload embedded as the JSON it is (byte for byte).
fn event_json(e: &Event) -> Value {
    let payload = RawValue::from_string(e.payload.clone())
        .ok()
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
        .unwrap_or_else(|| Value::String(e.payload.clone()));
    json!({"seq": e.seq, "kind": e.kind, "payload": payload, "created_at": e.created_at})
}

fn search(
    store: &Store,
    q: &SearchQuery,
    as_json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let hits = store.search(q)?;
    if as_json {
        let all: Vec<Value> = hits.iter().map(hit_json).collect();
        writeln!(out, "{}", json!({"hits": all}))?;
        return Ok(());
    }
    let bold = std::io::stdout().is_terminal();
    for h in &hits {
        writeln!(
            out,
            "{}  #{} {}  {}\n    {}",
            h.session_id,
            h.seq,
            h.kind,
            h.title.as_deref().unwrap_or("(untitled)"),
            marked_snippet(h, bold)
        )?;
    }
    if hits.is_empty() {
        writeln!(out, "no matches")?;
    }
    Ok(())
}

fn hit_json(h: &SearchHit) -> Value {
    json!({
        "session_id": h.session_id.to_string(),
        "title": h.title,
        "seq": h.seq,
        "kind": h.kind,
        "snippet": h.snippet,
        "highlights": h.highlights,
        "created_at": h.created_at,
    })
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
        out.push(if c == '\n' { ' ' } else { c });
        if h.highlights.iter().any(|r| r[1] == i + 1) {
            out.push_str(close);
        }
    }
    out
}
