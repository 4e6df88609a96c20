//! Rows to values on PostgreSQL: the column lists every query selects, and their decoding.
//!
//! Timestamps leave PostgreSQL as the SQLite store's text (`2026-11-30T04:17:26.123456Z`,
//! UTC, microseconds) so both stores give byte-equal answers; ids as lowercase hyphenated
//! text; payloads as the JSON text exactly as written (`payload::text` of a `json` column).

use postgres::Row;
use postgres::types::{ToSql, Type};

use crate::session::events::{Event, SessionId};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::types::SessionRow;

/// `timestamptz` to the stored text format, in SQL (`to_char` with microseconds, in UTC).
macro_rules! ts_text {
    ($col:literal) => {
        concat!(
            "to_char(",
            $col,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        )
    };
}
// For the queries of sibling modules (read, list) that format other timestamp columns.
#[allow(unused_imports)]
pub(crate) use ts_text;

/// The columns [`session_row`] decodes, in order.
pub const SESSION_COLUMNS: &str = concat!(
    "id::text, title, archived, system, ",
    ts_text!("created_at"),
    ", ",
    ts_text!("updated_at")
);

/// The columns [`event_row`] decodes, in order.
pub const EVENT_COLUMNS: &str = concat!("seq, kind, payload::text, ", ts_text!("created_at"));

/// Decodes a row selected with [`SESSION_COLUMNS`].
pub fn session_row(r: &Row) -> Result<SessionRow> {
    let id: String = r.try_get(0)?;
    let id = id
        .parse::<SessionId>()
        .map_err(|_| StoreError::Corrupt(format!("session id {id:?} is not a UUID")))?;
    Ok(SessionRow {
        id,
        title: r.try_get(1)?,
        archived: r.try_get(2)?,
        system: r.try_get(3)?,
        created_at: r.try_get(4)?,
        updated_at: r.try_get(5)?,
    })
}

/// Decodes a row selected with [`EVENT_COLUMNS`].
pub fn event_row(r: &Row) -> Result<Event> {
    let seq: i64 = r.try_get(0)?;
    let seq = u64::try_from(seq)
        .map_err(|_| StoreError::Corrupt(format!("an event has a negative seq ({seq})")))?;
    Ok(Event {
        seq,
        kind: r.try_get(1)?,
        payload: r.try_get(2)?,
        created_at: r.try_get(3)?,
    })
}

/// A seq or count as PostgreSQL's `bigint`.
pub fn to_i64(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| StoreError::Refused("a number beyond the database's range"))
}

/// One parameter of a `query_typed` statement: its value and the type the statement takes.
/// `query_typed` parses, binds and runs in one round trip; `query` with SQL text prepares
/// the statement first, a round trip of its own on every call.
pub fn typed(value: &(dyn ToSql + Sync), ty: Type) -> (&(dyn ToSql + Sync), Type) {
    (value, ty)
}
