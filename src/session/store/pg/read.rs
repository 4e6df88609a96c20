//! The read side on PostgreSQL: the same answers as the SQLite store's reads
//! (`store/sqlite/read.rs`), as free functions over any client or transaction.
//!
//! A function that issues more than one statement (a page, the context tail, a search's
//! abandoned marks) sees one snapshot only inside a `REPEATABLE READ` transaction: run it
//! in [`snapshot`]. On a bare client each statement sees the newest commits; because the
//! log is append-only that gives an answer a moment newer in part, never a wrong shape.
//! A session always holds its `session_started`, so the existence check is made only when
//! a read comes back empty (one round trip saved on every read of a real session).

use std::collections::HashMap;

use postgres::{GenericClient, IsolationLevel, Transaction};

use postgres::types::Type;

use super::rows::{event_row, session_row, to_i64, typed};
use crate::session::events::{Decoded, Event, Payload, SessionId};
use crate::session::projection::page::{
    Page, PageSource, attempts_needed, transcript_page as project_page,
};
use crate::session::projection::visible_compaction_boundary;
use crate::session::store::error::{Result, StoreError};
use crate::session::store::types::SessionRow;

/// [`super::rows::SESSION_COLUMNS`] as a literal, so statements can be `const` (`concat!`
/// takes literals only); a test keeps the two equal.
macro_rules! session_columns {
    () => {
        concat!(
            "id::text, title, archived, system, ",
            $crate::session::store::pg::rows::ts_text!("created_at"),
            ", ",
            $crate::session::store::pg::rows::ts_text!("updated_at")
        )
    };
}
pub(crate) use session_columns;

/// [`super::rows::EVENT_COLUMNS`] as a literal (see [`session_columns`]).
macro_rules! event_columns {
    () => {
        concat!(
            "seq, kind, payload::text, ",
            $crate::session::store::pg::rows::ts_text!("created_at")
        )
    };
}

const SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions WHERE id = $1"
);
const EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)";
const LAST_SEQ: &str = "SELECT COALESCE(MAX(seq), 0) FROM session_events WHERE session_id = $1";
/// `LIMIT NULL` is no limit.
const EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
);
/// The kinds are literals so the partial indexes (V1 compactions, V4 rewinds) match, one
/// branch each: `kind IN (both)` matches neither, and the planner scanned the table (60–80
/// ms in a 250k-event database, against 0.1).
const SHAPING: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1 AND kind = 'compaction_applied'
     UNION ALL SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1 AND kind = 'rewind' ORDER BY 1"
);
const REWINDS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1 AND kind = 'rewind' ORDER BY seq"
);
const EVENTS_BEFORE: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3"
);
/// Through `session_events_attempts` (V5, V10): the turn is compared as JSON text, which is
/// how the index holds it.
const TURN_ATTEMPTS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1
      AND kind IN ('pending_state', 'assistant_turn') AND brain_field(payload, 'turn') = $2"
);
/// The attempts of several turns in one statement (a page's window names many): one probe
/// of `session_events_attempts` (V5) per turn. Not `= ANY($2)`: with statistics the
/// planner reads the session's every attempt and filters (50 ms at 75k); `OFFSET 0` keeps
/// the lateral subquery a loop of index probes, not a hash join over the same scan. The
/// turn as JSON text comes fifth, to group them by.
const TURNS_ATTEMPTS: &str = concat!(
    "SELECT e.seq, e.kind, e.payload, e.created_at, t.key
     FROM unnest($2::text[]) AS t(key) CROSS JOIN LATERAL (
         SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1
           AND kind IN ('pending_state', 'assistant_turn') AND brain_field(payload, 'turn') = t.key
         OFFSET 0) AS e(seq, kind, payload, created_at)"
);
/// Through `session_events_permissions` (V17): a call id's questions and answers, found by
/// its hash (a call id may be longer than a b-tree row holds), then compared whole.
const PERMISSION_EVENTS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1
      AND kind IN ('permission_requested', 'permission_resolved')
      AND md5(brain_field(payload, 'call_id')) = md5($2)
      AND brain_field(payload, 'call_id') = $2 ORDER BY seq"
);
/// The questions and answers of several call ids in one statement (as [`TURNS_ATTEMPTS`]).
const CALLS_EVENTS: &str = concat!(
    "SELECT e.seq, e.kind, e.payload, e.created_at, t.key
     FROM unnest($2::text[]) AS t(key) CROSS JOIN LATERAL (
         SELECT ",
    event_columns!(),
    " FROM session_events WHERE session_id = $1
           AND kind IN ('permission_requested', 'permission_resolved')
           AND md5(brain_field(payload, 'call_id')) = md5(t.key)
           AND brain_field(payload, 'call_id') = t.key
         OFFSET 0) AS e(seq, kind, payload, created_at)"
);
/// The events filed in `questions_to_check` (V16), read whole (see the SQLite store's).
const QUESTIONS_TO_CHECK: &str = concat!(
    "SELECT q.session_id::text, e.seq, e.kind, e.payload::text, ",
    crate::session::store::pg::rows::ts_text!("e.created_at"),
    " FROM questions_to_check q
      JOIN sessions s ON s.id = q.session_id AND s.deleted_at IS NULL
      JOIN session_events e ON e.session_id = q.session_id AND e.seq = q.seq"
);
const SESSION_IDS: &str = "SELECT id::text FROM sessions ORDER BY sessions.created_at, sessions.id";

