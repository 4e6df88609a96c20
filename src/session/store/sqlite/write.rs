//! The write side: everything here runs inside one `BEGIN IMMEDIATE` transaction on the
//! writer connection (see [`Store::write`]).

use rusqlite::{Connection, OptionalExtension, params};

use crate::clock::Clock;
use crate::session::events::{CacheEffect, Event, Payload, SessionId, TitledBy, kind};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::ledger::LedgerEntry;
use crate::session::store::rules;
use crate::session::store::seam::{Store, WriteTxn};
use crate::session::store::types::SessionRow;

/// The open write transaction, handed to the closure given to [`Store::write`].
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

    /// Inserts the row with seq = the session's last + 1 and its search key (`key`: its time). Safe only
    /// inside the writer's `BEGIN IMMEDIATE` transaction, which makes the read and the insert
    /// one step.
    pub(super) fn insert_event(
        &mut self,
        id: SessionId,
        kind: &str,
        payload: &str,
        created_at: &str,
    ) -> Result<Event> {
        let key = super::key::next_key(self.conn, created_at)?;
        let seq: u64 = self
            .conn
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
        Ok(Event {
            seq,
            kind: kind.to_owned(),
            payload: payload.to_owned(),
            created_at: created_at.to_owned(),
        })
    }

    pub(super) fn apply_cache_effect(
        &mut self,
        id: SessionId,
        effect: &CacheEffect,
        now: &str,
    ) -> Result<()> {
        let key = id.to_string();
        if let Some(title) = &effect.title {
            self.conn
                .prepare_cached("UPDATE sessions SET title = ?2 WHERE id = ?1")?
                .execute(params![key, title])?;
        }
        if let Some(archived) = effect.archived {
            self.conn
                .prepare_cached("UPDATE sessions SET archived = ?2 WHERE id = ?1")?
                .execute(params![key, archived])?;
        }
        if effect.touches_updated_at {
            self.conn
                .prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?
                .execute(params![key, now])?;
        }
        Ok(())
    }
}

impl Store {
    /// Creates a session with its `session_started` event.
    pub fn create_session(&self, title: Option<String>, system: String) -> Result<SessionRow> {
        self.write(|w| w.create_session(title.clone(), system.clone()))
    }

    /// Appends one event (see [`Writer::append`]).
    pub fn append(&self, id: SessionId, payload: &Payload) -> Result<Event> {
        self.write(|w| w.append(id, payload))
    }

    /// Renames a session (see [`Writer::rename`]).
    pub fn rename(&self, id: SessionId, title: String, by: TitledBy) -> Result<SessionRow> {
        self.write(|w| w.rename(id, title.clone(), by))
    }

    /// Archives or unarchives a session (see [`Writer::set_archived`]).
    pub fn set_archived(&self, id: SessionId, archived: bool) -> Result<SessionRow> {
        self.write(|w| w.set_archived(id, archived))
    }
}

/// The write transaction's operations on SQLite (the rules they share with PostgreSQL are
/// in [`crate::session::store::rules`]).
impl WriteTxn for SqliteWriter<'_> {
    fn create_session(&mut self, title: Option<String>, system: String) -> Result<SessionRow> {
        rules::create_session(self, title, system)
    }
    /// Appends one event with the next seq, updating the session's cache row.
    /// `session_started` is refused: only [`Writer::create_session`] writes it.
    fn append(&mut self, id: SessionId, payload: &Payload) -> Result<Event> {
        if matches!(payload, Payload::SessionStarted(_)) {
            return Err(StoreError::Refused(
                "session_started is written only when a session is created",
            ));
        }
        self.require_session(id)?;
        let now = self.clock.now_string();
        let event = self.insert_event(id, payload.kind(), &payload.to_json(), &now)?;
        self.apply_cache_effect(id, &payload.cache_effect(), &now)?;
        Ok(event)
    }
    fn rename(&mut self, id: SessionId, title: String, by: TitledBy) -> Result<SessionRow> {
        rules::rename(self, id, title, by)
    }
    fn set_archived(&mut self, id: SessionId, archived: bool) -> Result<SessionRow> {
        rules::set_archived(self, id, archived)
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
    fn import_session(&mut self, id: SessionId, events: &[Event]) -> Result<()> {
        rules::import_session(self, id, events)
    }
    fn extend_imported(&mut self, id: SessionId, events: &[Event]) -> Result<()> {
        rules::extend_imported(self, id, events)
    }
    fn delete_session(&mut self, id: SessionId) -> Result<()> {
        SqliteWriter::delete_session(self, id)
    }
    fn edit(&mut self, id: SessionId, edited_seq: u64, text: &str) -> Result<Event> {
        rules::edit(self, id, edited_seq, text)
    }
    fn fork(
        &mut self,
        source: SessionId,
        through: Option<u64>,
        active: Option<(u64, u32)>,
        upto: u64,
    ) -> Result<SessionRow> {
        rules::fork(self, source, through, active, upto)
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
