//! The row operations the shared write rules ([`crate::session::store::rules`]: create,
//! rename, archive, edit, fork, import) use on PostgreSQL.

use super::rows::{EVENT_COLUMNS, event_row, to_i64};
use super::write::PgWriter;
use crate::session::events::{CacheEffect, Event, SessionId, kind};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::seam::WriteTxn;

/// The row operations of the shared write rules, on PostgreSQL.
impl crate::session::store::rules::Rows for PgWriter<'_> {
    fn now(&self) -> String {
        self.clock().now_string()
    }
    fn hold(&mut self, id: SessionId) -> Result<()> {
        self.lock_session(id)
    }
    fn log(&mut self, id: SessionId) -> Result<Vec<Event>> {
        self.events_from(id, 0, None)
    }
    fn insert_session_row(
        &mut self,
        id: SessionId,
        title: Option<&str>,
        system: &str,
        now: &str,
    ) -> Result<()> {
        self.insert_session(id, title, system, now)
    }
    fn insert_event_row(
        &mut self,
        id: SessionId,
        kind: &str,
        payload: &str,
        created_at: &str,
    ) -> Result<Event> {
        self.insert_event(id, kind, payload, created_at)
    }
    fn apply_effect(&mut self, id: SessionId, effect: &CacheEffect, at: &str) -> Result<()> {
        self.apply_cache_effect(id, effect, at).map(|_| ())
    }
    fn free_id(&mut self, id: SessionId) -> Result<()> {
        // A delete removes the rows at once here: only a live session holds the id.
        if self.exists(id)? {
            return Err(StoreError::AlreadyExists(id));
        }
        Ok(())
    }
    fn set_updated_at(&mut self, id: SessionId, at: &str) -> Result<()> {
        self.tx().execute(
            "UPDATE sessions SET updated_at = $2::text::timestamptz WHERE id = $1",
            &[&id.as_uuid(), &at],
        )?;
        Ok(())
    }
    fn event_at(&mut self, id: SessionId, seq: u64) -> Result<Option<Event>> {
        let Ok(seq) = to_i64(seq) else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM session_events WHERE session_id = $1 AND seq = $2"
        );
        self.tx()
            .query_opt(&sql, &[&id.as_uuid(), &seq])?
            .map(|r| event_row(&r))
            .transpose()
    }

    fn shaping_events(&mut self, id: SessionId) -> Result<Vec<Event>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM session_events
             WHERE session_id = $1 AND kind IN ($2, $3) ORDER BY seq"
        );
        let rows = self.tx().query(
            &sql,
            &[&id.as_uuid(), &kind::COMPACTION_APPLIED, &kind::REWIND],
        )?;
        rows.iter().map(event_row).collect()
    }
}
