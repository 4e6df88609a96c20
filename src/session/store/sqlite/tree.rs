//! Editing and forking (SPEC §14), each one step inside the writer's transaction: an edit
//! appends its `rewind` and the new `user_message` together (I2: both durable before any
//! provider call), a fork creates a whole session with its copied events. Neither changes
//! a written event (I1).

use rusqlite::{OptionalExtension, params};

use super::read::{events_after, shaping_events};
use super::write::SqliteWriter;
use crate::session::events::{CacheEffect, Event, SessionId};
use crate::session::store::error::Result;
use crate::session::store::rules;

impl rules::Rows for SqliteWriter<'_> {
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
    /// The row with seq = the session's last + 1 and its search key (`key`: its time):
    /// safe because the writer's `BEGIN IMMEDIATE` makes the read and the insert one step.
    fn insert_event_row(
        &mut self,
        id: SessionId,
        kind: &str,
        payload: &str,
        created_at: &str,
    ) -> Result<Event> {
        let key = super::key::next_key(self.conn(), created_at)?;
        let seq: u64 = self
            .conn()
            .prepare_cached(
                "INSERT INTO session_events (session_n, seq, id, kind, payload, created_at)
                 SELECT s.n,
                        (SELECT COALESCE(MAX(e.seq), 0) + 1 FROM session_events e
                         WHERE e.session_n = s.n),
                        ?5, ?2, ?3, ?4
                 FROM sessions s WHERE s.id = ?1
                 RETURNING seq",
            )?
            .query_row(
                params![id.to_string(), kind, payload, created_at, key],
                |r| r.get(0),
            )?;
        Ok(rules::written(seq, kind, payload, created_at))
    }
    fn apply_effect(&mut self, id: SessionId, effect: &CacheEffect, now: &str) -> Result<()> {
        let key = id.to_string();
        if let Some(title) = &effect.title {
            self.conn()
                .prepare_cached("UPDATE sessions SET title = ?2 WHERE id = ?1")?
                .execute(params![key, title])?;
        }
        if let Some(archived) = effect.archived {
            self.conn()
                .prepare_cached("UPDATE sessions SET archived = ?2 WHERE id = ?1")?
                .execute(params![key, archived])?;
        }
        if effect.touches_updated_at {
            self.conn()
                .prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?
                .execute(params![key, now])?;
        }
        Ok(())
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