/// A read-only transaction on one snapshot (`REPEATABLE READ`): what a read of several
/// statements runs in to see the log as of one moment, as SQLite's reader transactions do.
pub fn snapshot(c: &mut postgres::Client) -> Result<Transaction<'_>> {
    Ok(c.build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?)
}

/// A session's cache row.
pub fn session(c: &mut impl GenericClient, id: SessionId) -> Result<SessionRow> {
    match c.query_typed_opt(SESSION, &[typed(&id.as_uuid(), Type::UUID)])? {
        Some(r) => session_row(&r),
        None => Err(StoreError::SessionNotFound(id)),
    }
}

/// The session's newest seq (0 for none).
pub fn last_seq(c: &mut impl GenericClient, id: SessionId) -> Result<u64> {
    let n: i64 = c
        .query_typed_one(LAST_SEQ, &[typed(&id.as_uuid(), Type::UUID)])?
        .try_get(0)?;
    seq(n)
}

/// A session's events with `seq > after_seq`, oldest first, at most `limit` of them (all
/// when `None`).
pub fn events(
    c: &mut impl GenericClient,
    id: SessionId,
    after_seq: u64,
    limit: Option<u32>,
) -> Result<Vec<Event>> {
    let events = events_after(c, id, after_seq, limit)?;
    if events.is_empty() {
        require_session(c, id)?;
    }
    Ok(events)
}

/// What the LLM context needs (SPEC §4 steps 0 and 1): `session_started`, then every event
/// after the newest *visible* compaction's boundary (the compaction among them; one a
/// later rewind hid does not count). Without one, the whole log.
pub fn events_for_context(c: &mut impl GenericClient, id: SessionId) -> Result<Vec<Event>> {
    let shaping = decode_all(&c.query_typed(SHAPING, &[typed(&id.as_uuid(), Type::UUID)])?)?;
    let boundary = visible_compaction_boundary(&shaping);
    let mut events = Vec::new();
    if boundary > 0 {
        events.extend(events_after(c, id, 0, Some(1))?);
    }
    events.extend(events_after(c, id, boundary, None)?);
    if events.is_empty() {
        require_session(c, id)?;
    }
    Ok(events)
}

