//! Editing and forking (SPEC §14), each one step inside the writer's transaction: an edit
//! appends its `rewind` and the new `user_message` together (I2: both durable before any
//! provider call), a fork creates a whole session with its copied events. Neither changes
//! a written event (I1).

use rusqlite::{OptionalExtension, params};

use super::read::{events_after, shaping_events};
use super::{Result, SessionRow, SqliteWriter};
use crate::session::events::{CacheEffect, Event, Payload, Rewind, SessionId, UserMessage};
use crate::session::projection::check_edit;

/// Appended to a source's title to name its fork.
pub const FORK_TITLE_SUFFIX: &str = " (fork)";

impl SqliteWriter<'_> {
    /// Edits the user message at `edited_seq`: `rewind {to_seq: edited_seq − 1,
    /// edited_seq}` and the new `user_message`, in this one transaction. Returns the new
    /// message. Refused with [`StoreError::NotEditable`] unless the message is a user
    /// message of the current branch after the newest visible compaction's boundary. An
    /// archived session is unarchived first, as a send does.
    pub fn edit(&mut self, id: SessionId, edited_seq: u64, text: &str) -> Result<Event> {
        self.require_session(id)?;
        let target = self.event_at(id, edited_seq)?;
        let shaping = shaping_events(self.conn(), id)?;
        check_edit(&shaping, edited_seq, target.as_ref())?;
        if self.session(id)?.archived {
            self.set_archived(id, false)?;
        }
        self.append(
            id,
            &Payload::Rewind(Rewind {
                to_seq: edited_seq - 1,
                edited_seq,
            }),
        )?;
        self.append(
            id,
            &Payload::UserMessage(UserMessage {
                text: text.to_owned(),
            }),
        )
    }

    /// Forks `source` into a new session (see [`super::copy::fork`], shared with the
    /// PostgreSQL store).
    pub fn fork(
        &mut self,
        source: SessionId,
        through: Option<u64>,
        active: Option<(u64, u32)>,
        upto: u64,
    ) -> Result<SessionRow> {
        super::copy::fork(self, source, through, active, upto)
    }

    /// The session's event at `seq`, if there is one. A seq past what the database can
    /// hold is no event.
    fn event_at(&self, id: SessionId, seq: u64) -> Result<Option<Event>> {
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
}

impl super::copy::Rows for SqliteWriter<'_> {
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
}
