//! Simon Willison's `llm` `logs.db`, opened read-only. Two schemas, both read (a database
//! upgraded across 0.32 holds both):
//!
//! - 0.32 and later: `threads` (`id`, `name`, `tip_message_hash`, `forked_from`,
//!   `datetime_utc`), `turns` (one model call: `thread_id`, `parent_message_hash` — its
//!   prompt —, `tip_message_hash` — its answer —, `model`, `resolved_model`, `duration_ms`,
//!   `datetime_utc`), content-addressed `messages` (`hash`, `parent_hash`, `role`) and their
//!   `parts` (`message_hash`, `position`, `type`, `text`, `payload`; text that borrows a
//!   fragment has `text` NULL and a `payload.text_ref` of literals and `fragments` ids).
//!   A thread is a conversation: its messages are those reachable up `parent_hash` from its
//!   tip and from its turns' tips (other branches), and `current` is the tip.
//! - Before 0.32: `conversations` (`id`, `name`, `model`) and `responses` (one exchange:
//!   `prompt`, `system`, `response`, `model`, `conversation_id`, `datetime_utc`,
//!   `duration_ms`), a straight line per conversation. 0.32+ suppresses a response whose id
//!   is a turn's, and continues a legacy conversation as the thread of the same id, which
//!   then holds the whole history: such a conversation is read from the thread only.
//!
//! Memory is bounded by the largest conversation: ids are listed first, then each
//! conversation is read on its own. Everything is read in one read transaction, so a
//! database `llm` writes to meanwhile gives one consistent snapshot.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;

use jiff::{SignedDuration, Timestamp};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::Value;

use super::{Conversation, Message, ReadError, Role, Source, count_skipped, tree};

/// The first bytes of every SQLite database file (a `logs.db` is one).
pub const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// Whether a file starting with `head` is a SQLite database, the shape of a `logs.db`.
pub fn looks_like(head: &[u8]) -> bool {
    head.starts_with(SQLITE_MAGIC)
}

/// The conversations of a `logs.db`, one at a time. After the first error it ends.
pub fn read(path: &Path) -> Conversations {
    let (conn, queue, error) = match open(path) {
        Ok((conn, queue)) => (Some(conn), queue, None),
        Err(reason) => (None, VecDeque::new(), Some(reason)),
    };
    Conversations {
        conn,
        queue,
        error,
        index: 0,
    }
}

/// The iterator [`read`] returns.
pub struct Conversations {
    conn: Option<Connection>,
    queue: VecDeque<Pending>,
    /// Why the database could not be opened: the first and only item.
    error: Option<String>,
    index: usize,
}

/// A conversation listed but not yet read.
enum Pending {
    Thread(String),
    Legacy(String),
}

impl Iterator for Conversations {
    type Item = Result<Conversation, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(reason) = self.error.take() {
            return Some(Err(ReadError {
                index: 0,
                id: None,
                reason,
            }));
        }
        let conn = self.conn.as_ref()?;
        let pending = self.queue.pop_front()?;
        let index = self.index;
        self.index += 1;
        let (id, result) = match pending {
            Pending::Thread(id) => {
                let r = read_thread(conn, &id);
                (id, r)
            }
            Pending::Legacy(id) => {
                let r = read_legacy(conn, &id);
                (id, r)
            }
        };
        Some(result.map_err(|reason| {
            // Nothing after an error: the import is all or nothing anyway.
            self.queue.clear();
            self.conn = None;
            ReadError {
                index,
                id: Some(id),
                reason,
            }
        }))
    }
}

/// SQLite's errors as text for a [`ReadError`].
fn sql(e: rusqlite::Error) -> String {
    format!("reading the database: {e}")
}

/// A file SQLite will not read: truncated, damaged, or not a database at all.
fn unreadable(e: rusqlite::Error) -> String {
    format!("not an llm logs.db SQLite can read (damaged or truncated?): {e}")
}