/// One page of the UI transcript (SPEC §7): the newest `limit` items before `before_seq`,
/// read as a window back from `before_seq` plus what straddling items need (see
/// [`crate::session::projection::page`]), never the whole log. `active` as for
/// [`crate::session::projection::ui_transcript`].
pub fn transcript_page(
    c: &mut impl GenericClient,
    id: SessionId,
    before_seq: u64,
    limit: usize,
    active: Option<(u64, u32)>,
) -> Result<Page> {
    let mut source = PgPage {
        c: &mut *c,
        id,
        attempts: HashMap::new(),
        answers: HashMap::new(),
    };
    let page = project_page(&mut source, before_seq, limit, active)?;
    if page.items.is_empty() {
        require_session(c, id)?;
    }
    Ok(page)
}

/// Every session id, oldest first (tests and export).
pub fn session_ids(c: &mut impl GenericClient) -> Result<Vec<SessionId>> {
    c.query_typed(SESSION_IDS, &[])?
        .iter()
        .map(|r| {
            let id: String = r.try_get(0)?;
            id.parse()
                .map_err(|_| StoreError::Corrupt(format!("session id {id:?} is not a UUID")))
        })
        .collect()
}

/// The questions about `call_id` in a session and their answers, in seq order.
pub fn permission_events(
    c: &mut impl GenericClient,
    id: SessionId,
    call_id: &str,
) -> Result<Vec<Event>> {
    decode_all(&c.query_typed(
        PERMISSION_EVENTS,
        &[
            typed(&id.as_uuid(), Type::UUID),
            typed(&as_field(call_id), Type::TEXT),
        ],
    )?)
}

/// The questions and answers filed since the restart recovery last checked them (V16), in
/// no order.
pub fn questions_filed(c: &mut impl GenericClient) -> Result<Vec<(SessionId, Event)>> {
    let mut out = Vec::new();
    for r in c.query_typed(QUESTIONS_TO_CHECK, &[])? {
        let id: String = r.try_get(0)?;
        let id = id
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("session id {id:?} is not a UUID")))?;
        let seq: i64 = r.try_get(1)?;
        let seq = u64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("seq {seq}")))?;
        let event = Event {
            seq,
            kind: r.try_get(2)?,
            payload: r.try_get(3)?,
            created_at: r.try_get(4)?,
        };
        out.push((id, event));
    }
    Ok(out)
}

/// The session's rewinds, in seq order (what marks a search hit abandoned).
pub(super) fn rewinds(c: &mut impl GenericClient, id: SessionId) -> Result<Vec<Event>> {
    decode_all(&c.query_typed(REWINDS, &[typed(&id.as_uuid(), Type::UUID)])?)
}

fn require_session(c: &mut impl GenericClient, id: SessionId) -> Result<()> {
    let exists: bool = c
        .query_typed_one(EXISTS, &[typed(&id.as_uuid(), Type::UUID)])?
        .try_get(0)?;
    if exists {
        Ok(())
    } else {
        Err(StoreError::SessionNotFound(id))
    }
}

fn events_after(
    c: &mut impl GenericClient,
    id: SessionId,
    after_seq: u64,
    limit: Option<u32>,
) -> Result<Vec<Event>> {
    let limit = limit.map(i64::from);
    decode_all(&c.query_typed(
        EVENTS_AFTER,
        &[
            typed(&id.as_uuid(), Type::UUID),
            typed(&to_i64(after_seq)?, Type::INT8),
            typed(&limit, Type::INT8),
        ],
    )?)
}

fn decode_all(rows: &[postgres::Row]) -> Result<Vec<Event>> {
    rows.iter().map(event_row).collect()
}

fn seq(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("a negative seq ({n})")))
}

/// The transcript page's reads, each through the index that finds it (V4, V5). A window's
/// turns and questions are looked up together when the window is read (one statement
/// each, not one per item: a page of 500 items names ~250 turns), and handed out as the
/// walk asks for them.
struct PgPage<'c, C> {
    c: &'c mut C,
    id: SessionId,
    /// By turn as JSON text (`brain_field(payload, 'turn')`, V10): each turn's attempts.
    attempts: HashMap<String, Vec<Event>>,
    /// By call id (as [`as_field`]): the questions and answers of every call looked up.
    answers: HashMap<String, Vec<Event>>,
}

