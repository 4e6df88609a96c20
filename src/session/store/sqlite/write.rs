//! The write side: everything here runs inside one `BEGIN IMMEDIATE` transaction on the
//! writer connection (see `Store::write`).

use rusqlite::{Connection, OptionalExtension, params};

use crate::clock::Clock;
use crate::session::events::{Event, Payload, SessionId, kind};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::ledger::LedgerEntry;
use crate::session::store::rules::{self, Rows};
use crate::session::store::seam::WriteTxn;
use crate::session::store::types::SessionRow;

/// The open write transaction, handed to the closure given to `Store::write`.
pub struct SqliteWriter<'a> {
    conn: &'a Connection,
    clock: &'a Clock,
}

impl<'a> SqliteWriter<'a> {
    pub(super) fn new(conn: &'a Connection, clock: &'a Clock) -> SqliteWriter<'a> {
        SqliteWriter { conn, clock }
    }

    pub(super) fn conn(&self) -> &Connection {
        self.conn
    }

    pub(super) fn clock(&self) -> &Clock {
        self.clock
    }

    /// Refuses a missing or deleted session.
    pub(super) fn require_session(&mut self, id: SessionId) -> Result<()> {
        if WriteTxn::exists(self, id)? {
            Ok(())
        } else {
            Err(StoreError::SessionNotFound(id))
        }
    }
}

/// The write transaction's operations on SQLite (the rules they share with PostgreSQL are
/// in [`crate::session::store::rules`]).
impl WriteTxn for SqliteWriter<'_> {
    fn rows(&mut self) -> &mut dyn rules::Rows {
        self
    }
    /// Appends one event with the next seq, updating the session's cache row.
    /// `session_started` is refused: only `create_session` writes it.
    fn append(&mut self, id: SessionId, payload: &Payload) -> Result<Event> {
        rules::refuse_started(payload)?;
        self.require_session(id)?;
        let now = self.clock.now_string();
        let event = self.insert_event_row(id, payload.kind(), &payload.to_json(), &now)?;
        self.apply_effect(id, &payload.cache_effect(), &now)?;
        Ok(event)
    }
    /// Moves the session's `updated_at` to now: an attempt's end whose last event is a
    /// checkpoint (checkpoints alone do not move it, SPEC §6).
    fn touch(&mut self, id: SessionId) -> Result<()> {
        let now = self.clock.now_string();
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE sessions SET updated_at = ?2 WHERE id = ?1 AND deleted_at IS NULL",
            )?
            .execute(params![id.to_string(), now])?;
        if changed == 0 {
            return Err(StoreError::SessionNotFound(id));
        }
        Ok(())
    }
    /// The session's cache row, as of this transaction.
    fn session(&mut self, id: SessionId) -> Result<SessionRow> {
        self.conn
            .prepare_cached(
                "SELECT id, title, archived, system, created_at, updated_at
                 FROM sessions WHERE id = ?1 AND deleted_at IS NULL",
            )?
            .query_row([id.to_string()], super::read::session_row)
            .optional()?
            .ok_or(StoreError::SessionNotFound(id))?
    }
    /// The seq of the session's newest `compaction_applied` or `rewind` (0 without one):
    /// what a compaction compares before it appends. Either one changes which events the
    /// context holds, so a plan made before it is stale (an edit during a post-persist
    /// compaction must not get a summary of the branch it abandoned).
    fn newest_shaping_seq(&mut self, id: SessionId) -> Result<u64> {
        let mut newest = 0;
        for k in [kind::COMPACTION_APPLIED, kind::REWIND] {
            let seq: u64 = self
                .conn
                .prepare_cached(
                    "SELECT COALESCE(MAX(seq), 0) FROM session_events
                     WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND kind = ?2",
                )?
                .query_row(params![id.to_string(), k], |r| r.get(0))?;
            newest = newest.max(seq);
        }
        Ok(newest)
    }
    /// The session's newest seq (0 if it has no events, which a valid session never does).
    fn last_seq(&mut self, id: SessionId) -> Result<u64> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT COALESCE(MAX(seq), 0) FROM session_events
                 WHERE session_n = (SELECT n FROM sessions WHERE id = ?1)",
            )?
            .query_row([id.to_string()], |r| r.get(0))?)
    }
    /// Whether the session exists, as of this transaction.
    fn exists(&mut self, id: SessionId) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1 AND deleted_at IS NULL)",
            )?
            .query_row([id.to_string()], |r| r.get(0))?)
    }
    /// Every event of the session, as of this transaction.
    fn events(&mut self, id: SessionId) -> Result<Vec<Event>> {
        // A deleted session waiting for its purge has no events, as one never created.
        if !self.exists(id)? {
            return Ok(Vec::new());
        }
        super::read::events_after(self.conn, id, 0, None)
    }
    /// The session's events after `after_seq` (the one writer: nobody appends meanwhile).
    fn events_after(&mut self, id: SessionId, after_seq: u64) -> Result<Vec<Event>> {
        super::read::events_after(self.conn, id, after_seq, None)
    }
    fn delete_session(&mut self, id: SessionId) -> Result<()> {
        SqliteWriter::delete_session(self, id)
    }
    fn record_call(&mut self, e: &LedgerEntry) -> Result<i64> {
        SqliteWriter::record_call(self, e)
    }
    /// Removes what the session filed for the restart recovery up to `through` (V16).
    fn questions_checked(&mut self, id: SessionId, through: u64) -> Result<()> {
        self.conn
            .prepare_cached(
                "DELETE FROM questions_to_check
                 WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND seq <= ?2",
            )?
            .execute(params![id.to_string(), through])?;
        Ok(())
    }
}
