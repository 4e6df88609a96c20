//! The write rules written once for both stores: an edit (SPEC §14: its `rewind` and the
//! new `user_message` together), a fork (SPEC §14), an import of a whole session and one
//! that extends a session (SPEC §15). Which events, in what order, which checks, which
//! cache effects: the same on SQLite and PostgreSQL; only the few row operations differ,
//! and each store supplies those ([`Rows`]).

use super::seam::{WriteTxn, assert_next_seq};
use crate::session::events::{
    CacheEffect, Decoded, Event, ForkedFrom, Payload, Rewind, SessionArchived, SessionId,
    SessionStarted, SessionTitled, TitledBy, UserMessage, kind,
};
use crate::session::projection::{check_edit, fork_point};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::types::SessionRow;

/// Appended to a source's title to name its fork.
pub const FORK_TITLE_SUFFIX: &str = " (fork)";

/// The row operations a store gives the shared writes, inside its write transaction.
pub trait Rows: WriteTxn {
    /// The current time in the stored format.
    fn now(&self) -> String;
    /// Refuses a missing (or deleted) session; PostgreSQL also locks its row, so nothing
    /// else appends to it until the transaction ends.
    fn hold(&mut self, id: SessionId) -> Result<()>;
    /// The session's whole log as of this transaction.
    fn log(&mut self, id: SessionId) -> Result<Vec<Event>>;
    /// Inserts a new session's cache row (its `session_started` follows).
    fn insert_session_row(
        &mut self,
        id: SessionId,
        title: Option<&str>,
        system: &str,
        now: &str,
    ) -> Result<()>;
    /// Inserts one event with the session's next seq, its payload bytes as given; no
    /// cache effect.
    fn insert_event_row(
        &mut self,
        id: SessionId,
        kind: &str,
        payload: &str,
        created_at: &str,
    ) -> Result<Event>;
    /// Applies an event's effect on the cache row.
    fn apply_effect(&mut self, id: SessionId, effect: &CacheEffect, at: &str) -> Result<()>;
    /// Refuses a live session with this id ([`StoreError::AlreadyExists`]); a deleted one
    /// still waiting for SQLite's purge is purged first (the new session must not inherit
    /// its events).
    fn free_id(&mut self, id: SessionId) -> Result<()>;
    /// Sets the cache row's `updated_at`.
    fn set_updated_at(&mut self, id: SessionId, at: &str) -> Result<()>;
    /// The session's event at `seq`, if there is one (a seq past what the database can
    /// hold is none).
    fn event_at(&mut self, id: SessionId, seq: u64) -> Result<Option<Event>>;
    /// The session's rewinds and compactions, in seq order (what SPEC §4 step 0 needs).
    fn shaping_events(&mut self, id: SessionId) -> Result<Vec<Event>>;
}

/// The event a store just inserted, as it was written.
pub(super) fn written(seq: u64, kind: &str, payload: &str, created_at: &str) -> Event {
    Event {
        seq,
        kind: kind.to_owned(),
        payload: payload.to_owned(),
        created_at: created_at.to_owned(),
    }
}

/// Refuses `session_started` in an append: only creating a session writes it.
pub(super) fn refuse_started(payload: &Payload) -> Result<()> {
    if matches!(payload, Payload::SessionStarted(_)) {
        return Err(StoreError::Refused(
            "session_started is written only when a session is created",
        ));
    }
    Ok(())
}

/// Creates a session and its `session_started` event (seq 1) together.
pub(super) fn create_session(
    w: &mut dyn Rows,
    title: Option<String>,
    system: String,
) -> Result<SessionRow> {
    let id = SessionId::generate();
    let now = w.now();
    w.insert_session_row(id, title.as_deref(), &system, &now)?;
    let started = Payload::SessionStarted(SessionStarted {
        title,
        system,
        forked_from: None,
        imported_from: None,
    });
    let first = w.insert_event_row(id, started.kind(), &started.to_json(), &now)?;
    assert_next_seq(id, 0, first.seq);
    w.session(id)
}

/// Renames a session (a `session_titled` event). Setting the title it already has writes
/// nothing.
pub(super) fn rename(
    w: &mut dyn Rows,
    id: SessionId,
    title: String,
    by: TitledBy,
) -> Result<SessionRow> {
    let row = w.session(id)?;
    if row.title.as_deref() == Some(title.as_str()) {
        return Ok(row);
    }
    w.append(id, &Payload::SessionTitled(SessionTitled { title, by }))?;
    w.session(id)
}

/// Archives or unarchives a session (a `session_archived` event). Asking for the state it
/// is already in writes nothing.
pub(super) fn set_archived(w: &mut dyn Rows, id: SessionId, archived: bool) -> Result<SessionRow> {
    let row = w.session(id)?;
    if row.archived == archived {
        return Ok(row);
    }
    w.append(id, &Payload::SessionArchived(SessionArchived { archived }))?;
    w.session(id)
}

/// Edits the user message at `edited_seq`: `rewind {to_seq: edited_seq − 1, edited_seq}`
/// and the new `user_message`, in this one transaction, with the session held so no append
/// slips between the check and them. Returns the new message. Refused with
/// [`StoreError::NotEditable`] unless the message is a user message of the current branch
/// after the newest visible compaction's boundary. An archived session is unarchived
/// first, as a send does.
pub(super) fn edit(w: &mut dyn Rows, id: SessionId, edited_seq: u64, text: &str) -> Result<Event> {
    w.hold(id)?;
    let target = w.event_at(id, edited_seq)?;
    let shaping = w.shaping_events(id)?;
    check_edit(&shaping, edited_seq, target.as_ref())?;
    if w.session(id)?.archived {
        w.set_archived(id, false)?;
    }
    w.append(
        id,
        &Payload::Rewind(Rewind {
            to_seq: edited_seq - 1,
            edited_seq,
        }),
    )?;
    w.append(
        id,
        &Payload::UserMessage(UserMessage {
            text: text.to_owned(),
        }),
    )
}

