//! `brain sessions export`: JSONL is every event of every session, byte for byte (unknown
//! kinds and unreadable payloads included), so importing it into a fresh database
//! (`crate::import::brain`) gives the same transcripts, contexts and search results;
//! Markdown is the transcript, for people.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::value::RawValue;

use super::CliError;
use super::term::printable;
use crate::import::brain::Line;
use crate::session::projection::{Item, ItemBody, ui_transcript};
use crate::session::{SessionId, Store};

/// Opens the export's `--output` file: a new one, or with `force` an existing one
/// replaced, but never the database itself or its `-wal`, `-shm` and `.lock` files,
/// however the path is spelled (links and `..` included).
pub fn create_output(path: &Path, force: bool, db: &Path) -> Result<File, CliError> {
    let refused = |why| CliError::OutputRefused {
        path: path.to_owned(),
        why,
    };
    if is_database_file(path, db) {
        return Err(refused("it is the database or one of its own files"));
    }
    let mut options = OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        // Atomic: no window between "it does not exist" and creating it.
        options.create_new(true);
    }
    options.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => refused("it exists (add --force to replace it)"),
        _ => CliError::Output(e),
    })
}

/// Whether `path` names the database at `db` or one of its companion files.
fn is_database_file(path: &Path, db: &Path) -> bool {
    let Some(target) = canonical(path) else {
        return false;
    };
    let Some(db) = canonical(db) else {
        return false;
    };
    let companions = ["", "-wal", "-shm", ".lock"].map(|suffix| {
        let mut name = db.clone().into_os_string();
        name.push(suffix);
        PathBuf::from(name)
    });
    companions
        .iter()
        .any(|c| *c == target || same_file(c, &target))
}

/// The canonical form of a path that may not exist yet (its directory must).
fn canonical(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let name = path.file_name()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.canonicalize().ok()?,
        _ => std::env::current_dir().ok()?,
    };
    Some(dir.join(name))
}

/// Two existing paths to one file (a hard link).
#[cfg(unix)]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_a: &Path, _b: &Path) -> bool {
    false
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
            // Embedded only when the JSON text round-trips to the same bytes (RawValue trims
            // surrounding whitespace); anything else travels as `payload_text`.
            let embedded = if e.payload.contains(['\n', '\r']) {
                None
            } else {
                serde_json::from_str::<&RawValue>(&e.payload)
                    .ok()
                    .filter(|raw| raw.get() == e.payload)
            };
            let line = Line {
                session_id: id.to_string(),
                seq: e.seq,
                kind: e.kind.clone(),
                payload: embedded,
                payload_text: embedded.is_none().then(|| e.payload.clone()),
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
    for item in ui_transcript(&store.events(id, 0, None)?, None) {
        write_markdown_item(&item, out)?;
    }
    Ok(())
}

/// One transcript item as Markdown: who or what, when, and its text.
fn write_markdown_item(item: &Item, out: &mut dyn Write) -> Result<(), CliError> {
    let at = &item.created_at;
    match &item.body {
        ItemBody::User { text } => writeln!(out, "**You** · {at}\n\n{text}\n")?,
        ItemBody::Assistant { model, .. } => writeln!(
            out,
            "**Assistant** ({model}) · {at}\n\n{}\n",
            item.body.shown_text().unwrap_or_default()
        )?,
        ItemBody::Interrupted { .. } => writeln!(
            out,
            "**Assistant, interrupted** · {at}\n\n{}\n\n_(the answer was cut off here)_\n",
            item.body.shown_text().unwrap_or_default()
        )?,
        ItemBody::Streaming { .. } => writeln!(
            out,
            "**Assistant, still answering** · {at}\n\n{}\n\n_(the answer so far)_\n",
            item.body.shown_text().unwrap_or_default()
        )?,
        // A step's text before the tool calls it made.
        ItemBody::Step { text, .. } => writeln!(out, "**Assistant** · {at}\n\n{text}\n")?,
        ItemBody::Error { code, message, .. } => {
            writeln!(out, "_Failed ({code}): {message}_ · {at}\n")?
        }
        ItemBody::Compaction {
            summary,
            replaces_through_seq,
            tokens_before,
            tokens_after,
            method,
        } => writeln!(
            out,
            "---\n\n_Compacted: everything through #{replaces_through_seq} {} \
             ({tokens_before} → {tokens_after} tokens):_\n\n{}\n\n---\n",
            compacted_how(method),
            quote(summary)
        )?,
        ItemBody::Title { title, .. } => writeln!(out, "_Renamed to “{title}”_ · {at}\n")?,
        ItemBody::Tool(t) => writeln!(
            out,
            "_Tool {} ({}): {}_ · {at}\n",
            t.name, t.call_id, t.status
        )?,
        ItemBody::Permission {
            name, decision, by, ..
        } => writeln!(
            out,
            "_Permission for {name}: {}_ · {at}\n",
            match (decision, by) {
                (Some(d), Some(by)) => super::decided_words(d, by),
                _ => "not answered".to_owned(),
            }
        )?,
        ItemBody::Rewind { edited_seq, .. } => writeln!(
            out,
            "_Edited message #{edited_seq}; the earlier version and what followed it \
             are kept above as an abandoned branch_ · {at}\n"
        )?,
        ItemBody::Unreadable { event_kind } => {
            writeln!(out, "_An unreadable {event_kind} event_ · {at}\n")?
        }
    }
    Ok(())
}

/// What a compaction did, in words: summarised, or condensed to a digest.
fn compacted_how(method: &str) -> String {
    if method == crate::session::events::method::LLM {
        "summarised".to_owned()
    } else {
        format!("condensed to an {method} digest")
    }
}

/// `text` as a Markdown quote, line by line.
fn quote(text: &str) -> String {
    text.lines()
        .map(|l| format!("> {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