/// Opens read-only, starts the snapshot and lists the conversations: the legacy ones that
/// have no thread, then the threads, each oldest first.
fn open(path: &Path) -> Result<(Connection, VecDeque<Pending>), String> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("cannot open {} as SQLite: {e}", path.display()))?;
    conn.execute_batch("BEGIN").map_err(unreadable)?;
    let tables: HashSet<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(unreadable)?;
    let new = ["threads", "turns", "messages", "parts"]
        .iter()
        .all(|t| tables.contains(*t));
    let legacy = tables.contains("responses");
    if !new && !legacy {
        return Err(
            "not an llm logs.db: it has neither llm's `threads` nor its `responses` table".into(),
        );
    }
    let mut queue = VecDeque::new();
    if legacy {
        // A response logged twice (once as a turn) is the turn's; a conversation that
        // became a thread is the thread's.
        let not_new = if new {
            "AND id NOT IN (SELECT id FROM turns) \
             AND coalesce(conversation_id, id) NOT IN (SELECT id FROM threads)"
        } else {
            ""
        };
        let q = format!(
            "SELECT coalesce(conversation_id, id) AS c FROM responses WHERE 1 {not_new} \
             GROUP BY c ORDER BY min(datetime_utc), c"
        );
        let ids: Vec<String> = conn
            .prepare(&q)
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(sql)?;
        queue.extend(ids.into_iter().map(Pending::Legacy));
    }
    if new {
        let ids: Vec<String> = conn
            .prepare("SELECT id FROM threads ORDER BY datetime_utc, id")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(sql)?;
        queue.extend(ids.into_iter().map(Pending::Thread));
    }
    Ok((conn, queue))
}

/// `llm`'s times: `2026-11-30 19:47:38.767618+00:00` (threads),
/// `2026-11-30T19:47:38.706431+00:00` (turns) or, before 0.32, no offset (UTC). Empty: none.
fn datetime(s: Option<&str>) -> Result<Option<Timestamp>, String> {
    let Some(s) = s.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let iso = s.replacen(' ', "T", 1);
    if let Ok(t) = iso.parse::<Timestamp>() {
        return Ok(Some(t));
    }
    iso.parse::<jiff::civil::DateTime>()
        .ok()
        .and_then(|dt| jiff::tz::TimeZone::UTC.to_timestamp(dt).ok())
        .map(Some)
        .ok_or_else(|| format!("{s:?} is not a time"))
}

fn role(s: &str) -> Option<Role> {
    Some(match s {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        "tool" => Role::Tool,
        _ => return None,
    })
}

fn with_title(title: Option<&str>, reason: String) -> String {
    match title {
        // As the conversion's errors name it.
        Some(t) => format!("“{t}”: {reason}"),
        None => reason,
    }
}

