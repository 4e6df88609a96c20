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
use crate::session::events::{Decoded, Payload, PermissionResolved, QuestionKey, resolved_by};
use crate::session::projection::questions::any_open;
use crate::session::{SessionId, StoreError};

impl Engine {
    /// Decides every question no running attempt waits on as denied by `restart`; returns
    /// how many. Run once at startup, before requests are accepted.
    pub fn resolve_orphaned_questions(&self) -> Result<usize, StoreError> {
        let store = &self.inner.store;
        let mut resolved = 0;
        for id in sessions_with_open_questions(&store.question_keys()?) {
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

/// The sessions among `keys` (every session's questions and answers, by session then
/// seq) with a question nothing answered. Only these are read whole: at startup the keys
/// come from an index (V16), so a log of millions of events costs milliseconds here.
fn sessions_with_open_questions(keys: &[(SessionId, QuestionKey)]) -> BTreeSet<SessionId> {
    let mut open = BTreeSet::new();
    for session in keys.chunk_by(|a, b| a.0 == b.0) {
        let keys: Vec<QuestionKey> = session.iter().map(|(_, k)| k.clone()).collect();
        if any_open(&keys) {
            open.insert(session[0].0);
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::events::QuestionSide;
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
        let permission = |id: SessionId, log: &Log| -> Vec<(SessionId, QuestionKey)> {
            log.events
                .iter()
                .filter_map(|e| {
                    let (call_id, side) = match e.decode() {
                        Decoded::Known(Payload::PermissionRequested(q)) => (
                            q.call_id,
                            QuestionSide::Asked {
                                turn: q.turn,
                                attempt: q.attempt,
                            },
                        ),
                        Decoded::Known(Payload::PermissionResolved(r)) => (
                            r.call_id,
                            QuestionSide::Answered {
                                turn: r.turn,
                                attempt: r.attempt,
                            },
                        ),
                        _ => return None,
                    };
                    Some((
                        id,
                        QuestionKey {
                            seq: e.seq,
                            call_id,
                            side,
                        },
                    ))
                })
                .collect()
        };
        let mut all = permission(a, &answered);
        all.extend(permission(b, &open));
        assert_eq!(sessions_with_open_questions(&all), BTreeSet::from([b]));
    }
}
