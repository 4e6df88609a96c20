//! The read side: reader connections from the pool, each read in one transaction so it
//! sees one snapshot of the log.

use rusqlite::{Connection, OptionalExtension, Row};

use crate::session::events::{Event, SessionId, kind};
use crate::session::projection::page::{self, Page, PageSource};
use crate::session::projection::{visible, visible_compaction_boundary};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::types::SessionRow;

/// Maps a `SELECT id, title, archived, system, created_at, updated_at` row.
pub(super) fn session_row(r: &Row<'_>) -> rusqlite::Result<Result<SessionRow>> {
    let id: String = r.get(0)?;
    let parsed = id
        .parse::<SessionId>()
        .map_err(|_| StoreError::Corrupt(format!("session id {id:?} is not a UUID")));
    Ok(parsed.and_then(|id| {
        Ok(SessionRow {
            id,
            title: r.get(1)?,
            archived: r.get(2)?,
            system: r.get(3)?,
            created_at: r.get(4)?,
            updated_at: r.get(5)?,
        })
    }))
}

fn event_row(r: &Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        seq: r.get(0)?,
        kind: r.get(1)?,
        payload: r.get(2)?,
        created_at: r.get(3)?,
    })
}

/// A session's cache row.
pub(super) fn session(conn: &Connection, id: SessionId) -> Result<SessionRow> {
    conn.prepare_cached(
        "SELECT id, title, archived, system, created_at, updated_at
         FROM sessions WHERE id = ?1 AND deleted_at IS NULL",
    )?
    .query_row([id.to_string()], session_row)
    .optional()?
    .ok_or(StoreError::SessionNotFound(id))?
}

/// The session's newest seq (0 for none), from a reader: never waits for the writer.
pub(super) fn last_seq(conn: &Connection, id: SessionId) -> Result<u64> {
    Ok(conn
        .prepare_cached(
            "SELECT COALESCE(MAX(seq), 0) FROM session_events
             WHERE session_n = (SELECT n FROM sessions WHERE id = ?1)",
        )?
        .query_row([id.to_string()], |r| r.get(0))?)
}

/// A session's events with `seq > after_seq`, oldest first, at most `limit` of them
/// (all when `None`).
pub(super) fn events(
    conn: &mut Connection,
    id: SessionId,
    after_seq: u64,
    limit: Option<u32>,
) -> Result<Vec<Event>> {
    let tx = conn.transaction()?;
    require_session(&tx, id)?;
    let events = events_after(&tx, id, after_seq, limit)?;
    tx.finish()?;
    Ok(events)
}

/// What the LLM context needs (SPEC §4 steps 0 and 1): `session_started`, then every
/// event after the newest *visible* compaction's boundary (the compaction itself among
/// them; one a later rewind hid does not count). Without one, the whole log.
pub(super) fn events_for_context(conn: &mut Connection, id: SessionId) -> Result<Vec<Event>> {
    let tx = conn.transaction()?;
    require_session(&tx, id)?;
    let boundary = context_boundary(&tx, id)?;
    let mut events = Vec::new();
    if boundary > 0 {
        events.extend(events_after(&tx, id, 0, Some(1))?);
    }
    events.extend(events_after(&tx, id, boundary, None)?);
    tx.finish()?;
    Ok(events)
}

/// One page of the UI transcript (SPEC §7): the newest `limit` items before
/// `before_seq`, read from one snapshot through the indexes that find an item's
/// attempt, answers and rewinds, so a page costs about the same in a long session as
/// in a short one (see [`crate::session::projection::page`]). `active` as for
/// [`crate::session::projection::ui_transcript`].
pub(super) fn transcript_page(
    conn: &mut Connection,
    id: SessionId,
    before_seq: u64,
    limit: usize,
    active: Option<(u64, u32)>,
) -> Result<Page> {
    let tx = conn.transaction()?;
    require_session(&tx, id)?;
    let page = page::transcript_page(
        &mut SqlPage {
            conn: &tx,
            id: id.to_string(),
        },
        before_seq,
        limit,
        active,
    )?;
    tx.finish()?;
    Ok(page)
}

/// The questions about `call_id` in a session and their answers, in seq order.
pub(super) fn permission_events(
    conn: &Connection,
    id: SessionId,
    call_id: &str,
) -> Result<Vec<Event>> {
    permission_events_of(conn, &id.to_string(), call_id)
}