impl<C: GenericClient> PgPage<'_, C> {
    /// Looks up, in one statement each, the attempts of the window's turns and the
    /// questions and answers of its call ids that are not looked up yet.
    fn prefetch(&mut self, window: &[Event]) -> Result<()> {
        let (mut turns, mut calls) = (Vec::new(), Vec::new());
        for e in window {
            let Decoded::Known(p) = e.decode() else {
                continue;
            };
            if let Some(turn) = attempts_needed(&p).map(|t| t.to_string())
                && !self.attempts.contains_key(&turn)
            {
                self.attempts.insert(turn.clone(), Vec::new());
                turns.push(turn);
            }
            if let Payload::PermissionRequested(q) = &p
                && !self.answers.contains_key(&as_field(&q.call_id))
            {
                let call = as_field(&q.call_id);
                self.answers.insert(call.clone(), Vec::new());
                calls.push(call);
            }
        }
        let id = self.id.as_uuid();
        if !turns.is_empty() {
            let rows = self.c.query_typed(
                TURNS_ATTEMPTS,
                &[typed(&id, Type::UUID), typed(&turns, Type::TEXT_ARRAY)],
            )?;
            group(&rows, &mut self.attempts)?;
        }
        if !calls.is_empty() {
            let rows = self.c.query_typed(
                CALLS_EVENTS,
                &[typed(&id, Type::UUID), typed(&calls, Type::TEXT_ARRAY)],
            )?;
            group(&rows, &mut self.answers)?;
        }
        Ok(())
    }
}

/// A field's text as `brain_field` (V10) reads it: without its NULs, which PostgreSQL's
/// text cannot hold. Two call ids that differ only by NULs find each other's answers too;
/// the projection pairs answers with questions by their exact ids.
fn as_field(text: &str) -> String {
    text.replace('\0', "")
}

/// Adds each row's event to the list of its key (the fifth column).
fn group(rows: &[postgres::Row], into: &mut HashMap<String, Vec<Event>>) -> Result<()> {
    for r in rows {
        let key: String = r.try_get(4)?;
        into.entry(key).or_default().push(event_row(r)?);
    }
    Ok(())
}

impl<C: GenericClient> PageSource for PgPage<'_, C> {
    type Error = StoreError;

    fn events_before(&mut self, before: u64, n: usize) -> Result<Vec<Event>> {
        // A seq past bigint's range is before every stored one.
        let before = i64::try_from(before).unwrap_or(i64::MAX);
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let window = decode_all(&self.c.query_typed(
            EVENTS_BEFORE,
            &[
                typed(&self.id.as_uuid(), Type::UUID),
                typed(&before, Type::INT8),
                typed(&n, Type::INT8),
            ],
        )?)?;
        self.prefetch(&window)?;
        Ok(window)
    }

    fn turn_attempts(&mut self, turn: u64) -> Result<Vec<Event>> {
        // As JSON text: a turn past bigint's range (an import may name one) is found the
        // same way, where SQLite needs a slow path.
        let turn = turn.to_string();
        // Taken, not removed: the key stays, so a later window does not look it up again.
        if let Some(found) = self.attempts.get_mut(&turn) {
            return Ok(std::mem::take(found));
        }
        decode_all(&self.c.query_typed(
            TURN_ATTEMPTS,
            &[
                typed(&self.id.as_uuid(), Type::UUID),
                typed(&turn, Type::TEXT),
            ],
        )?)
    }

    fn permission_events(&mut self, call_id: &str) -> Result<Vec<Event>> {
        if let Some(found) = self.answers.get_mut(&as_field(call_id)) {
            return Ok(std::mem::take(found));
        }
        permission_events(self.c, self.id, call_id)
    }

    fn rewinds(&mut self) -> Result<Vec<Event>> {
        rewinds(self.c, self.id)
    }
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
