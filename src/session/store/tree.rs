//! Editing and forking (SPEC §14), each one step inside the writer's transaction: an edit
//! appends its `rewind` and the new `user_message` together (I2: both durable before any
//! provider call), a fork creates a whole session with its copied events. Neither changes
//! a written event (I1).

use rusqlite::{OptionalExtension, params};

use super::read::{events_after, shaping_events};
use super::{Result, SessionRow, SqliteWriter, StoreError};
use crate::session::events::{
    Decoded, Event, ForkedFrom, Payload, Rewind, SessionArchived, SessionId, SessionStarted,
    SessionTitled, TitledBy, UserMessage,
};
use crate::session::projection::{check_edit, fork_point};

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

    /// Forks `source` through `through` (or the default point, see
    /// [`fork_point`]) into a new session: `session_started` with the same system prompt,
    /// `forked_from` and the title `<title> (fork)`, then copies of events 2…S with the
    /// same seqs, kinds, payload bytes and `created_at`. `active` is the source's running
    /// attempt, if any. When the copies rename or archive the session, one more event
    /// after them says the fork's own title (or unarchives it), so the cache row stays
    /// what the log says.
    pub fn fork(
        &mut self,
        source: SessionId,
        through: Option<u64>,
        active: Option<(u64, u32)>,
        upto: u64,
    ) -> Result<SessionRow> {
        let row = self.session(source)?;
        // What the log held when the caller saw which attempt was active: a later
        // attempt's events come after it and are never part of the fork.
        let mut events = events_after(self.conn(), source, 0, None)?;
        events.retain(|e| e.seq <= upto);
        let through = fork_point(&events, through, active)?;
        let Some(Decoded::Known(Payload::SessionStarted(started))) =
            events.first().map(Event::decode)
        else {
            return Err(StoreError::Corrupt(format!(
                "session {source} does not begin with session_started"
            )));
        };
        let id = SessionId::generate();
        let now = self.clock().now_string();
        let title = row.title.map(|t| format!("{t}{FORK_TITLE_SUFFIX}"));
        self.conn()
            .prepare_cached(
                "INSERT INTO sessions (id, title, archived, system, created_at, updated_at)
                 VALUES (?1, ?2, 0, ?3, ?4, ?4)",
            )?
            .execute(params![id.to_string(), title, started.system, now])?;
        let head = Payload::SessionStarted(SessionStarted {
            title: title.clone(),
            system: started.system,
            forked_from: Some(ForkedFrom {
                session_id: source.to_string(),
                seq: through,
            }),
            imported_from: None,
        });
        self.insert_event(id, head.kind(), &head.to_json(), &now)?;
        let (mut renamed, mut archived) = (false, false);
        for e in events.iter().skip(1).take_while(|e| e.seq <= through) {
            let copy = self.insert_event(id, &e.kind, &e.payload, &e.created_at)?;
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
            self.append(
                id,
                &Payload::SessionTitled(SessionTitled {
                    title: t,
                    by: TitledBy::Auto,
                }),
            )?;
        }
        if archived {
            self.append(
                id,
                &Payload::SessionArchived(SessionArchived { archived: false }),
            )?;
        }
        self.session(id)
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
                 WHERE session_id = ?1 AND seq = ?2",
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
