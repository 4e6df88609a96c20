//! The PostgreSQL write side: every operation of [`WriteTxn`] inside the one transaction of
//! a [`crate::session::store::Store::write`].
//!
//! `seq` (I1, SPEC §16): an append locks its session's row (`SELECT … FOR UPDATE`, or the
//! `UPDATE` of its cache row when the event changes it: the row locks that conflict with
//! each other all the same), then inserts with `MAX(seq) + 1`. Under READ COMMITTED the insert's statement sees every
//! append committed before the lock was granted, so seqs are gapless and unique; appends
//! to different sessions lock different rows and never wait for each other. A session
//! created, imported or forked in this transaction is invisible to others until commit, so
//! its own inserts need no lock. The `sessions` cache row follows each event's
//! [`CacheEffect`] (the pure part both stores share).
//!
//! Read-then-write steps (compaction's compare-and-append, an edit's check, a rename of
//! the title it already has) stay one step as on SQLite's single writer: every read of a
//! session here locks its row first, once per transaction, so two transactions about the
//! same session run one after the other and each sees the other's commit.
//!
//! A NUL cannot be stored in a PostgreSQL `text` column: the `sessions` cache's title and
//! system prompt hold U+FFFD in its place ([`without_nul`]). The events keep their payload
//! bytes exactly (a JSON `\u0000` escape), so export and the log are unchanged.

use std::collections::HashSet;

use postgres::Client;
use postgres::types::{ToSql, Type};

use super::rows::{EVENT_COLUMNS, SESSION_COLUMNS, event_row, session_row, to_i64, typed};
use crate::clock::Clock;
use crate::session::events::{CacheEffect, Event, Payload, SessionId};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::ledger::LedgerEntry;
use crate::session::store::rules::{self, Rows};
use crate::session::store::seam::WriteTxn;
use crate::session::store::types::SessionRow;

/// The open PostgreSQL write transaction.
pub struct PgWriter<'t> {
    tx: &'t mut Client,
    clock: &'t Clock,
    /// Sessions whose row this transaction holds locked (or created).
    pub(super) locked: HashSet<SessionId>,
}

impl<'t> PgWriter<'t> {
    /// The writer of the transaction open on `tx` (its `BEGIN` sent, its `COMMIT` the
    /// caller's: [`super::retry`]).
    pub fn new(tx: &'t mut Client, clock: &'t Clock) -> PgWriter<'t> {
        PgWriter {
            tx,
            clock,
            locked: HashSet::new(),
        }
    }

    pub(super) fn tx(&mut self) -> &mut Client {
        self.tx
    }

    pub(super) fn clock(&self) -> &Clock {
        self.clock
    }

    /// The session's events after `after_seq`, oldest first, at most `limit`.
    pub(super) fn events_from(
        &mut self,
        id: SessionId,
        after_seq: u64,
        limit: Option<u32>,
    ) -> Result<Vec<Event>> {
        self.lock_if_exists(id)?;
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM session_events
             WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        );
        let limit = limit.map(i64::from);
        let rows = self
            .tx
            .query(&sql, &[&id.as_uuid(), &to_i64(after_seq)?, &limit])?;
        rows.iter().map(event_row).collect()
    }

    /// Locks the session's row for this transaction (appends to it queue here), or says
    /// it does not exist.
    pub(super) fn lock_session(&mut self, id: SessionId) -> Result<()> {
        if self.lock_if_exists(id)? {
            Ok(())
        } else {
            Err(StoreError::SessionNotFound(id))
        }
    }

    /// Locks the session's row unless this transaction already holds it; whether the
    /// session exists.
    fn lock_if_exists(&mut self, id: SessionId) -> Result<bool> {
        if self.locked.contains(&id) {
            return Ok(true);
        }
        let found = self
            .tx
            .query_typed_opt(
                "SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE",
                &[typed(&id.as_uuid(), Type::UUID)],
            )?
            .is_some();
        if found {
            self.locked.insert(id);
        }
        Ok(found)
    }

    /// Updates the cache row as the effect says (which locks it); whether a row was
    /// updated (none when the effect changes nothing or the session does not exist).
    pub(super) fn apply_cache_effect(
        &mut self,
        id: SessionId,
        effect: &CacheEffect,
        now: &str,
    ) -> Result<bool> {
        if effect.title.is_none() && effect.archived.is_none() && !effect.touches_updated_at {
            return Ok(false);
        }
        let title = effect.title.clone().flatten().map(|t| without_nul(&t));
        let rows = self.tx.query_typed(
            "UPDATE sessions SET
                 title = CASE WHEN $2 THEN $3 ELSE title END,
                 archived = COALESCE($4, archived),
                 updated_at = CASE WHEN $5 THEN $6::timestamptz ELSE updated_at END
             WHERE id = $1 RETURNING 1",
            &[
                typed(&id.as_uuid(), Type::UUID),
                typed(&effect.title.is_some(), Type::BOOL),
                typed(&title, Type::TEXT),
                typed(&effect.archived, Type::BOOL),
                typed(&effect.touches_updated_at, Type::BOOL),
                typed(&now, Type::TEXT),
            ],
        )?;
        Ok(!rows.is_empty())
    }
}