/// The questions and answers filed since the restart recovery last
/// checked them (V16's `questions_to_check`), in every live session, in no order.
pub(super) fn questions_filed(conn: &Connection) -> Result<Vec<(SessionId, Event)>> {
    let mut stmt = conn.prepare_cached(QUESTIONS_TO_CHECK)?;
    let rows = stmt.query_map([], |r| {
        let id: String = r.get(0)?;
        let event = Event {
            seq: r.get(1)?,
            kind: r.get(2)?,
            payload: r.get(3)?,
            created_at: r.get(4)?,
        };
        Ok((id, event))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, event) = row?;
        let id = id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("session id {id:?} is not a UUID")))?;
        out.push((id, event));
    }
    Ok(out)
}

/// Every session id, oldest first (tests and export); deleted ones are gone.
pub(super) fn session_ids(conn: &Connection) -> Result<Vec<SessionId>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM sessions WHERE deleted_at IS NULL ORDER BY created_at, id",
    )?;
    let ids: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    ids.into_iter()
        .map(|id| {
            id.parse()
                .map_err(|_| StoreError::Corrupt(format!("session id {id:?} is not a UUID")))
        })
        .collect()
}

/// The events filed in `questions_to_check` (V16), read whole: their keys are taken from
/// the decoded payload, as every other reader of the log takes them, never from the filed
/// columns (SQL reads JSON by other rules than serde: a NUL, a number past 2^63, an object
/// as a call id).
pub(super) const QUESTIONS_TO_CHECK: &str = "SELECT s.id, e.seq, e.kind, e.payload, e.created_at
     FROM questions_to_check AS q
     JOIN sessions AS s ON s.n = q.session_n AND s.deleted_at IS NULL
     JOIN session_events AS e ON e.session_n = q.session_n AND e.seq = q.seq";

/// The questions about `call_id` and their answers, in seq order (V13's index).
fn permission_events_of(conn: &Connection, id: &str, call_id: &str) -> Result<Vec<Event>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, kind, payload, created_at FROM session_events INDEXED BY session_events_permissions
         WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind IN ('permission_requested', 'permission_resolved')
           AND json_extract(payload, '$.call_id') = ?2 ORDER BY seq",
    )?;
    let rows = stmt.query_map(rusqlite::params![id, call_id], event_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn require_session(conn: &Connection, id: SessionId) -> Result<()> {
    let exists: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1 AND deleted_at IS NULL)",
        )?
        .query_row([id.to_string()], |r| r.get(0))?;
    if exists {
        Ok(())
    } else {
        Err(StoreError::SessionNotFound(id))
    }
}

