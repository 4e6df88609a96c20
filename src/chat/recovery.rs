//! At startup: the permission questions of attempts that no longer run (brain was killed
//! while one waited for an answer) are decided as denied `by: restart` and the decision
//! is logged, so no question stays open forever (SPEC §13, I9). Nothing else of such an
//! attempt is written: it ended as every killed attempt does (SPEC §6, "process killed":
//! its checkpoints stand as its partial).
//!
//! On PostgreSQL other servers may be running attempts: a session is recovered only while
//! this server holds its claim, so a question of an attempt another server runs (it holds
//! the claim) is left alone, and no attempt can start on the session meanwhile.

use super::slot::questions;
use super::state::{Engine, lock};
use crate::session::events::{
    Decoded, Event, Payload, PermissionResolved, QuestionKey, resolved_by,
};
use crate::session::projection::questions::any_open;
use crate::session::{SessionId, StoreError};

impl Engine {
    /// Decides every question no running attempt waits on as denied by `restart`; returns
    /// how many. Run once at startup, before requests are accepted.
    ///
    /// It reads only what sessions filed since the last start (V16's `questions_to_check`,
    /// usually nothing) and then removes what it checked: the rows of a session up to a
    /// seq where every question has its answer. That holds for good, since an answer only
    /// closes a question before it, so those rows can never matter again.
    pub fn resolve_orphaned_questions(&self) -> Result<usize, StoreError> {
        let store = &self.inner.deps.store;
        let mut resolved = 0;
        let mut checked = Vec::new();
        for filed in sessions_filed(&store.questions_to_check()?) {
            if !filed.open {
                checked.push((filed.id, filed.through));
                continue;
            }
            if lock(&self.inner.registry.turns).contains_key(&filed.id) {
                continue;
            }
            // Held while the answers are written: no attempt runs on the session anywhere.
            let Some(_claim) = self.inner.registry.coord.claim(filed.id)? else {
                continue;
            };
            let mut through = filed.through;
            for answer in open_questions_denied(&store.events(filed.id, 0, None)?) {
                let e = store.append(filed.id, &Payload::PermissionResolved(answer))?;
                through = through.max(e.seq);
                resolved += 1;
            }
            checked.push((filed.id, through));
        }
        store.questions_checked(&checked)?;
        Ok(resolved)
    }
}

/// A denial `by: restart` for each question of `events` (one session's log) nothing
/// answered.
fn open_questions_denied(events: &[Event]) -> Vec<PermissionResolved> {
    let decoded: Vec<(u64, Decoded)> = events.iter().map(|e| (e.seq, e.decode())).collect();
    questions(&decoded)
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
        .collect()
}

/// One session's filed questions and answers, as the recovery sees them.
#[derive(Debug, PartialEq, Eq)]
struct Filed {
    id: SessionId,
    /// The newest seq filed.
    through: u64,
    /// Whether a question among them has no answer: only such a session is read whole.
    open: bool,
}

/// The sessions among `keys` (by session, then seq), each with what the recovery needs.
fn sessions_filed(keys: &[(SessionId, QuestionKey)]) -> Vec<Filed> {
    keys.chunk_by(|a, b| a.0 == b.0)
        .map(|session| Filed {
            id: session[0].0,
            through: session.last().map_or(0, |(_, k)| k.seq),
            open: any_open(session.iter().map(|(_, k)| k)),
        })
        .collect()
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
        let last_question = open.events.last().unwrap().seq;
        let filed = sessions_filed(&all);
        let seen: Vec<(SessionId, bool)> = filed.iter().map(|f| (f.id, f.open)).collect();
        assert_eq!(seen, vec![(a, false), (b, true)]);
        assert_eq!(filed[1].through, last_question);
    }
}
