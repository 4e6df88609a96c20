//! At startup: the permission questions of attempts that no longer run (brain was killed
//! while one waited for an answer) are decided as denied `by: restart` and the decision
//! is logged, so no question stays open forever (SPEC §13, I9). Nothing else of such an
//! attempt is written: it ended as every killed attempt does (SPEC §6, "process killed":
//! its checkpoints stand as its partial).
//!
//! On PostgreSQL other servers may be running attempts: a session is recovered only while
//! this server holds its claim, so a question of an attempt another server runs (it holds
//! the claim) is left alone, and no attempt can start on the session meanwhile.

use std::collections::BTreeSet;

use super::consent::questions;
use super::engine::{Engine, lock};
use crate::session::events::{Decoded, Event, Payload, PermissionResolved, resolved_by};
use crate::session::{SessionId, StoreError};

impl Engine {
    /// Decides every question no running attempt waits on as denied by `restart`; returns
    /// how many. Run once at startup, before requests are accepted.
    pub fn resolve_orphaned_questions(&self) -> Result<usize, StoreError> {
        let store = &self.inner.store;
        let mut resolved = 0;
        for id in sessions_with_open_questions(&store.all_permission_events()?) {
            if lock(&self.inner.turns).contains_key(&id) {
                continue;
            }
            // Held while the answers are written: no attempt runs on the session anywhere.
            let Some(_claim) = self.inner.coord.claim(id)? else {
                continue;
            };
            let events = store.events(id, 0, None)?;
            let decoded: Vec<(u64, Decoded)> = events.iter().map(|e| (e.seq, e.decode())).collect();
            let open: Vec<PermissionResolved> = questions(&decoded)
                .open()
                .map(|(_, q)| PermissionResolved {
                    turn: Some(q.turn),
                    attempt: Some(q.attempt),
                    call_id: q.call_id.clone(),
                    decision: "deny".into(),
                    by: resolved_by::RESTART.into(),
                    remember: false,
                    answer_id: None,
                })
                .collect();
            for answer in open {
                store.append(id, &Payload::PermissionResolved(answer))?;
                resolved += 1;
            }
        }
        Ok(resolved)
    }
}

/// The sessions among `events` (every session's questions and answers, by session then
/// seq) with a question nothing answered.
fn sessions_with_open_questions(events: &[(SessionId, Event)]) -> BTreeSet<SessionId> {
    let mut open = BTreeSet::new();
    for session in events.chunk_by(|a, b| a.0 == b.0) {
        let decoded: Vec<(u64, Decoded)> =
            session.iter().map(|(_, e)| (e.seq, e.decode())).collect();
        if questions(&decoded).open().next().is_some() {
            open.insert(session[0].0);
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testlog::Log;

    #[test]
    fn only_sessions_with_a_question_nothing_answered_are_recovered() {
        let (a, b) = (SessionId::generate(), SessionId::generate());
        let mut answered = Log::new("s");
        let t = answered.user("one");
        answered.asked(t, "call_0", "fs__write");
        answered.answered_in(t, "call_0", "deny");
        let mut open = Log::new("s");
        let t1 = open.user("one");
        open.asked(t1, "call_0", "fs__write");
        open.answered_in(t1, "call_0", "allow");
        let t2 = open.user("two");
        open.asked(t2, "call_0", "fs__write");
        let permission = |id: SessionId, log: &Log| -> Vec<(SessionId, Event)> {
            log.events
                .iter()
                .filter(|e| e.kind.starts_with("permission_"))
                .map(|e| (id, e.clone()))
                .collect()
        };
        let mut all = permission(a, &answered);
        all.extend(permission(b, &open));
        assert_eq!(sessions_with_open_questions(&all), BTreeSet::from([b]));
    }
}