pub(super) fn events_after(
    conn: &Connection,
    id: SessionId,
    after_seq: u64,
    limit: Option<u32>,
) -> Result<Vec<Event>> {
    let limit = limit.map_or(-1, i64::from);
    let mut stmt = conn.prepare_cached(
        "SELECT seq, kind, payload, created_at FROM session_events
         WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND seq > ?2 ORDER BY seq LIMIT ?3",
    )?;
    let rows = stmt.query_map(
        rusqlite::params![id.to_string(), after_seq, limit],
        event_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The session's rewinds and compactions, in seq order: all step 0 needs to tell which
/// compaction is the newest visible one (each kind found through its partial index).
pub(super) fn shaping_events(conn: &Connection, id: SessionId) -> Result<Vec<Event>> {
    let mut events = events_of_kind(conn, id, kind::COMPACTION_APPLIED)?;
    events.extend(rewinds(conn, id)?);
    events.sort_by_key(|e| e.seq);
    Ok(events)
}

/// The session's rewinds, in seq order.
pub(super) fn rewinds(conn: &Connection, id: SessionId) -> Result<Vec<Event>> {
    events_of_kind(conn, id, kind::REWIND)
}

/// The session's events of one shaping kind, in seq order. The kind is written into the
/// statement and the index named: bound as a parameter, it matched no partial index and
/// each call scanned the whole session (a context build of a 100k-event session took
/// ~120 ms instead of ~1, BENCHMARKS.md).
fn events_of_kind(conn: &Connection, id: SessionId, k: &str) -> Result<Vec<Event>> {
    let sql = match k {
        kind::COMPACTION_APPLIED => {
            "SELECT seq, kind, payload, created_at FROM session_events
             INDEXED BY session_events_compactions
             WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind = 'compaction_applied' ORDER BY seq"
        }
        kind::REWIND => {
            "SELECT seq, kind, payload, created_at FROM session_events
             INDEXED BY session_events_rewinds
             WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind = 'rewind' ORDER BY seq"
        }
        _ => {
            "SELECT seq, kind, payload, created_at FROM session_events
             WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind = ?2 ORDER BY seq"
        }
    };
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = if sql.contains("?2") {
        stmt.query_map(rusqlite::params![id.to_string(), k], event_row)?
    } else {
        stmt.query_map(rusqlite::params![id.to_string()], event_row)?
    };
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The newest visible compaction's boundary (0 without one), reading the rewinds (few)
/// and the compactions newest first, stopping at the first one no rewind hides: a long
/// session holds a compaction every few dozen turns, and reading them all cost more than
/// the rest of the context.
fn context_boundary(conn: &Connection, id: SessionId) -> Result<u64> {
    let rewinds = rewinds(conn, id)?;
    let mut stmt = conn.prepare_cached(
        "SELECT seq, kind, payload, created_at FROM session_events
         INDEXED BY session_events_compactions
         WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind = 'compaction_applied' ORDER BY seq DESC",
    )?;
    let mut rows = stmt.query(rusqlite::params![id.to_string()])?;
    while let Some(row) = rows.next()? {
        let compaction = event_row(row)?;
        let seq = compaction.seq;
        let mut shaping = rewinds.clone();
        shaping.push(compaction);
        shaping.sort_by_key(|e| e.seq);
        if visible(&shaping).iter().any(|e| e.seq == seq) {
            return Ok(visible_compaction_boundary(&shaping));
        }
    }
    Ok(0)
}

/// The transcript page's reads, on one snapshot. The kinds are literals, not parameters,
/// so the partial indexes (V4, V5) match at prepare time, and each read names its index:
/// without statistics SQLite prefers the primary key's `session_n` prefix, a scan of the
/// whole session, which is the cost this read exists to avoid.
struct SqlPage<'c> {
    conn: &'c Connection,
    id: String,
}

impl PageSource for SqlPage<'_> {
    type Error = StoreError;

    fn events_before(&mut self, before: u64, n: usize) -> Result<Vec<Event>> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, kind, payload, created_at FROM session_events
             WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
        )?;
        let rows = stmt.query_map(rusqlite::params![self.id, before, n], event_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn turn_attempts(&mut self, turn: u64) -> Result<Vec<Event>> {
        // SQLite's integers stop at i64::MAX; a log imported from elsewhere may name a turn
        // past it. Such a turn is found the slow way (no turn of brain's own is ever there).
        if i64::try_from(turn).is_err() {
            let mut stmt = self.conn.prepare_cached(
                "SELECT seq, kind, payload, created_at FROM session_events
                 WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind IN ('pending_state', 'assistant_turn')",
            )?;
            let rows = stmt.query_map(rusqlite::params![self.id], event_row)?;
            let all: Vec<Event> = rows.collect::<rusqlite::Result<_>>()?;
            return Ok(all
                .into_iter()
                .filter(|e| {
                    serde_json::from_str::<serde_json::Value>(&e.payload)
                        .ok()
                        .and_then(|v| v.get("turn").and_then(serde_json::Value::as_u64))
                        == Some(turn)
                })
                .collect());
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, kind, payload, created_at FROM session_events INDEXED BY session_events_attempts
             WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind IN ('pending_state', 'assistant_turn')
               AND json_extract(payload, '$.turn') = ?2",
        )?;
        let rows = stmt.query_map(rusqlite::params![self.id, turn], event_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn permission_events(&mut self, call_id: &str) -> Result<Vec<Event>> {
        permission_events_of(self.conn, &self.id, call_id)
    }

    fn rewinds(&mut self) -> Result<Vec<Event>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, kind, payload, created_at FROM session_events INDEXED BY session_events_rewinds
             WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind = 'rewind' ORDER BY seq",
        )?;
        let rows = stmt.query_map(rusqlite::params![self.id], event_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