/// One thread of the 0.32+ schema.
fn read_thread(conn: &Connection, id: &str) -> Result<Conversation, String> {
    let (name, tip, created): (Option<String>, Option<String>, Option<String>) = conn
        .query_row(
            "SELECT name, tip_message_hash, datetime_utc FROM threads WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map_err(sql)?;
    read_thread_body(conn, id, tip, created.as_deref())
        .map_err(|e| with_title(name.as_deref(), e))
        .map(|(messages, created_at, current)| Conversation {
            source: Source::Llm,
            id: id.to_owned(),
            title: name,
            created_at,
            messages,
            current,
        })
}

/// One model call, as far as timestamps and models go.
struct Turn {
    /// Written in this thread (not in one it was forked from): its tip is a branch.
    own: bool,
    parent: Option<String>,
    tip: Option<String>,
    model: Option<String>,
    at: Option<Timestamp>,
    duration_ms: Option<i64>,
}

type ThreadBody = (Vec<Message>, Option<Timestamp>, Option<String>);

fn read_thread_body(
    conn: &Connection,
    id: &str,
    tip: Option<String>,
    created: Option<&str>,
) -> Result<ThreadBody, String> {
    let created_at = datetime(created).map_err(|e| format!("thread `datetime_utc`: {e}"))?;
    let turns = thread_turns(conn, id)?;
    // The thread's messages: up from its tip and from each turn's tip (a turn that is not
    // on the tip's line is another branch).
    let mut messages: Vec<Message> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let tips = tip.iter().chain(
        turns
            .iter()
            .filter(|t| t.own)
            .filter_map(|t| t.tip.as_ref()),
    );
    let mut get = conn
        .prepare_cached("SELECT parent_hash, role FROM messages WHERE hash = ?1")
        .map_err(sql)?;
    for start in tips {
        let mut segment: Vec<Message> = Vec::new();
        let mut at = Some(start.clone());
        // Each message is read once, so the walk ends even on a cycle (which the tree
        // check below then names).
        while let Some(hash) = at.take() {
            if seen.contains(&hash) {
                break;
            }
            let row: Option<(Option<String>, Option<String>)> = get
                .query_row([&hash], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(sql)?;
            let Some((parent, role_name)) = row else {
                return Err(format!("message {hash:?} is referred to but not stored"));
            };
            let role = role_name.as_deref().and_then(role).ok_or_else(|| {
                format!(
                    "message {hash:?} has an unknown role {:?}",
                    role_name.as_deref().unwrap_or("(none)")
                )
            })?;
            let (text, tool_name, skipped) = parts(conn, &hash)?;
            seen.insert(hash.clone());
            segment.push(Message {
                id: hash,
                parent: parent.clone(),
                role,
                text,
                created_at: None,
                model: None,
                tool_name,
                skipped,
            });
            at = parent;
        }
        // A walk meets a message before its ancestors: reversed, the tip's line reads
        // oldest first, then each other branch from where it leaves.
        segment.reverse();
        messages.append(&mut segment);
    }
    let index: HashMap<String, usize> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id.clone(), i))
        .collect();
    time_and_model(&mut messages, &index, &turns);
    tree::check(&messages, tip.as_deref())?;
    Ok((messages, created_at, tip))
}

/// The turns that wrote a thread's messages: its own and those of the threads it was
/// forked from (which wrote the shared beginning), oldest first.
fn thread_turns(conn: &Connection, id: &str) -> Result<Vec<Turn>, String> {
    let mut threads = vec![id.to_owned()];
    let mut at = id.to_owned();
    loop {
        let from: Option<String> = conn
            .query_row(
                "SELECT forked_from FROM threads WHERE id = ?1",
                [&at],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?
            .flatten();
        match from {
            // A fork loop in a hostile file just ends the walk.
            Some(f) if !threads.contains(&f) => {
                threads.push(f.clone());
                at = f;
            }
            _ => break,
        }
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT parent_message_hash, tip_message_hash, coalesce(resolved_model, model), \
             datetime_utc, duration_ms FROM turns WHERE thread_id = ?1",
        )
        .map_err(sql)?;
    let mut turns = Vec::new();
    for thread in &threads {
        let rows = stmt
            .query_map([thread], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })
            .map_err(sql)?;
        for row in rows {
            let (parent, tip, model, at, duration_ms) = row.map_err(sql)?;
            let at = datetime(at.as_deref()).map_err(|e| format!("turn `datetime_utc`: {e}"))?;
            turns.push(Turn {
                own: thread == id,
                parent,
                tip,
                model,
                at,
                duration_ms,
            });
        }
    }
    // Untimed turns last; the sort is stable, so ties keep the file's order.
    turns.sort_by_key(|t| (t.at.is_none(), t.at));
    Ok(turns)
}

