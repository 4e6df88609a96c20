//! Editing and forking on PostgreSQL (SPEC §14), each one step of the write transaction,
//! with the same pure checks as the SQLite store ([`check_edit`], [`fork_point`]).

use super::rows::{EVENT_COLUMNS, event_row, to_i64};
use super::write::PgWriter;
use crate::session::events::{Event, Payload, Rewind, SessionId, UserMessage, kind};
use crate::session::projection::check_edit;
use crate::session::store::{Result, SessionRow};

impl PgWriter<'_> {
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

    /// Forks `source` into a new session (see [`crate::session::store::copy::fork`]).
    pub(super) fn fork(
        &mut self,
        source: SessionId,
        through: Option<u64>,
        active: Option<(u64, u32)>,
        upto: u64,
    ) -> Result<SessionRow> {
        crate::session::store::copy::fork(self, source, through, active, upto)
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
