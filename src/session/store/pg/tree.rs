//! Editing and forking on PostgreSQL (SPEC §14), each one step of the write transaction,
//! with the same pure checks as the SQLite store ([`check_edit`], [`fork_point`]).

use super::rows::{EVENT_COLUMNS, event_row, to_i64};
use super::write::PgWriter;
use crate::session::events::{
    Decoded, Event, ForkedFrom, Payload, Rewind, SessionArchived, SessionId, SessionStarted,
    SessionTitled, TitledBy, UserMessage, kind,
};
use crate::session::projection::{check_edit, fork_point};
use crate::session::store::tree::FORK_TITLE_SUFFIX;
use crate::session::store::{Result, SessionRow, StoreError};

impl PgWriter<'_, '_> {
    /// See the SQLite store's `edit`: the rewind and the new message together, under the
    /// session's row lock so no append slips between the check and them.
    pub(super) fn edit(&mut self, id: SessionId, edited_seq: u64, text: &str) -> Result<Event> {
        self.lock_session(id)?;
        let target = self.event_at(id, edited_seq)?;
        let shaping = self.shaping_events(id)?;
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

    /// See the SQLite store's `fork`: a new session whose events 2…S are byte copies.
    pub(super) fn fork(
        &mut self,
        source: SessionId,
        through: Option<u64>,
        active: Option<(u64, u32)>,
        upto: u64,
    ) -> Result<SessionRow> {
        let row = self.session(source)?;
        let mut events = self.events_after(source, 0, None)?;
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
        self.insert_session(id, title.as_deref(), &started.system, &now)?;
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
            // The copies apply no cache effects: the row is unarchived, the log is not.
            self.append(
                id,
                &Payload::SessionArchived(SessionArchived { archived: false }),
            )?;
        }
        self.session(id)
    }

    fn event_at(&mut self, id: SessionId, seq: u64) -> Result<Option<Event>> {
        let Ok(seq) = to_i64(seq) else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM session_events WHERE session_id = $1 AND seq = $2"
        );
        self.tx()
            .query_opt(&sql, &[&id.as_uuid(), &seq])?
            .map(|r| event_row(&r))
            .transpose()
    }

    /// The session's rewinds and compactions, in seq order (what step 0 needs).
    fn shaping_events(&mut self, id: SessionId) -> Result<Vec<Event>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM session_events
             WHERE session_id = $1 AND kind IN ($2, $3) ORDER BY seq"
        );
        let rows = self.tx().query(
            &sql,
            &[&id.as_uuid(), &kind::COMPACTION_APPLIED, &kind::REWIND],
        )?;
        rows.iter().map(event_row).collect()
    }
}