/// Each message's time and model come from the earliest turn that wrote it: the answer
/// (below the turn's prompt) at the turn's start plus its duration, with the turn's model;
/// the prompt and anything new above it at the turn's start.
fn time_and_model(messages: &mut [Message], index: &HashMap<String, usize>, turns: &[Turn]) {
    let mut timed: HashSet<usize> = HashSet::new();
    for turn in turns {
        let Some(mut at) = turn.tip.as_deref().and_then(|h| index.get(h).copied()) else {
            continue;
        };
        let answered = turn
            .at
            .zip(turn.duration_ms)
            .and_then(|(t, ms)| t.checked_add(SignedDuration::from_millis(ms)).ok())
            .or(turn.at);
        let mut in_answer = true;
        // Bounded by the message count: the tree was walked without cycles.
        for _ in 0..messages.len() {
            if Some(messages[at].id.as_str()) == turn.parent.as_deref() {
                in_answer = false;
            }
            if !timed.insert(at) {
                break;
            }
            let m = &mut messages[at];
            m.created_at = if in_answer { answered } else { turn.at };
            if in_answer && m.role == Role::Assistant {
                m.model = turn.model.clone();
            }
            match m.parent.as_deref().and_then(|p| index.get(p)) {
                Some(&p) => at = p,
                None => break,
            }
        }
    }
}

/// What a message's parts give: its text, its tool's name, the parts left out by kind.
type Parts = (String, Option<String>, Vec<(String, u64)>);

/// A message's text (its text parts, in order, with borrowed fragments put back; a tool
/// message's results), its tool's name, and the parts left out by kind.
fn parts(conn: &Connection, hash: &str) -> Result<Parts, String> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT type, text, payload, tool_name FROM parts WHERE message_hash = ?1 \
             ORDER BY position",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map([hash], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })
        .map_err(sql)?;
    let mut text = String::new();
    let mut tool_name = None;
    let mut skipped = Vec::new();
    for row in rows {
        let (kind, literal, payload, tool) = row.map_err(sql)?;
        let kind = kind.unwrap_or_default();
        let payload: Option<Value> = match payload.as_deref() {
            Some(p) => Some(
                serde_json::from_str(p)
                    .map_err(|e| format!("message {hash:?}: a part's payload is not JSON: {e}"))?,
            ),
            None => None,
        };
        match kind.as_str() {
            "text" => match literal {
                Some(t) => text.push_str(&t),
                None => text.push_str(&text_ref(conn, hash, payload.as_ref())?),
            },
            "tool_result" => {
                if let Some(out) = payload.as_ref().and_then(|p| p.get("output")) {
                    match out {
                        Value::String(s) => text.push_str(s),
                        other => text.push_str(&other.to_string()),
                    }
                }
                tool_name = tool_name.or(tool);
            }
            other => count_skipped(
                &mut skipped,
                if other.is_empty() { "unknown" } else { other },
                1,
            ),
        }
    }
    Ok((text, tool_name, skipped))
}

/// A text part stored by reference: `payload.text_ref`, literals and fragment ids.
fn text_ref(conn: &Connection, hash: &str, payload: Option<&Value>) -> Result<String, String> {
    let Some(pieces) = payload.and_then(|p| p.get("text_ref")) else {
        // A text part with neither text nor references is empty.
        return Ok(String::new());
    };
    let pieces = pieces
        .as_array()
        .ok_or_else(|| format!("message {hash:?}: `text_ref` is not a list"))?;
    let mut out = String::new();
    for piece in pieces {
        if let Some(s) = piece.get("literal").and_then(Value::as_str) {
            out.push_str(s);
        } else if let Some(id) = piece.get("fragment").and_then(Value::as_i64) {
            let content: Option<String> = conn
                .query_row("SELECT content FROM fragments WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(sql)?
                .flatten();
            // As llm reads it: a fragment that is gone reads as nothing.
            out.push_str(content.as_deref().unwrap_or_default());
        } else {
            return Err(format!(
                "message {hash:?}: a `text_ref` piece is neither literal nor fragment"
            ));
        }
    }
    Ok(out)
}

mod legacy;
use legacy::read_legacy;

#[cfg(test)]
mod tests;
