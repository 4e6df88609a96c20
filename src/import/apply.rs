//! Conversations into the store, idempotently, in one transaction per file (SPEC §15).
//!
//! Each conversation's events are compared with the session an earlier import wrote under
//! the same id: none → created; the same → nothing; the old ones followed by more → only
//! the new ones appended; anything else → its numbered forks (§14) are tried in turn, the
//! first one it continues is extended, else a new fork is made. Events are compared by
//! kind and payload: a timestamp interpolated differently because a neighbour arrived is
//! not a new version of a message, and the user's renames and archiving in brain are not
//! part of the conversation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
    /// Asked to stop (the server is shutting down): rolled back so the writer is free.
    #[error("the import was stopped: the server is shutting down (nothing was imported)")]
    Stopped,
}

/// How many conversations are read and converted ahead of the writer.
const READ_AHEAD: usize = 8;

/// What the reading thread hands the writer.
enum Fetched {
    One(Result<(Conversation, Converted), ImportError>),
    /// The reader is done: without it, a reader that died would look like the end.
    End,
}

/// Imports every conversation the reader yields, all or nothing: the first unreadable one
/// rolls everything back. `progress` is told how many conversations are done. Readers plug
/// in here with one line each. The file is read and converted on a thread of its own, a
/// few conversations ahead, so the database's writer is held for the writing only (I10:
/// the server's other writes wait for this one transaction).
pub fn import_conversations(
    store: &Store,
    conversations: impl Iterator<Item = Result<Conversation, ReadError>> + Send,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize),
) -> Result<Report, ImportError> {
    let started = Instant::now();
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel(READ_AHEAD);
        let reader = scope.spawn(move || {
            for (index, c) in conversations.enumerate() {
                let one = c.map_err(ImportError::from).and_then(|c| {
                    let converted = convert::convert(index, &c)?;
                    Ok((c, converted))
                });
                let failed = one.is_err();
                // The writer gone (it failed) or this one unreadable: no need to read on.
                if tx.send(Fetched::One(one)).is_err() || failed {
                    return;
                }
            }
            let _ = tx.send(Fetched::End);
        });
        let written = write_all(store, rx, stop, progress);
        // Joined here, so a panic in a reader is this import's failure, not the caller's.
        if reader.join().is_err() {
            log::error!("an import's reader panicked");
        }
        let mut report = written?;
        report.elapsed = started.elapsed();
        Ok(report)
    })
}

/// The writer's side: each conversation the reading thread sends, in one transaction.
fn write_all(
    store: &Store,
    rx: mpsc::Receiver<Fetched>,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize),
) -> Result<Report, ImportError> {
    let mut report = Report::default();
    let mut failed: Option<ImportError> = None;
    let mut held_from = None;
    let written = store.write_once(|w| {
        held_from = Some(Instant::now());
        let mut index = 0;
        loop {
            let (c, new) = match rx.recv() {
                Ok(Fetched::One(Ok(pair))) => pair,
                Ok(Fetched::End) => return Ok(()),
                Ok(Fetched::One(Err(e))) => {
                    failed = Some(e);
                    return Err(StoreError::Refused("an unreadable conversation"));
                }
                Err(_) => {
                    failed = Some(ImportError::Read(ReadError {
                        index,
                        id: None,
                        reason: "the file's reader stopped before the end".into(),
                    }));
                    return Err(StoreError::Refused("an unreadable conversation"));
                }
            };
            // Checked between conversations: a shutdown's own writes wait for this one.
            if stop.load(Ordering::Acquire) {
                failed = Some(ImportError::Stopped);
                return Err(StoreError::Refused("an import told to stop"));
            }
            if let Err(e) = one(w, index, &c, &new, &mut report) {
                log::debug!("import rolled back: {e}");
                failed = Some(e);
                return Err(StoreError::Refused("an unreadable conversation"));
            }
            index += 1;
            report.conversations += 1;
            progress(report.conversations);
        }
    });
    report.writer_held = held_from.map(|t| t.elapsed()).unwrap_or_default();
    if let Some(e) = failed {
        return Err(e);
    }
    written?;
    Ok(report)
}