/// `text` with each NUL replaced by U+FFFD, for a `text` column (which refuses NUL).
pub fn without_nul(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

pub(super) fn as_seq(seq: i64) -> Result<u64> {
    u64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("a negative seq ({seq})")))
}

impl WriteTxn for PgWriter<'_> {
    fn rows(&mut self) -> &mut dyn rules::Rows {
        self
    }
    fn append(&mut self, id: SessionId, payload: &Payload) -> Result<Event> {
        rules::refuse_started(payload)?;
        let now = self.clock.now_string();
        let effect = payload.cache_effect();
        if self.locked.contains(&id) {
            let event = self.insert_event_row(id, payload.kind(), &payload.to_json(), &now)?;
            self.apply_cache_effect(id, &effect, &now)?;
            return Ok(event);
        }
        // Updating the cache row first locks it as `SELECT … FOR UPDATE` would (the insert
        // after it sees every append committed before): one round trip fewer.
        if !self.apply_cache_effect(id, &effect, &now)? {
            self.lock_session(id)?;
        }
        self.locked.insert(id);
        self.insert_event_row(id, payload.kind(), &payload.to_json(), &now)
    }
    fn touch(&mut self, id: SessionId) -> Result<()> {
        let now = self.clock.now_string();
        let changed = self.tx.execute(
            "UPDATE sessions SET updated_at = $2::text::timestamptz WHERE id = $1",
            &[&id.as_uuid(), &now],
        )?;
        if changed == 0 {
            return Err(StoreError::SessionNotFound(id));
        }
        Ok(())
    }
    fn session(&mut self, id: SessionId) -> Result<SessionRow> {
        self.lock_session(id)?;
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1");
        match self.tx.query_opt(&sql, &[&id.as_uuid()])? {
            Some(r) => session_row(&r),
            None => Err(StoreError::SessionNotFound(id)),
        }
    }
    fn newest_shaping_seq(&mut self, id: SessionId) -> Result<u64> {
        self.lock_if_exists(id)?;
        let seq: i64 = self
            .tx
            // One subquery per partial index (V1 compactions, V4 rewinds): `kind IN (both)`
            // matches neither, and the planner scanned the table.
            .query_typed_one(
                "SELECT COALESCE(GREATEST(
                     (SELECT MAX(seq) FROM session_events
                      WHERE session_id = $1 AND kind = 'compaction_applied'),
                     (SELECT MAX(seq) FROM session_events
                      WHERE session_id = $1 AND kind = 'rewind')), 0)",
                &[typed(&id.as_uuid(), Type::UUID)],
            )?
            .try_get(0)?;
        as_seq(seq)
    }
    fn last_seq(&mut self, id: SessionId) -> Result<u64> {
        self.lock_if_exists(id)?;
        let seq: i64 = self
            .tx
            .query_one(
                "SELECT COALESCE(MAX(seq), 0) FROM session_events WHERE session_id = $1",
                &[&id.as_uuid()],
            )?
            .try_get(0)?;
        as_seq(seq)
    }
    fn exists(&mut self, id: SessionId) -> Result<bool> {
        self.lock_if_exists(id)
    }
    fn events(&mut self, id: SessionId) -> Result<Vec<Event>> {
        self.events_from(id, 0, None)
    }
    fn events_after(&mut self, id: SessionId, after_seq: u64) -> Result<Vec<Event>> {
        self.events_from(id, after_seq, None)
    }
    /// Deletes the session's events and cache row at once: PostgreSQL has no single
    /// writer for a long delete to hold up. Ledger rows stay.
    fn delete_session(&mut self, id: SessionId) -> Result<()> {
        self.lock_session(id)?;
        self.tx.execute(
            "DELETE FROM session_events WHERE session_id = $1",
            &[&id.as_uuid()],
        )?;
        self.tx
            .execute("DELETE FROM sessions WHERE id = $1", &[&id.as_uuid()])?;
        self.locked.remove(&id);
        Ok(())
    }
    fn record_call(&mut self, e: &LedgerEntry) -> Result<i64> {
        let now = self.clock.now_string();
        let session = e.session_id.map(|s| s.as_uuid());
        let numbers = [
            to_i64(e.usage.input_tokens)?,
            to_i64(e.usage.output_tokens)?,
            to_i64(e.usage.cache_read_tokens)?,
            to_i64(e.usage.cache_write_tokens)?,
            to_i64(e.latency_ms)?,
        ];
        let params: [&(dyn ToSql + Sync); 12] = [
            &session,
            &e.purpose.as_str(),
            &e.provider,
            &e.model,
            &numbers[0],
            &numbers[1],
            &numbers[2],
            &numbers[3],
            &numbers[4],
            &e.status.as_str(),
            &e.error_code,
            &now,
        ];
        Ok(self
            .tx
            .query_one(
                "INSERT INTO ledger (session_id, purpose, provider, model, input_tokens,
                     output_tokens, cache_read_tokens, cache_write_tokens, latency_ms, status,
                     error_code, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::text::timestamptz)
                 RETURNING id",
                &params,
            )?
            .try_get(0)?)
    }
    fn questions_checked(&mut self, id: SessionId, through: u64) -> Result<()> {
        self.tx.execute(
            "DELETE FROM questions_to_check WHERE session_id = $1 AND seq <= $2",
            &[&id.as_uuid(), &to_i64(through)?],
        )?;
        Ok(())
    }
}
