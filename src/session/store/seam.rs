//! The seam between brain and its database: one [`Store`] whatever runs underneath, SQLite
//! (`sqlite/`, a file) or PostgreSQL (`pg/`, a `postgres://` URL), chosen by what `--db`
//! names (`open.rs`). Projections, compactor, engine, API and import see only
//! [`Store`] and the write transaction [`Writer`].
//!
//! Two object-safe traits, because the two stores share no connection type: [`Backend`]
//! (the reads, and the door to a write transaction) and [`WriteTxn`] (today's writer
//! operations). An enum would put a `match` in every one of ~25 operations and make every
//! new backend edit them all; with the traits each store implements them beside its SQL.
//! [`Store::write`] stays generic over its closure's output: the `FnMut` and its value are
//! carried through one `&mut dyn FnMut` call, so `store.write(|w| w.append(..))` reads as
//! before.

use std::path::Path;

use super::ledger::{LedgerEntry, UsageReport};
use super::list::{ListQuery, SearchHit, SearchQuery, SessionPage};
pub use super::mark::AttemptMark;
use super::rules::{self, Rows};
use crate::clock::Clock;
use crate::session::events::{Decoded, Event, Payload, QuestionKey, SessionId, TitledBy};
use crate::session::projection::page::Page;
use crate::session::store::error::{Result, StoreError};
use crate::session::store::types::SessionRow;

/// The open write transaction, handed to the closure given to [`Store::write`]: every
/// operation runs in it and is committed with it (or none is).
pub type Writer<'a> = dyn WriteTxn + 'a;

/// What a write transaction can do, on either store. The rules both stores share are the
/// default methods (`rules.rs`); each store implements its statements.
pub trait WriteTxn {
    /// The store's row operations, for the write rules both stores share
    /// ([`super::rules`]): only the stores implement this trait, so the door stays inside
    /// `session::store`.
    #[doc(hidden)]
    #[allow(private_interfaces)]
    fn rows(&mut self) -> &mut dyn Rows;
    /// Creates a session and its `session_started` event (seq 1) together.
    fn create_session(&mut self, title: Option<String>, system: String) -> Result<SessionRow> {
        rules::create_session(self.rows(), title, system)
    }
    /// Appends one event with the next seq, updating the session's cache row.
    fn append(&mut self, id: SessionId, payload: &Payload) -> Result<Event>;
    /// Renames a session; the title it already has writes nothing.
    fn rename(&mut self, id: SessionId, title: String, by: TitledBy) -> Result<SessionRow> {
        rules::rename(self.rows(), id, title, by)
    }
    /// Archives or unarchives a session; the state it is in writes nothing.
    fn set_archived(&mut self, id: SessionId, archived: bool) -> Result<SessionRow> {
        rules::set_archived(self.rows(), id, archived)
    }
    /// Moves the session's `updated_at` to now.
    fn touch(&mut self, id: SessionId) -> Result<()>;
    /// The session's cache row, as of this transaction.
    fn session(&mut self, id: SessionId) -> Result<SessionRow>;
    /// The seq of the newest `compaction_applied` or `rewind` (0 without one).
    fn newest_shaping_seq(&mut self, id: SessionId) -> Result<u64>;
    /// The session's newest seq (0 without events).
    fn last_seq(&mut self, id: SessionId) -> Result<u64>;
    /// Whether the session exists, as of this transaction.
    fn exists(&mut self, id: SessionId) -> Result<bool>;
    /// Every event of the session, as of this transaction.
    fn events(&mut self, id: SessionId) -> Result<Vec<Event>>;
    /// The session's events after `after_seq`, oldest first, as of this transaction (on
    /// PostgreSQL with the session's row locked, so no other append comes in between).
    fn events_after(&mut self, id: SessionId, after_seq: u64) -> Result<Vec<Event>>;
    /// Appends `payload` for the running attempt `mark`, unless another attempt wrote to
    /// the session after the attempt's own newest write ([`StoreError::Superseded`]): I7
    /// across servers checked in the append's own transaction, so an attempt that lost its
    /// session between its claim check and this write lands nothing.
    fn append_for(
        &mut self,
        mark: &AttemptMark,
        id: SessionId,
        payload: &Payload,
    ) -> Result<Event> {
        let later = self.events_after(id, mark.after)?;
        if let Some(e) = later.iter().find(|e| mark.superseded_by(e)) {
            return Err(StoreError::Superseded { id, seq: e.seq });
        }
        let appended = self.append(id, payload)?;
        // Seq contiguity at the attempt's append: anything but the next seq after what it
        // saw means the log is no longer the one it wrote to (deleted and imported again
        // under the same id, shorter, by another server): refused, and rolled back.
        if appended.seq != later.last().map_or(mark.after, |e| e.seq) + 1 {
            return Err(StoreError::Superseded {
                id,
                seq: appended.seq,
            });
        }
        Ok(appended)
    }
    /// Imports a whole session's log byte for byte (export's other half).
    fn import_session(&mut self, id: SessionId, events: &[Event]) -> Result<()> {
        rules::import_session(self.rows(), id, events)
    }
    /// Appends imported events that continue the session's seqs exactly.
    fn extend_imported(&mut self, id: SessionId, events: &[Event]) -> Result<()> {
        rules::extend_imported(self.rows(), id, events)
    }
    /// Deletes a whole session (its ledger rows stay).
    fn delete_session(&mut self, id: SessionId) -> Result<()>;
    /// Edits the user message at `edited_seq`: a `rewind` and the new message (SPEC §14).
    fn edit(&mut self, id: SessionId, edited_seq: u64, text: &str) -> Result<Event> {
        rules::edit(self.rows(), id, edited_seq, text)
    }
    /// Forks `source` into a new session (SPEC §14).
    fn fork(
        &mut self,
        source: SessionId,
        through: Option<u64>,
        active: Option<(u64, u32)>,
        upto: u64,
    ) -> Result<SessionRow> {
        rules::fork(self.rows(), source, through, active, upto)
    }
    /// Records a provider call; returns its ledger id.
    fn record_call(&mut self, e: &LedgerEntry) -> Result<i64>;
    /// Removes what the session filed for the restart recovery up to `through` (V16):
    /// every question up to there has its answer.
    fn questions_checked(&mut self, id: SessionId, through: u64) -> Result<()>;
}

