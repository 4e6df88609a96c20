//! Conversations into the store, idempotently, in one transaction per file (SPEC §15).
//!
//! Each conversation's events are compared with the session an earlier import wrote under
//! the same id: none → created; the same → nothing; the old ones followed by more → only
//! the new ones appended; anything else → a fork (§14) under an id derived from the new
//! content, so importing that file again finds the fork and changes nothing. Events are
//! compared by kind and payload: a timestamp interpolated differently because a neighbour
//! arrived is not a new version of a message.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::convert::{self, Converted};
use super::{Conversation, ReadError};
use crate::session::events::{ForkedFrom, kind};
use crate::session::store::Writer;
use crate::session::{Decoded, Event, Payload, SessionId, Store, StoreError};

/// What happened to one conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    /// This many events appended.
    Extended(u64),
    Unchanged,
    /// The earlier import differs: a new session, a fork of `from` at `seq`.
    Forked {
        id: SessionId,
        from: SessionId,
        seq: u64,
    },
}

/// A fork, for the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fork {
    pub conversation: String,
    pub title: Option<String>,
    pub id: SessionId,
    pub from: SessionId,
    pub seq: u64,
}

/// What an import did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub conversations: usize,
    pub created: usize,
    pub extended: usize,
    pub unchanged: usize,
    pub forked: Vec<Fork>,
    /// User messages, answers and tool records written.
    pub messages: u64,
    /// Parts and messages left out, by kind.
    pub skipped: BTreeMap<String, u64>,
    pub elapsed: Duration,
    /// How long the import held the database's writer (its one transaction).
    pub writer_held: Duration,
}

/// Why nothing was imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{0} (nothing was imported)")]
    Read(#[from] ReadError),
    #[error("{0} (nothing was imported)")]
    Store(#[from] StoreError),
}

/// Imports every conversation the reader yields, all or nothing: the first unreadable one
/// rolls everything back. `progress` is told how many conversations are done. Readers plug
/// in here with one line each.
pub fn import_conversations(
    store: &Store,
    conversations: impl Iterator<Item = Result<Conversation, ReadError>>,
    progress: &mut dyn FnMut(usize),
) -> Result<Report, ImportError> {
    let started = Instant::now();
    let mut report = Report::default();
    let mut failed: Option<ImportError> = None;
    let mut held_from = None;
    let written = store.write(|w| {
        held_from = Some(Instant::now());
        for (index, c) in conversations.enumerate() {
            let c = match c {
                Ok(c) => c,
                Err(e) => {
                    failed = Some(e.into());
                    return Err(StoreError::Refused("an unreadable conversation"));
                }
            };
            if let Err(e) = one(w, index, &c, &mut report) {
                let aborts = e.to_string();
                failed = Some(e);
                log::debug!("import rolled back: {aborts}");
                return Err(StoreError::Refused("an unreadable conversation"));
            }
            report.conversations += 1;
            progress(report.conversations);
        }
        Ok(())
    });
    report.writer_held = held_from.map(|t| t.elapsed()).unwrap_or_default();
    if let Some(e) = failed {
        return Err(e);
    }
    written?;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// One conversation: converted, compared, written.
fn one(
    w: &mut Writer<'_>,
    index: usize,
    c: &Conversation,
    report: &mut Report,
) -> Result<(), ImportError> {
    let new = convert::convert(index, c)?;
    for (k, n) in &new.skipped {
        *report.skipped.entry(k.clone()).or_default() += n;
    }
    let named = |e: StoreError| {
        ImportError::Read(ReadError {
            index,
            id: Some(c.id.clone()),
            reason: e.to_string(),
        })
    };
    match reconcile(w, &new).map_err(named)? {
        Outcome::Created => {
            report.created += 1;
            report.messages += new.messages;
        }
        Outcome::Extended(n) => {
            report.extended += 1;
            report.messages += messages_in(&new.events[new.events.len() - n as usize..]);
        }
        Outcome::Unchanged => report.unchanged += 1,
        Outcome::Forked { id, from, seq } => {
            report.messages += messages_in(&new.events[seq as usize..]);
            report.forked.push(Fork {
                conversation: c.id.clone(),
                title: c.title.clone(),
                id,
                from,
                seq,
            });
        }
    }
    Ok(())
}

fn messages_in(events: &[Event]) -> u64 {
    let message = [
        kind::USER_MESSAGE,
        kind::ASSISTANT_TURN,
        kind::TOOL_EXECUTION,
    ];
    events
        .iter()
        .filter(|e| message.contains(&e.kind.as_str()))
        .count() as u64
}

/// Writes what the store lacks of a converted conversation, and says what that was.
pub fn reconcile(w: &mut Writer<'_>, new: &Converted) -> Result<Outcome, StoreError> {
    if !w.exists(new.id)? {
        w.import_session(new.id, &new.events)?;
        return Ok(Outcome::Created);
    }
    let old = w.events(new.id)?;
    let common = common_prefix(&old, &new.events);
    if common == new.events.len() {
        // The same, or the user went on talking in brain after the import.
        return Ok(Outcome::Unchanged);
    }
    if common == old.len() {
        let floor = old.last().map(|e| e.created_at.clone()).unwrap_or_default();
        let tail: Vec<Event> = new.events[common..]
            .iter()
            .map(|e| Event {
                // Never before what is already there (times interpolate anew as
                // neighbours arrive; the log stays in time order).
                created_at: e.created_at.clone().max(floor.clone()),
                ..e.clone()
            })
            .collect();
        w.extend_imported(new.id, &tail)?;
        return Ok(Outcome::Extended(tail.len() as u64));
    }
    let seq = common.max(1) as u64;
    let fork_id = convert::id_of(&format!("{}:{}", new.id, content_hash(&new.events)));
    if w.exists(fork_id)? {
        return Ok(Outcome::Unchanged);
    }
    let mut events = new.events.clone();
    if let Some(first) = events.first_mut()
        && let Decoded::Known(Payload::SessionStarted(mut s)) = first.decode()
    {
        s.forked_from = Some(ForkedFrom {
            session_id: new.id.to_string(),
            seq,
        });
        first.payload = Payload::SessionStarted(s).to_json();
    }
    w.import_session(fork_id, &events)?;
    Ok(Outcome::Forked {
        id: fork_id,
        from: new.id,
        seq,
    })
}

/// How many leading events are the same message: same kind and payload (the start: the
/// same system prompt and source, whatever the title).
fn common_prefix(old: &[Event], new: &[Event]) -> usize {
    old.iter().zip(new).take_while(|(a, b)| same(a, b)).count()
}

fn same(a: &Event, b: &Event) -> bool {
    if a.kind != b.kind {
        return false;
    }
    if a.kind != kind::SESSION_STARTED {
        return a.payload == b.payload;
    }
    match (a.decode(), b.decode()) {
        (
            Decoded::Known(Payload::SessionStarted(x)),
            Decoded::Known(Payload::SessionStarted(y)),
        ) => x.system == y.system && x.imported_from == y.imported_from,
        _ => false,
    }
}

/// A digest of a conversation's events (kinds and payloads): a diverged version's fork id.
fn content_hash(events: &[Event]) -> String {
    let mut h = Sha256::new();
    for e in events {
        h.update(e.kind.as_bytes());
        h.update([0]);
        h.update(e.payload.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
