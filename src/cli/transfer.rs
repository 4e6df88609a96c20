//! `brain sessions export` and `import`: JSONL is every event of every session, byte for
//! byte (unknown kinds and unreadable payloads included), so importing it into a fresh
//! database gives the same transcripts, contexts and search results; Markdown is the
//! transcript, for people.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::CliError;
use super::term::printable;
use crate::session::projection::{Item, ItemBody, ui_transcript};
use crate::session::{Decoded, Event, Payload, SessionId, Store, StoreError};

/// One line of an export.
#[derive(Serialize, Deserialize)]
struct Line<'a> {
    session_id: String,
    seq: u64,
    kind: String,
    /// The payload's JSON text, embedded as it is stored.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    payload: Option<&'a RawValue>,
    /// The payload's exact text as a JSON string, instead of `payload`, when embedding it
    /// would break the line (it spans lines: a pretty-printed payload from an older import)
    /// or it is not JSON at all: either way its bytes come back unchanged on import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_text: Option<String>,
    created_at: String,
}

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

/// The longest line an import reads: an event's payload (an answer may be up to
/// `MAX_ANSWER_BYTES`) with room for its JSON escaping.
pub const MAX_IMPORT_LINE_BYTES: usize = 4 * crate::config::MAX_ANSWER_BYTES;

/// One session read from an export.
pub struct ImportedSession {
    /// The line of its first event, named when the session as a whole is refused.
    pub first_line: usize,
    pub events: Vec<Event>,
}

/// Reads a whole JSONL export, checking every line before anything is written: a bad line
/// is reported with its number and nothing is imported. Timestamps are normalised to
/// SPEC §3's form (UTC, six fractional digits, `Z`) so text order stays time order.
pub fn read_jsonl(
    input: &mut dyn BufRead,
) -> Result<BTreeMap<SessionId, ImportedSession>, CliError> {
    read_jsonl_within(input, MAX_IMPORT_LINE_BYTES)
}

fn read_jsonl_within(
    input: &mut dyn BufRead,
    max_line_bytes: usize,
) -> Result<BTreeMap<SessionId, ImportedSession>, CliError> {
    let mut sessions: BTreeMap<SessionId, ImportedSession> = BTreeMap::new();
    let mut text = String::new();
    let mut n = 0usize;
    loop {
        text.clear();
        n += 1;
        // A line is read no further than the limit: a file that lies about its size
        // cannot make the import hold gigabytes.
        let read = Read::take(&mut *input, max_line_bytes as u64 + 1)
            .read_line(&mut text)
            .map_err(|e| CliError::Import(n, e.to_string()))?;
        if read == 0 {
            break;
        }
        if read > max_line_bytes {
            return Err(CliError::Import(
                n,
                format!("the line is longer than {max_line_bytes} bytes"),
            ));
        }
        if text.trim().is_empty() {
            continue;
        }
        let (id, event) = read_line(text.trim_end()).map_err(|why| CliError::Import(n, why))?;
        let session = sessions.entry(id).or_insert(ImportedSession {
            first_line: n,
            events: Vec::new(),
        });
        if event.seq != session.events.len() as u64 + 1 {
            return Err(CliError::Import(
                n,
                format!("seq {} of session {id} is out of order", event.seq),
            ));
        }
        if event.seq == 1 {
            check_start(&event)
                .map_err(|why| CliError::Import(n, format!("session {id}: {why}")))?;
        } else if event.kind == crate::session::events::kind::SESSION_STARTED {
            return Err(CliError::Import(
                n,
                format!("session {id} starts a second time at seq {}", event.seq),
            ));
        }
        session.events.push(event);
    }
    Ok(sessions)
}

/// One line as an event of a session, or why it is not one.
fn read_line(text: &str) -> Result<(SessionId, Event), String> {
    let line: Line<'_> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let id: SessionId = line
        .session_id
        .parse()
        .map_err(|_| format!("{:?} is not a session id", line.session_id))?;
    let payload = match (line.payload, line.payload_text) {
        (Some(raw), None) => raw.get().to_owned(),
        (None, Some(text)) => text,
        _ => return Err("a line needs exactly one of `payload` and `payload_text`".into()),
    };
    let is_object = serde_json::from_str::<&RawValue>(&payload)
        .is_ok_and(|raw| raw.get().trim_start().starts_with('{'));
    if !is_object {
        return Err("the payload is not a JSON object".into());
    }
    let created_at = crate::clock::parse_timestamp(&line.created_at)
        .map(crate::clock::format_timestamp)
        .ok_or_else(|| {
            format!(
                "{:?} is not an RFC 3339 timestamp (like 2026-11-30T04:17:26.123456Z)",
                line.created_at
            )
        })?;
    let event = Event {
        seq: line.seq,
        kind: line.kind,
        payload,
        created_at,
    };
    Ok((id, event))
}

/// A session must begin with a readable `session_started`: it gives the session its
/// system prompt.
fn check_start(first: &Event) -> Result<(), String> {
    match first.decode() {
        Decoded::Known(Payload::SessionStarted(_)) => Ok(()),
        Decoded::Unreadable(why) if first.kind == crate::session::events::kind::SESSION_STARTED => {
            Err(format!("its session_started payload is unreadable: {why}"))
        }
        _ => Err(format!(
            "it begins with {:?}, not session_started",
            first.kind
        )),
    }
}