/// Seq contiguity in the shared write rules (I1): the event written after seq `prev` of
/// session `id` is `prev + 1`. Each store allocates it as `MAX(seq) + 1` inside the write
/// (its session held); anything else is a bug in a store. The panic rolls the write back
/// (SQLite's savepoint, PostgreSQL's `run_write`).
pub(super) fn assert_next_seq(id: SessionId, prev: u64, seq: u64) {
    assert_eq!(
        seq,
        prev + 1,
        "session {id}: seq {seq} written after seq {prev} (I1: seqs are 1, 2, 3… with no gap)"
    );
}

/// Whether a write's closure may run a second time (see [`Backend::write`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rerun {
    Allowed,
    Never,
}

/// One store's side of the seam: its reads, and a write transaction.
pub trait Backend: Send + Sync {
    /// Runs `f` in one write transaction, committed before this returns `Ok`; rolled back
    /// (everything `f` wrote) when `f` fails. With [`Rerun::Allowed`], a store whose
    /// connection can die under it (PostgreSQL) runs `f` once more on a fresh one when the
    /// first transaction surely did not commit.
    fn write(&self, rerun: Rerun, f: &mut dyn FnMut(&mut Writer<'_>) -> Result<()>) -> Result<()>;
    fn session(&self, id: SessionId) -> Result<SessionRow>;
    fn last_seq(&self, id: SessionId) -> Result<u64>;
    fn events(&self, id: SessionId, after_seq: u64, limit: Option<u32>) -> Result<Vec<Event>>;
    fn events_for_context(&self, id: SessionId) -> Result<Vec<Event>>;
    fn transcript_page(
        &self,
        id: SessionId,
        before_seq: u64,
        limit: usize,
        active: Option<(u64, u32)>,
    ) -> Result<Page>;
    fn permission_events(&self, id: SessionId, call_id: &str) -> Result<Vec<Event>>;
    fn questions_filed(&self) -> Result<Vec<(SessionId, Event)>>;
    fn session_ids(&self) -> Result<Vec<SessionId>>;
    fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage>;
    fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>>;
    fn usage(&self, session: Option<SessionId>) -> Result<UsageReport>;
    fn backup_to(&self, target: &Path) -> Result<()>;
    fn path(&self) -> &Path;
    fn clock(&self) -> &Clock;
    fn is_read_only(&self) -> bool;
    /// The newest schema version this binary knows for this database's dialect (what an
    /// open that migrates brings it to).
    fn schema_version(&self) -> i64;

    // Background maintenance (SQLite's purge of deleted sessions and WAL checkpoints;
    // PostgreSQL deletes at once and checkpoints itself, so these do nothing there).
    /// Wakes the purge after a delete.
    fn purge_soon(&self) {}
    /// Stops the maintenance thread (shutdown), after at most one batch or checkpoint.
    fn stop_maintenance(&self) {}
    /// How many deleted sessions still wait for their purge.
    fn pending_purges(&self) -> Result<usize> {
        Ok(0)
    }
    /// The longest a background WAL checkpoint has held the writer so far (SQLite's;
    /// benchmarks).
    fn longest_checkpoint_hold(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// Purges every deleted session now, on this thread, in batches of `batch` events;
    /// returns the longest a batch held the writer (SQLite's; benchmarks). PostgreSQL
    /// deletes at once: nothing waits.
    fn purge_pending(&self, _batch: i64) -> Result<std::time::Duration> {
        Ok(std::time::Duration::ZERO)
    }
}

/// The event log, on whichever database `--db` names.
pub struct Store {
    backend: Box<dyn Backend>,
}

impl Store {
    /// A store on the given backend.
    pub fn from_backend(backend: impl Backend + 'static) -> Store {
        Store {
            backend: Box::new(backend),
        }
    }

    /// The database: its file, or its URL without the password (for messages).
    pub fn path(&self) -> &Path {
        self.backend.path()
    }

    /// The clock the store stamps events with.
    pub fn clock(&self) -> &Clock {
        self.backend.clock()
    }

    /// Whether this store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.backend.is_read_only()
    }

    /// The newest schema version this binary knows for this database's dialect.
    pub fn schema_version(&self) -> i64 {
        self.backend.schema_version()
    }

    /// Runs `f` inside one write transaction that is committed before this returns `Ok`.
    /// If `f` fails, everything it wrote is rolled back and its error returned. `f` must
    /// not call `write` itself. `f` may run twice: when the database connection was lost
    /// before the first run's transaction committed (PostgreSQL), it runs once more on a
    /// fresh connection (its effects outside the transaction should bear that).
    pub fn write<T>(&self, mut f: impl FnMut(&mut Writer<'_>) -> Result<T>) -> Result<T> {
        let mut out = None;
        self.backend.write(Rerun::Allowed, &mut |w| {
            out = Some(f(w)?);
            Ok(())
        })?;
        out.ok_or(StoreError::Refused(
            "a write committed without running its closure",
        ))
    }

    /// [`Store::write`] for a closure that runs at most once (it consumes what it writes,
    /// an import's stream): a connection lost after it ran is
    /// [`StoreError::Unavailable`], never a second run.
    pub fn write_once<T>(&self, f: impl FnOnce(&mut Writer<'_>) -> Result<T>) -> Result<T> {
        let mut f = Some(f);
        let mut out = None;
        self.backend.write(Rerun::Never, &mut |w| {
            let f = f
                .take()
                .ok_or(StoreError::Refused("a write ran its closure twice"))?;
            out = Some(f(w)?);
            Ok(())
        })?;
        out.ok_or(StoreError::Refused(
            "a write committed without running its closure",
        ))
    }

    /// A consistent copy of the whole database at `target` (SQLite only; PostgreSQL's is
    /// `pg_dump`).
    pub fn backup_to(&self, target: &Path) -> Result<()> {
        self.backend.backup_to(target)
    }

    /// A session's cache row.
    pub fn session(&self, id: SessionId) -> Result<SessionRow> {
        self.backend.session(id)
    }

    /// The session's newest seq (0 for none), never waiting for a writer.
    pub fn last_seq(&self, id: SessionId) -> Result<u64> {
        self.backend.last_seq(id)
    }

    /// A session's events with `seq > after_seq`, oldest first, at most `limit`.
    pub fn events(&self, id: SessionId, after_seq: u64, limit: Option<u32>) -> Result<Vec<Event>> {
        self.backend.events(id, after_seq, limit)
    }

    /// What the LLM context needs (SPEC §4 steps 0 and 1).
    pub fn events_for_context(&self, id: SessionId) -> Result<Vec<Event>> {
        self.backend.events_for_context(id)
    }

    /// One page of the UI transcript (SPEC §7).
    pub fn transcript_page(
        &self,
        id: SessionId,
        before_seq: u64,
        limit: usize,
        active: Option<(u64, u32)>,
    ) -> Result<Page> {
        self.backend.transcript_page(id, before_seq, limit, active)
    }

    /// The permission questions about `call_id` in a session and their answers, in seq
    /// order.
    pub fn permission_events(&self, id: SessionId, call_id: &str) -> Result<Vec<Event>> {
        self.backend.permission_events(id, call_id)
    }

    /// The keys of the questions and answers filed since the restart recovery last
    /// checked them, in every live session: one session's keys after another's, each
    /// session's in seq order. Each key is its decoded event's (the table says only where
    /// to look), so the recovery pairs exactly as the transcript does.
    pub fn questions_to_check(&self) -> Result<Vec<(SessionId, QuestionKey)>> {
        let mut keys: Vec<(SessionId, QuestionKey)> = self
            .questions_filed()?
            .iter()
            .map(|(id, e)| (*id, QuestionKey::of(e)))
            .collect();
        keys.sort_unstable_by_key(|(id, k)| (*id, k.seq));
        Ok(keys)
    }

    /// The questions and answers filed since the restart recovery last checked them, as
    /// events, in no particular order (what [`Store::questions_to_check`] keys).
    pub fn questions_filed(&self) -> Result<Vec<(SessionId, Event)>> {
        self.backend.questions_filed()
    }

    /// Removes, for each (session, seq), what the session filed up to that seq: the
    /// recovery found every question up to there answered. One transaction.
    pub fn questions_checked(&self, checked: &[(SessionId, u64)]) -> Result<()> {
        if checked.is_empty() {
            return Ok(());
        }
        self.write(|w| {
            for &(id, through) in checked {
                w.questions_checked(id, through)?;
            }
            Ok(())
        })
    }

    /// Every session id, oldest first (tests and export).
    pub fn session_ids(&self) -> Result<Vec<SessionId>> {
        self.backend.session_ids()
    }

    /// A page of sessions, newest first by `(updated_at, id)`.
    pub fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage> {
        self.backend.list_sessions(q)
    }

    /// Messages, answers, partials, summaries and titles matching a query, as a person
    /// sees them (`search_display`: markdown stripped, a fork's copies grouped).
    pub fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>> {
        use crate::session::search_display::{MAX_FORK_DEPTH, maybe_copies, present};
        let hits = self.backend.search(q)?;
        let mut lineage = std::collections::HashMap::new();
        for mut at in maybe_copies(&hits) {
            for _ in 0..MAX_FORK_DEPTH {
                if lineage.contains_key(&at) {
                    break;
                }
                let Some(source) = self.forked_from(at)? else {
                    break;
                };
                lineage.insert(at, source);
                at = source.0;
            }
        }
        Ok(present(hits, q, &lineage))
    }

    /// Where a session was forked from: its `session_started`'s `forked_from`, when it
    /// names a session this store can read.
    fn forked_from(&self, id: SessionId) -> Result<Option<(SessionId, u64)>> {
        let first = match self.backend.events(id, 0, Some(1)) {
            Ok(events) => events.into_iter().next(),
            Err(StoreError::SessionNotFound(_)) => None,
            Err(e) => return Err(e),
        };
        Ok(match first.as_ref().map(Event::decode) {
            Some(Decoded::Known(Payload::SessionStarted(s))) => s
                .forked_from
                .and_then(|f| Some((f.session_id.parse().ok()?, f.seq))),
            _ => None,
        })
    }

    /// Deletes a whole session: at once as far as anyone can see (SQLite then purges its
    /// events in the background, PostgreSQL deletes them in this transaction).
    pub fn delete_session(&self, id: SessionId) -> Result<()> {
        self.write(|w| w.delete_session(id))?;
        self.backend.purge_soon();
        Ok(())
    }

    /// Stops background maintenance (shutdown); a pending purge resumes at next open.
    pub fn stop_maintenance(&self) {
        self.backend.stop_maintenance();
    }

    /// How many deleted sessions still wait for their purge (tests and benchmarks).
    pub fn pending_purges(&self) -> Result<usize> {
        self.backend.pending_purges()
    }

    /// The longest a background WAL checkpoint has held the writer so far (benchmarks).
    pub fn longest_checkpoint_hold(&self) -> std::time::Duration {
        self.backend.longest_checkpoint_hold()
    }

    /// Purges every deleted session now, in batches of `batch` events; returns the
    /// longest a batch held the writer (benchmarks and tests).
    pub fn purge_pending(&self, batch: i64) -> Result<std::time::Duration> {
        self.backend.purge_pending(batch)
    }

    /// Records a provider call; returns its ledger id.
    pub fn record_call(&self, e: &LedgerEntry) -> Result<i64> {
        self.write(|w| w.record_call(e))
    }

    /// Usage sums for one session (its rows outlive it), or for everything.
    pub fn usage(&self, session: Option<SessionId>) -> Result<UsageReport> {
        self.backend.usage(session)
    }
}

/// One-write conveniences (tests, import, the engine's small writes).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_seq_passes_and_a_gap_or_a_repeat_is_a_bug() {
        let id = SessionId::generate();
        assert_next_seq(id, 0, 1);
        assert_next_seq(id, 41, 42);
        for (prev, seq) in [(41, 43), (41, 41), (0, 2)] {
            let bad = std::panic::catch_unwind(|| assert_next_seq(id, prev, seq));
            assert!(bad.is_err(), "seq {seq} after {prev} must be refused");
        }
    }
}
