//! Editing and forking (SPEC §14), each one step inside the writer's transaction: an edit
//! appends its `rewind` and the new `user_message` together (I2: both durable before any
//! provider call), a fork creates a whole session with its copied events. Neither changes
//! a written event (I1).

use rusqlite::{OptionalExtension, params};

use super::read::{events_after, shaping_events};
use super::write::SqliteWriter;
use crate::session::events::{CacheEffect, Event, SessionId};
use crate::session::store::error::Result;

impl crate::session::store::rules::Rows for SqliteWriter<'_> {
    fn now(&self) -> String {
        self.clock().now_string()
    }
    fn hold(&mut self, id: SessionId) -> Result<()> {
        self.require_session(id)
    }
    fn log(&mut self, id: SessionId) -> Result<Vec<Event>> {
        events_after(self.conn(), id, 0, None)
    }
    fn insert_session_row(
        &mut self,
        id: SessionId,
        title: Option<&str>,
        system: &str,
        now: &str,
    ) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO sessions (id, title, archived, system, created_at, updated_at)
                 VALUES (?1, ?2, 0, ?3, ?4, ?4)",
            )?
            .execute(params![id.to_string(), title, system, now])?;
        Ok(())
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
        self.apply_cache_effect(id, effect, at)
    }
    fn free_id(&mut self, id: SessionId) -> Result<()> {
        self.purge_now(id)
    }
    fn set_updated_at(&mut self, id: SessionId, at: &str) -> Result<()> {
        self.conn()
            .prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?
            .execute(params![id.to_string(), at])?;
        Ok(())
    }
    fn event_at(&mut self, id: SessionId, seq: u64) -> Result<Option<Event>> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT seq, kind, payload, created_at FROM session_events
                 WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND seq = ?2",
            )?
            .query_row(params![id.to_string(), seq], |r| {
                Ok(Event {
                    seq: r.get(0)?,
                    kind: r.get(1)?,
                    payload: r.get(2)?,
                    created_at: r.get(3)?,
                })
            })
            .optional()?)
    }
    fn shaping_events(&mut self, id: SessionId) -> Result<Vec<Event>> {
        shaping_events(self.conn(), id)
    }
}