/// Imports every session of an export in one transaction: all of it, or nothing. A
/// refusal names the line of the session it is about.
/// What importing this project's JSONL did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BrainImport {
    pub created: usize,
    /// Sessions already here whose log the file continues: only the new events appended.
    pub extended: usize,
    /// Sessions already here as the file has them (or further along: kept chatting).
    pub unchanged: usize,
    /// Events written.
    pub events: usize,
}

/// Imports every session of the file in one transaction (all or nothing). Idempotent
/// (SPEC §15): a session already here is left alone when the file holds the same events,
/// or fewer; extended when the file continues it; refused, naming its line, when the two
/// differ.
pub fn import(
    store: &Store,
    sessions: &BTreeMap<SessionId, ImportedSession>,
) -> Result<BrainImport, CliError> {
    let mut failed = None;
    let mut done = BrainImport::default();
    let same = |a: &Event, b: &Event| {
        (a.seq, &a.kind, &a.payload, &a.created_at) == (b.seq, &b.kind, &b.payload, &b.created_at)
    };
    let written = store.write(|w| {
        // From zero on every run: a write may run twice (a connection lost before commit).
        done = BrainImport::default();
        for (id, s) in sessions {
            failed = Some((s.first_line, *id));
            if !w.exists(*id)? {
                w.import_session(*id, &s.events)?;
                done.created += 1;
                done.events += s.events.len();
                continue;
            }
            let old = w.events(*id)?;
            let common = old
                .iter()
                .zip(&s.events)
                .take_while(|(a, b)| same(a, b))
                .count();
            if common == s.events.len() {
                done.unchanged += 1;
            } else if common == old.len() {
                w.extend_imported(*id, &s.events[common..])?;
                done.extended += 1;
                done.events += s.events.len() - common;
            } else {
                return Err(StoreError::AlreadyExists(*id));
            }
        }
        // Past the sessions: a failure now (the commit) is no one session's.
        failed = None;
        Ok(())
    });
    match (written, failed) {
        (Ok(()), _) => {}
        (Err(StoreError::AlreadyExists(id)), Some((line, _))) => {
            return Err(CliError::Import(
                line,
                format!(
                    "session {id} is already in this database with different events (nothing was \
                     imported; `sessions export` it to compare)"
                ),
            ));
        }
        // About the file's data, not the database's: say so.
        (Err(StoreError::Corrupt(why)), Some((line, id))) => {
            return Err(CliError::Import(line, format!("session {id}: {why}")));
        }
        // Any other failure while writing a session names it, as SPEC §15 asks.
        (Err(e), Some((line, id))) => {
            return Err(CliError::Import(line, format!("session {id}: {e}")));
        }
        (Err(e), None) => return Err(e.into()),
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0192e4a0-7b1c-7d3e-8f00-123456789abc";

    #[test]
    fn a_line_past_the_limit_is_refused_by_number_without_reading_it_all() {
        let first = format!(
            r#"{{"session_id":"{ID}","seq":1,"kind":"session_started","payload":{{"system":"s"}},"created_at":"2026-11-30T04:17:26.000000Z"}}"#
        );
        let huge = "x".repeat(10_000);
        let text = format!("{first}\n{huge}\n");
        let e = read_jsonl_within(&mut text.as_bytes(), 1000).err().unwrap();
        assert!(
            matches!(&e, CliError::Import(2, why) if why.contains("longer than 1000")),
            "{e}"
        );
    }

    #[test]
    fn a_line_keeps_its_payload_text_and_normalises_its_timestamp() {
        let line = format!(
            r#"{{"session_id":"{ID}","seq":2,"kind":"x","payload":{{"z":1,  "a":2}},"created_at":"2026-11-30T06:17:26.5+02:00"}}"#
        );
        let (_, e) = read_line(&line).unwrap();
        assert_eq!(e.payload, r#"{"z":1,  "a":2}"#);
        assert_eq!(e.created_at, "2026-11-30T04:17:26.500000Z");
        let text = format!(
            r#"{{"session_id":"{ID}","seq":2,"kind":"x","payload_text":"{{\n \"z\": 1}}","created_at":"2026-11-30T04:17:26.500000Z"}}"#
        );
        assert_eq!(read_line(&text).unwrap().1.payload, "{\n \"z\": 1}");
    }

    #[test]
    fn a_line_with_both_payloads_none_or_a_non_object_is_refused() {
        let at = r#""created_at":"2026-11-30T04:17:26.500000Z""#;
        for body in [
            r#""payload":{},"payload_text":"{}""#.to_owned(),
            String::new(),
            r#""payload":[1]"#.to_owned(),
            r#""payload_text":"not json""#.to_owned(),
        ] {
            let sep = if body.is_empty() { "" } else { "," };
            let line = format!(r#"{{"session_id":"{ID}","seq":1,"kind":"x"{sep}{body},{at}}}"#);
            assert!(read_line(&line).is_err(), "{line}");
        }
    }
}