/// One conversation, converted: compared, written.
fn one(
    w: &mut Writer<'_>,
    index: usize,
    c: &Conversation,
    new: &Converted,
    report: &mut Report,
) -> Result<(), ImportError> {
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
    match reconcile(w, new).map_err(named)? {
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
    match against(w, new.id, &new.events)? {
        Some(outcome) => Ok(outcome),
        None => fork(w, new),
    }
}

/// The most forks of one conversation an import looks through before it gives up.
const MAX_FORKS: u32 = 1000;

/// A diverged conversation goes to its forks, numbered: the first one this version
/// continues (or already holds) takes it; else a new one. So a conversation that diverged
/// once and then grows extends its fork rather than forking again and again.
fn fork(w: &mut Writer<'_>, new: &Converted) -> Result<Outcome, StoreError> {
    let base = w.events(new.id)?;
    let seq = common_prefix(&kept(&base), &new.events).max(1) as u64;
    for n in 1..=MAX_FORKS {
        let fork_id = convert::id_of(&format!("{}:fork:{n}", new.id));
        if w.exists(fork_id)? {
            match against(w, fork_id, &new.events)? {
                Some(Outcome::Extended(k)) => return Ok(Outcome::Extended(k)),
                Some(_) => return Ok(Outcome::Unchanged),
                None => continue,
            }
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
        return Ok(Outcome::Forked {
            id: fork_id,
            from: new.id,
            seq,
        });
    }
    Err(StoreError::Corrupt(format!(
        "conversation {} has more than {MAX_FORKS} diverged versions here",
        new.id
    )))
}

/// Compares a converted conversation with session `id`: `Some(Unchanged)` when it holds
/// nothing new, `Some(Extended)` after appending what it adds, `None` when they differ.
/// The session's own renames and archiving (events the user made in brain after the
/// import) are left out of the comparison, and the new events' seqs are renumbered past
/// them, so tidying an imported chat never makes its next export a fork.
fn against(
    w: &mut Writer<'_>,
    id: SessionId,
    events: &[Event],
) -> Result<Option<Outcome>, StoreError> {
    let old = w.events(id)?;
    let kept = kept(&old);
    let common = common_prefix(&kept, events);
    if common == events.len() {
        // The same, or the user went on talking in brain after the import.
        return Ok(Some(Outcome::Unchanged));
    }
    if common < kept.len() {
        return Ok(None);
    }
    let last = old.last().map_or(0, |e| e.seq);
    let floor = old.last().map(|e| e.created_at.clone()).unwrap_or_default();
    let to_stored = |s: u64| -> u64 {
        match s as usize {
            0 => 0,
            n if n <= common => kept[n - 1].seq,
            n => last + (n - common) as u64,
        }
    };
    let tail: Vec<Event> = events[common..]
        .iter()
        .map(|e| Event {
            seq: to_stored(e.seq),
            payload: renumber(&e.payload, &to_stored),
            // Never before what is already there (times interpolate anew as
            // neighbours arrive; the log stays in time order).
            created_at: e.created_at.clone().max(floor.clone()),
            kind: e.kind.clone(),
        })
        .collect();
    w.extend_imported(id, &tail)?;
    Ok(Some(Outcome::Extended(tail.len() as u64)))
}

/// Kinds a user's own tidying writes into an imported session; not part of the
/// conversation an export holds.
const TIDYING: &[&str] = &[kind::SESSION_TITLED, kind::SESSION_ARCHIVED];

/// A stored session's events as an import wrote them: without the user's tidying, and
/// with the seqs their payloads name renumbered to count only what is left (so they
/// compare with a fresh conversion's).
fn kept(events: &[Event]) -> Vec<Event> {
    let kept: Vec<&Event> = events
        .iter()
        .filter(|e| !TIDYING.contains(&e.kind.as_str()))
        .collect();
    let position: BTreeMap<u64, u64> = kept
        .iter()
        .enumerate()
        .map(|(i, e)| (e.seq, i as u64 + 1))
        .collect();
    let to_position = |s: u64| position.get(&s).copied().unwrap_or(s);
    kept.iter()
        .map(|e| Event {
            payload: renumber(&e.payload, &to_position),
            ..(*e).clone()
        })
        .collect()
}

/// The payload with the seqs it names (`turn`, and a rewind's `to_seq` and `edited_seq`)
/// mapped; the text as it was when nothing changes (its bytes stay the writer's).
fn renumber(payload: &str, map: &dyn Fn(u64) -> u64) -> String {
    let Ok(serde_json::Value::Object(mut o)) = serde_json::from_str::<serde_json::Value>(payload)
    else {
        return payload.to_owned();
    };
    let mut changed = false;
    for field in ["turn", "to_seq", "edited_seq"] {
        if let Some(s) = o.get(field).and_then(serde_json::Value::as_u64) {
            let m = map(s);
            if m != s {
                o.insert(field.to_owned(), m.into());
                changed = true;
            }
        }
    }
    if changed {
        serde_json::Value::Object(o).to_string()
    } else {
        payload.to_owned()
    }
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
        // As JSON values: a renumbered payload is rewritten, key order aside.
        return a.payload == b.payload
            || serde_json::from_str::<serde_json::Value>(&a.payload).ok()
                == serde_json::from_str::<serde_json::Value>(&b.payload).ok();
    }
    match (a.decode(), b.decode()) {
        (
            Decoded::Known(Payload::SessionStarted(x)),
            Decoded::Known(Payload::SessionStarted(y)),
        ) => x.system == y.system && x.imported_from == y.imported_from,
        _ => false,
    }
}
