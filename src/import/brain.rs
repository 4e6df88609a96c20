//! brain's own JSONL export (`brain sessions export`) read back: every line checked before
//! anything is written, then every session in one transaction (all or nothing). Shared by
//! `brain sessions import` and `POST /v1/import`.

use std::collections::BTreeMap;
use std::io::{BufRead, Read};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::session::{Decoded, Event, Payload, SessionId, Store, StoreError};

/// Why a JSONL import wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum BrainError {
    #[error("line {0} of the import: {1} (nothing was imported)")]
    Line(usize, String),
    #[error("{0} (nothing was imported)")]
    Store(StoreError),
}

/// One line of an export.
#[derive(Serialize, Deserialize)]
pub struct Line<'a> {
    pub session_id: String,
    pub seq: u64,
    pub kind: String,
    /// The payload's JSON text, embedded as it is stored.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<&'a RawValue>,
    /// The payload's exact text as a JSON string, instead of `payload`, when embedding it
    /// would break the line (it spans lines: a pretty-printed payload from an older import)
    /// or it is not JSON at all: either way its bytes come back unchanged on import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_text: Option<String>,
    pub created_at: String,
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
) -> Result<BTreeMap<SessionId, ImportedSession>, BrainError> {
    read_jsonl_within(input, MAX_IMPORT_LINE_BYTES)
}

fn read_jsonl_within(
    input: &mut dyn BufRead,
    max_line_bytes: usize,
) -> Result<BTreeMap<SessionId, ImportedSession>, BrainError> {
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
            .map_err(|e| BrainError::Line(n, e.to_string()))?;
        if read == 0 {
            break;
        }
        if read > max_line_bytes {
            return Err(BrainError::Line(
                n,
                format!("the line is longer than {max_line_bytes} bytes"),
            ));
        }
        if text.trim().is_empty() {
            continue;
        }
        let (id, event) = read_line(text.trim_end()).map_err(|why| BrainError::Line(n, why))?;
        let session = sessions.entry(id).or_insert(ImportedSession {
            first_line: n,
            events: Vec::new(),
        });
        if event.seq != session.events.len() as u64 + 1 {
            return Err(BrainError::Line(
                n,
                format!("seq {} of session {id} is out of order", event.seq),
            ));
        }
        if event.seq == 1 {
            check_start(&event)
                .map_err(|why| BrainError::Line(n, format!("session {id}: {why}")))?;
        } else if event.kind == crate::session::events::kind::SESSION_STARTED {
            return Err(BrainError::Line(
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
) -> Result<BrainImport, BrainError> {
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
            return Err(BrainError::Line(
                line,
                format!(
                    "session {id} is already in this database with different events (nothing was \
                     imported; `sessions export` it to compare)"
                ),
            ));
        }
        // About the file's data, not the database's: say so.
        (Err(StoreError::Corrupt(why)), Some((line, id))) => {
            return Err(BrainError::Line(line, format!("session {id}: {why}")));
        }
        // Any other failure while writing a session names it, as SPEC §15 asks.
        (Err(e), Some((line, id))) => {
            return Err(BrainError::Line(line, format!("session {id}: {e}")));
        }
        (Err(e), None) => return Err(BrainError::Store(e)),
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
            matches!(&e, BrainError::Line(2, why) if why.contains("longer than 1000")),
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
