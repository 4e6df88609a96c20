//! `brain sessions export` and `import`: JSONL is every event of every session, byte for
//! byte (unknown kinds and unreadable payloads included), so importing it into a fresh
//! database gives the same transcripts, contexts and search results; Markdown is the
//! transcript, for people.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::CliError;
use super::term::printable;
use crate::session::projection::{ItemBody, ui_transcript};
use crate::session::{Event, SessionId, Store};

/// One line of an export.
#[derive(Serialize, Deserialize)]
struct Line<'a> {
    session_id: String,
    seq: u64,
    kind: String,
    #[serde(borrow)]
    payload: &'a RawValue,
    created_at: String,
}

/// Which sessions to export.
pub enum Which {
    One(SessionId),
    All,
}

fn sessions(store: &Store, which: &Which) -> Result<Vec<SessionId>, CliError> {
    Ok(match which {
        Which::One(id) => {
            store.session(*id)?;
            vec![*id]
        }
        Which::All => store.session_ids()?,
    })
}

pub fn export_jsonl(store: &Store, which: &Which, out: &mut dyn Write) -> Result<(), CliError> {
    for id in sessions(store, which)? {
        for e in store.events(id, 0, None)? {
            // A payload spread over lines (never written by brain) is compacted so the
            // export stays one event per line.
            let text = if e.payload.contains(['\n', '\r']) {
                serde_json::from_str::<serde_json::Value>(&e.payload)
                    .map_or_else(|_| e.payload.replace(['\n', '\r'], " "), |v| v.to_string())
            } else {
                e.payload.clone()
            };
            let raw = RawValue::from_string(text)
                .map_err(|err| CliError::Serve(format!("session {id} #{}: {err}", e.seq)))?;
            let line = Line {
                session_id: id.to_string(),
                seq: e.seq,
                kind: e.kind.clone(),
                payload: &raw,
                created_at: e.created_at.clone(),
            };
            let json =
                serde_json::to_string(&line).map_err(|err| CliError::Serve(err.to_string()))?;
            writeln!(out, "{json}")?;
        }
    }
    Ok(())
}

pub fn export_markdown(store: &Store, which: &Which, out: &mut dyn Write) -> Result<(), CliError> {
    for id in sessions(store, which)? {
        // A transcript for people: control characters made visible, as on a terminal.
        let mut text = Vec::new();
        write_markdown(store, id, &mut text)?;
        out.write_all(printable(&String::from_utf8_lossy(&text)).as_bytes())?;
    }
    Ok(())
}

fn write_markdown(store: &Store, id: SessionId, out: &mut dyn Write) -> Result<(), CliError> {
    let s = store.session(id)?;
    writeln!(
        out,
        "# {}\n",
        s.title.as_deref().unwrap_or("Untitled session")
    )?;
    writeln!(
        out,
        "_Session {id}, created {}, updated {}._\n",
        s.created_at, s.updated_at
    )?;
    for item in ui_transcript(&store.events(id, 0, None)?) {
        let at = &item.created_at;
        let quote = |t: &str| {
            t.lines()
                .map(|l| format!("> {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        match &item.body {
            ItemBody::User { text } => writeln!(out, "**You** · {at}\n\n{text}\n")?,
            ItemBody::Assistant { text, model, .. } => {
                writeln!(out, "**Assistant** ({model}) · {at}\n\n{text}\n")?
            }
            ItemBody::Interrupted { text, .. } => writeln!(
                out,
                "**Assistant, interrupted** · {at}\n\n{text}\n\n_(the answer was cut off here)_\n"
            )?,
            ItemBody::Error { code, message, .. } => {
                writeln!(out, "_Failed ({code}): {message}_ · {at}\n")?
            }
            ItemBody::Compaction {
                summary,
                replaces_through_seq,
                tokens_before,
                tokens_after,
            } => writeln!(
                out,
                "---\n\n_Compacted: everything through #{replaces_through_seq} summarised \
                     ({tokens_before} → {tokens_after} tokens):_\n\n{}\n\n---\n",
                quote(summary)
            )?,
            ItemBody::Title { title, .. } => writeln!(out, "_Renamed to “{title}”_ · {at}\n")?,
            ItemBody::Tool(t) => writeln!(
                out,
                "_Tool {} ({}): {}_ · {at}\n",
                t.name, t.call_id, t.status
            )?,
            ItemBody::Unreadable { event_kind } => {
                writeln!(out, "_An unreadable {event_kind} event_ · {at}\n")?
            }
        }
    }
    Ok(())
}

/// Reads a whole JSONL export, checking every line before anything is written: a bad line
/// is reported with its number and nothing is imported.
pub fn read_jsonl(input: &mut dyn BufRead) -> Result<BTreeMap<SessionId, Vec<Event>>, CliError> {
    let mut sessions: BTreeMap<SessionId, Vec<Event>> = BTreeMap::new();
    let mut text = String::new();
    let mut n = 0usize;
    loop {
        text.clear();
        n += 1;
        let read = input
            .read_line(&mut text)
            .map_err(|e| CliError::Import(n, e.to_string()))?;
        if read == 0 {
            break;
        }
        if text.trim().is_empty() {
            continue;
        }
        let line: Line<'_> = serde_json::from_str(text.trim_end())
            .map_err(|e| CliError::Import(n, e.to_string()))?;
        let id: SessionId = line.session_id.parse().map_err(|_| {
            CliError::Import(n, format!("{:?} is not a session id", line.session_id))
        })?;
        if !line.payload.get().starts_with('{') {
            return Err(CliError::Import(
                n,
                "the payload is not a JSON object".into(),
            ));
        }
        if crate::clock::parse_timestamp(&line.created_at).is_none() {
            return Err(CliError::Import(
                n,
                format!("{:?} is not a timestamp", line.created_at),
            ));
        }
        let events = sessions.entry(id).or_default();
        if line.seq != events.len() as u64 + 1 {
            return Err(CliError::Import(
                n,
                format!("seq {} of session {id} is out of order", line.seq),
            ));
        }
        events.push(Event {
            seq: line.seq,
            kind: line.kind,
            payload: line.payload.get().to_owned(),
            created_at: line.created_at,
        });
    }
    Ok(sessions)
}

/// Imports every session of an export in one transaction: all of it, or nothing.
pub fn import(
    store: &Store,
    sessions: &BTreeMap<SessionId, Vec<Event>>,
) -> Result<(usize, usize), CliError> {
    store.write(|w| {
        for (id, events) in sessions {
            w.import_session(*id, events)?;
        }
        Ok(())
    })?;
    Ok((sessions.len(), sessions.values().map(Vec::len).sum()))
}
