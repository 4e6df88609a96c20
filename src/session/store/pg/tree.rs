//! The row operations the shared write rules ([`crate::session::store::rules`]: create,
//! rename, archive, edit, fork, import) use on PostgreSQL.

use postgres::types::Type;

use super::rows::{EVENT_COLUMNS, event_row, to_i64, typed};
use super::write::PgWriter;
use super::write::{as_seq, without_nul};
use crate::session::events::{CacheEffect, Event, SessionId, kind};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::rules;
use crate::session::store::seam::WriteTxn;

/// The row operations of the shared write rules, on PostgreSQL.
impl rules::Rows for PgWriter<'_> {
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
        self.tx().query_typed(
            "INSERT INTO sessions (id, title, archived, system, created_at, updated_at)
             VALUES ($1, $2, false, $3, $4::timestamptz, $4::timestamptz)",
            &[
                typed(&id.as_uuid(), Type::UUID),
                typed(&title.map(without_nul), Type::TEXT),
                typed(&without_nul(system), Type::TEXT),
                typed(&now, Type::TEXT),
            ],
        )?;
        // Invisible to others until commit: as good as locked.
        self.locked.insert(id);
        Ok(())
    }
    fn insert_event_row(
        &mut self,
        id: SessionId,
        kind: &str,
        payload: &str,
        created_at: &str,
    ) -> Result<Event> {
        let seq: i64 = self
            .tx()
            .query_typed_one(
                "INSERT INTO session_events (session_id, seq, kind, payload, created_at)
                 VALUES (
                     $1,
                     (SELECT COALESCE(MAX(seq), 0) + 1 FROM session_events WHERE session_id = $1),
                     $2, $3::json, $4::timestamptz)
                 RETURNING seq",
                &[
                    typed(&id.as_uuid(), Type::UUID),
                    typed(&kind, Type::TEXT),
                    typed(&payload, Type::TEXT),
                    typed(&created_at, Type::TEXT),
                ],
            )?
            .try_get(0)?;
        Ok(rules::written(as_seq(seq)?, kind, payload, created_at))
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
