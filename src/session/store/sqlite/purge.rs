//! Deleting a session without holding the writer (issue 19): [`SqliteWriter::delete_session`]
//! only stamps the session's row (`deleted_at`, migration V6), which every read treats as
//! missing; the events, their search index rows and at last the row itself go in batches
//! of [`PURGE_BATCH_EVENTS`], each its own trip through the writer lane, so appends
//! interleave with a long purge. The stamp is durable: a purge cut short (a crash, a
//! shutdown) resumes at the next open. Ledger rows stay.

use rusqlite::{Connection, OptionalExtension, params};

use super::write::SqliteWriter;
use crate::session::events::SessionId;
use crate::session::store::error::{Result, StoreError};

/// Events one purge transaction deletes. Each deleted event also deletes its FTS5 row
/// (the external-content `delete` trigger reads the event's text back through the
/// generated column and re-tokenises it), so an event costs ~25–30 µs to purge, about
/// three times what it cost to write: 250 events held the writer 9.5 ms on average,
/// commit and fsync included (`bench writer delete`, BENCHMARKS.md), inside the ~10 ms a
/// batch may take. A 100k-event session is then 400 transactions, ~4 s in all.
pub const PURGE_BATCH_EVENTS: i64 = 250;

impl SqliteWriter<'_> {
    /// Deletes a whole session as far as anyone can see: its row is stamped and from
    /// this commit on it answers as missing everywhere (the only removal I1 allows). Its
    /// events and index rows are purged afterwards, in the background (see [`purge`]).
    pub fn delete_session(&mut self, id: SessionId) -> Result<()> {
        self.require_session(id)?;
        let now = self.clock().now_string();
        self.conn()
            .prepare_cached("UPDATE sessions SET deleted_at = ?2 WHERE id = ?1")?
            .execute(params![id.to_string(), now])?;
        Ok(())
    }

    /// Finishes, in this transaction, the pending purge of a deleted session whose id is
    /// about to be used again (an import of the same conversation: import ids are fixed,
    /// SPEC §15). Its old events must not survive under the new session. Refuses a live
    /// session. Nothing to do when no row holds the id.
    pub(super) fn purge_now(&mut self, id: SessionId) -> Result<()> {
        let deleted: Option<bool> = self
            .conn()
            .prepare_cached("SELECT deleted_at IS NOT NULL FROM sessions WHERE id = ?1")?
            .query_row([id.to_string()], |r| r.get(0))
            .optional()?;
        match deleted {
            None => Ok(()),
            Some(false) => Err(StoreError::AlreadyExists(id)),
            Some(true) => {
                purge_batch(self.conn(), &id.to_string(), i64::MAX)?;
                Ok(())
            }
        }
    }
}

/// Deletes up to `batch` of a deleted session's newest events; when none are left,
/// its row too. Only a *deleted* session's: the id may already name a new, live session
/// (an import of the same conversation finished the purge and made it again) while the
/// maintenance thread still holds the id in the list it read before. Returns whether the session is gone. Deleting from the newest keeps what
/// is left a prefix of the log.
pub(super) fn purge_batch(conn: &Connection, id: &str, batch: i64) -> Result<bool> {
    let deleted = conn
        .prepare_cached(
            "DELETE FROM session_events
             WHERE session_n = (SELECT n FROM sessions WHERE id = ?1 AND deleted_at IS NOT NULL)
               AND seq IN (
                 SELECT seq FROM session_events
                 WHERE session_n = (SELECT n FROM sessions WHERE id = ?1 AND deleted_at IS NOT NULL)
                 ORDER BY seq DESC LIMIT ?2)",
        )?
        .execute(params![id, batch])?;
    if i64::try_from(deleted).unwrap_or(i64::MAX) >= batch {
        return Ok(false);
    }
    // No event is left (an invisible session gets no appends), so the row may go.
    conn.prepare_cached("DELETE FROM sessions WHERE id = ?1 AND deleted_at IS NOT NULL")?
        .execute([id])?;
    Ok(true)
}

/// The deleted sessions still waiting for their purge, oldest deletion first.
pub(super) fn pending(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM sessions INDEXED BY sessions_deleted
         WHERE deleted_at IS NOT NULL ORDER BY deleted_at",
    )?;
    let ids = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::store::seam::WriteTxn;
    use crate::session::store::sqlite::SqliteStore;

    /// The maintenance thread reads the deleted ids, then purges them one batch at a time;
    /// meanwhile an import may finish a purge and make the session again under its id. A
    /// batch for that id then deleted the new session's events.
    #[test]
    fn a_batch_for_an_id_a_live_session_holds_again_deletes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("t.db"), Default::default()).unwrap();
        let row = store.write(|w| w.create_session(None, "s".into())).unwrap();
        let id = row.id.to_string();
        store.write(|w| purge_batch(w.conn(), &id, 250)).unwrap();
        let events = store.write(|w| w.events(row.id)).unwrap();
        assert_eq!(events.len(), 1, "the live session keeps its events");
        assert!(store.write(|w| w.exists(row.id)).unwrap());
    }
}