/// Imports `events` whole as the new session `id` (SPEC §15): the same seqs (1, 2, … with
/// no gap), kinds, payload bytes and times, the cache row derived from the events as
/// appends would have derived it.
pub(super) fn import_session(w: &mut dyn Rows, id: SessionId, events: &[Event]) -> Result<()> {
    w.free_id(id)?;
    let Some(first) = events.first() else {
        return Err(StoreError::Corrupt(format!("session {id} has no events")));
    };
    let Decoded::Known(Payload::SessionStarted(started)) = first.decode() else {
        return Err(StoreError::Corrupt(format!(
            "session {id} does not begin with session_started"
        )));
    };
    w.insert_session_row(
        id,
        started.title.as_deref(),
        &started.system,
        &first.created_at,
    )?;
    let mut latest = first.created_at.clone();
    for (i, e) in events.iter().enumerate() {
        if e.seq != i as u64 + 1 {
            return Err(StoreError::Corrupt(format!(
                "session {id}: seq {} where {} was expected",
                e.seq,
                i + 1
            )));
        }
        let copy = w.insert_event_row(id, &e.kind, &e.payload, &e.created_at)?;
        assert_next_seq(id, i as u64, copy.seq);
        if let (Decoded::Known(p), true) = (e.decode(), i > 0) {
            let effect = p.cache_effect();
            w.apply_effect(id, &effect, &e.created_at)?;
            if effect.touches_updated_at && e.created_at > latest {
                latest = e.created_at.clone();
            }
        }
    }
    // The newest of the times that moved it, not the last: a fork's copies keep their
    // source's older times after its own, newer `session_started` (and live, times only
    // grow, so the two agree).
    w.set_updated_at(id, &latest)
}

/// Forks `source` through `through` (or the default point, see [`fork_point`]) into a new
/// session: `session_started` with the same system prompt, `forked_from` and the title
/// `<title> (fork)`, then copies of events 2…S with the same seqs, kinds, payload bytes and
/// `created_at`. `active` is the source's running attempt, if any; `upto` is the newest seq
/// the caller saw (a later attempt's events are never part of the fork). When the copies
/// rename or archive the session, one more event after them says the fork's own title (or
/// unarchives it), so the cache row stays what the log says.
pub(super) fn fork(
    w: &mut dyn Rows,
    source: SessionId,
    through: Option<u64>,
    active: Option<(u64, u32)>,
    upto: u64,
) -> Result<SessionRow> {
    let row = w.session(source)?;
    let mut events = w.log(source)?;
    events.retain(|e| e.seq <= upto);
    let through = fork_point(&events, through, active)?;
    let Some(Decoded::Known(Payload::SessionStarted(started))) = events.first().map(Event::decode)
    else {
        return Err(StoreError::Corrupt(format!(
            "session {source} does not begin with session_started"
        )));
    };
    let id = SessionId::generate();
    let now = w.now();
    let title = row.title.map(|t| format!("{t}{FORK_TITLE_SUFFIX}"));
    w.insert_session_row(id, title.as_deref(), &started.system, &now)?;
    let head = Payload::SessionStarted(SessionStarted {
        title: title.clone(),
        system: started.system,
        forked_from: Some(ForkedFrom {
            session_id: source.to_string(),
            seq: through,
        }),
        imported_from: None,
    });
    let first = w.insert_event_row(id, head.kind(), &head.to_json(), &now)?;
    assert_next_seq(id, 0, first.seq);
    let (mut renamed, mut archived) = (false, false);
    for e in events.iter().skip(1).take_while(|e| e.seq <= through) {
        let copy = w.insert_event_row(id, &e.kind, &e.payload, &e.created_at)?;
        if copy.seq != e.seq {
            return Err(StoreError::Corrupt(format!(
                "session {source} has a gap before seq {}",
                e.seq
            )));
        }
        match e.decode() {
            Decoded::Known(Payload::SessionTitled(_)) => renamed = true,
            Decoded::Known(Payload::SessionArchived(a)) => archived = a.archived,
            _ => {}
        }
    }
    if let (true, Some(t)) = (renamed, title) {
        let titled = SessionTitled {
            title: t,
            by: TitledBy::Auto,
        };
        w.append(id, &Payload::SessionTitled(titled))?;
    }
    if archived {
        // The copies apply no cache effects: the row is unarchived, the log is not.
        let unarchived = SessionArchived { archived: false };
        w.append(id, &Payload::SessionArchived(unarchived))?;
    }
    w.session(id)
}

/// Appends events an import made (SPEC §15) with their own timestamps: they must continue
/// the session's seqs exactly; `session_started` is refused.
pub(super) fn extend_imported(w: &mut dyn Rows, id: SessionId, events: &[Event]) -> Result<()> {
    w.hold(id)?;
    let last = w.last_seq(id)?;
    if last == 0 {
        return Err(StoreError::SessionNotFound(id));
    }
    for (i, e) in events.iter().enumerate() {
        if e.seq != last + i as u64 + 1 || e.kind == kind::SESSION_STARTED {
            return Err(StoreError::Corrupt(format!(
                "session {id}: an imported {} at seq {} does not continue the log",
                e.kind, e.seq
            )));
        }
        let copy = w.insert_event_row(id, &e.kind, &e.payload, &e.created_at)?;
        assert_next_seq(id, last + i as u64, copy.seq);
        if let Decoded::Known(p) = e.decode() {
            w.apply_effect(id, &p.cache_effect(), &e.created_at)?;
        }
    }
    Ok(())
}
