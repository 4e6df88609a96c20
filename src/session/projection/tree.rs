//! SPEC §4 step 0: which events an edit abandoned. Pure.
//!
//! Walking the log from the end, each visible `rewind` W hides every event with
//! `W.to_seq < seq < W.seq`; a hidden rewind hides nothing. So an edit of an edit, or an
//! edit inside a branch an earlier edit left, both come out right: only the rewinds of the
//! branch being continued count.

use crate::session::events::{Decoded, Event, Payload, kind};

/// For each event (by position), whether a later visible rewind hides it. A rewind whose
/// payload does not decode hides nothing (one bad row never reshapes a session).
pub fn abandoned(events: &[Event]) -> Vec<bool> {
    // The (to_seq, seq) ranges of the visible rewinds seen so far, walking backwards.
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut hidden = vec![false; events.len()];
    for (i, e) in events.iter().enumerate().rev() {
        // `session_started` is never hidden: a rewind to 0 (only an import can write one)
        // must not take the system prompt away.
        if e.seq > 1 && ranges.iter().any(|&(to, w)| to < e.seq && e.seq < w) {
            hidden[i] = true;
            continue;
        }
        if e.kind == kind::REWIND {
            if let Decoded::Known(Payload::Rewind(r)) = e.decode() {
                ranges.push((r.to_seq, e.seq));
            }
        }
    }
    hidden
}

/// Whether a later visible rewind hides the event at `seq`. `rewinds` need hold only the
/// session's rewinds, in seq order (a rewind's own visibility depends on later rewinds
/// alone): how a search hit learns it lies in an abandoned branch.
pub fn is_abandoned(rewinds: &[Event], seq: u64) -> bool {
    let hidden = abandoned(rewinds);
    rewinds
        .iter()
        .zip(hidden)
        .filter(|(_, h)| !h)
        .filter_map(|(e, _)| match e.decode() {
            Decoded::Known(Payload::Rewind(r)) => Some((r.to_seq, e.seq)),
            _ => None,
        })
        .any(|(to, w)| to < seq && seq < w)
}

/// The events step 0 leaves visible, in their order.
pub fn visible(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .zip(abandoned(events))
        .filter_map(|(e, hidden)| (!hidden).then_some(e))
        .collect()
}

/// The boundary (`replaces_through_seq`) of the newest visible compaction, 0 without one.
/// `events` need hold only the session's rewinds and compactions (what hides a compaction
/// is decided by rewinds alone), which is how the store finds where its tail read starts.
pub fn visible_compaction_boundary(events: &[Event]) -> u64 {
    visible(events)
        .iter()
        .rev()
        .find_map(|e| match e.decode() {
            Decoded::Known(Payload::CompactionApplied(c)) => Some(c.replaces_through_seq),
            _ => None,
        })
        .unwrap_or(0)
}

/// Why a message cannot be edited (SPEC §14); each is a 409 `not_editable`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotEditable {
    #[error("seq {0} is not an event of this session")]
    NoSuchEvent(u64),
    #[error("seq {0} is not a user message")]
    NotAUserMessage(u64),
    #[error("message {0} is an earlier version (an edit already replaced it)")]
    Abandoned(u64),
    #[error("message {0} was compacted away (at or before seq {1}, the summary's boundary)")]
    Compacted(u64, u64),
}

/// Whether the event `target` (the one at `seq`, if it exists) may be edited: a user
/// message of the current branch after the newest visible compaction's boundary.
/// `shaping` holds at least the session's rewinds and compactions.
pub fn check_edit(shaping: &[Event], seq: u64, target: Option<&Event>) -> Result<(), NotEditable> {
    let Some(target) = target.filter(|e| e.seq == seq) else {
        return Err(NotEditable::NoSuchEvent(seq));
    };
    if !matches!(target.decode(), Decoded::Known(Payload::UserMessage(_))) {
        return Err(NotEditable::NotAUserMessage(seq));
    }
    let mut with_target: Vec<Event> = shaping.iter().filter(|e| e.seq != seq).cloned().collect();
    with_target.push(target.clone());
    with_target.sort_by_key(|e| e.seq);
    let hidden = abandoned(&with_target);
    if with_target
        .iter()
        .zip(hidden)
        .any(|(e, h)| e.seq == seq && h)
    {
        return Err(NotEditable::Abandoned(seq));
    }
    let boundary = visible_compaction_boundary(shaping);
    if seq <= boundary {
        return Err(NotEditable::Compacted(seq, boundary));
    }
    Ok(())
}

/// Why a fork cannot be made at the seq asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadForkPoint {
    #[error("a fork copies at least the session's start: `through_seq` must be 1 or more")]
    Zero,
    #[error("seq {0} is past the end of the session (its newest event is {1})")]
    PastEnd(u64, u64),
    #[error(
        "seq {0} is inside the answer being written (it began at seq {1}); fork before it, or after it ends"
    )]
    InsideActiveAttempt(u64, u64),
}

/// The seq a fork copies through (SPEC §14): `through` if given and allowed, else the
/// newest event of the current branch that is not part of the active attempt. `events`
/// is the whole log; `active` the running attempt as (turn, attempt). An attempt's part
/// begins at its first own event (checkpoint, tool trace, question, end), so a fork never
/// copies half an answer that is still being written.
pub fn fork_point(
    events: &[Event],
    through: Option<u64>,
    active: Option<(u64, u32)>,
) -> Result<u64, BadForkPoint> {
    let last = events.last().map_or(0, |e| e.seq);
    let attempt_start = active.and_then(|a| {
        events
            .iter()
            .find(|e| attempt_of(e) == Some(a))
            .map(|e| e.seq)
    });
    match through {
        Some(0) => Err(BadForkPoint::Zero),
        Some(s) if s > last => Err(BadForkPoint::PastEnd(s, last)),
        Some(s) => match attempt_start {
            Some(start) if s >= start => Err(BadForkPoint::InsideActiveAttempt(s, start)),
            _ => Ok(s),
        },
        None => {
            let before = attempt_start.unwrap_or(u64::MAX);
            Ok(visible(events)
                .iter()
                .rev()
                .map(|e| e.seq)
                .find(|s| *s < before)
                .unwrap_or(1))
        }
    }
}

/// The (turn, attempt) an event belongs to, for the kinds an attempt writes.
fn attempt_of(e: &Event) -> Option<(u64, u32)> {
    match e.decode() {
        Decoded::Known(Payload::PendingState(p)) => Some((p.turn, p.attempt)),
        Decoded::Known(Payload::AssistantTurn(a)) => Some((a.turn, a.attempt)),
        Decoded::Known(Payload::TurnFailed(f)) => Some((f.turn, f.attempt)),
        Decoded::Known(Payload::ToolExecution(t)) => Some((t.turn, t.attempt)),
        Decoded::Known(Payload::PermissionRequested(q)) => Some((q.turn, q.attempt)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testlog::Log;

    fn shaping(log: &Log) -> Vec<Event> {
        log.events
            .iter()
            .filter(|e| e.kind == kind::REWIND || e.kind == kind::COMPACTION_APPLIED)
            .cloned()
            .collect()
    }

    fn check(log: &Log, seq: u64) -> Result<(), NotEditable> {
        let target = log.events.iter().find(|e| e.seq == seq);
        check_edit(&shaping(log), seq, target)
    }

    #[test]
    fn only_user_messages_of_the_current_branch_after_the_boundary_are_editable() {
        let mut log = Log::new("s");
        let u1 = log.user("one");
        let a1 = log.answer(u1, 1, "first");
        let u2 = log.user("two");
        let a2 = log.answer(u2, 1, "second");
        let u3 = log.user("three");
        assert_eq!(check(&log, u1), Ok(()));
        assert_eq!(check(&log, a1), Err(NotEditable::NotAUserMessage(a1)));
        assert_eq!(check(&log, 1), Err(NotEditable::NotAUserMessage(1)));
        assert_eq!(check(&log, 99), Err(NotEditable::NoSuchEvent(99)));
        assert_eq!(check(&log, 0), Err(NotEditable::NoSuchEvent(0)));
        log.compaction("one", a1);
        assert_eq!(check(&log, u1), Err(NotEditable::Compacted(u1, a1)));
        assert_eq!(check(&log, u2), Ok(()));
        let v2 = log.edit(u2, "two, v2");
        assert_eq!(check(&log, u2), Err(NotEditable::Abandoned(u2)));
        assert_eq!(check(&log, u3), Err(NotEditable::Abandoned(u3)));
        assert_eq!(check(&log, v2), Ok(()));
        assert!(a2 < v2);
    }

    #[test]
    fn a_message_a_hidden_compaction_covered_is_editable_again() {
        let mut log = Log::new("s");
        let u1 = log.user("one");
        let a1 = log.answer(u1, 1, "first");
        let u2 = log.user("two");
        let a2 = log.answer(u2, 1, "second");
        log.compaction("one", a1);
        let u3 = log.user("three");
        log.compaction("one and two", a2);
        assert_eq!(check(&log, u2), Err(NotEditable::Compacted(u2, a2)));
        log.edit(u3, "three, v2");
        // The edit hid the newer compaction: the older one's boundary counts again.
        assert_eq!(check(&log, u2), Ok(()));
        assert_eq!(check(&log, u1), Err(NotEditable::Compacted(u1, a1)));
    }

    #[test]
    fn the_rewinds_alone_tell_whether_an_event_is_abandoned() {
        let mut log = Log::new("s");
        let u1 = log.user("one");
        log.answer(u1, 1, "first");
        let u2 = log.user("two");
        let v2 = log.edit(u2, "two, v2");
        log.edit(u1, "one, v2");
        let rewinds: Vec<Event> = log
            .events
            .iter()
            .filter(|e| e.kind == kind::REWIND)
            .cloned()
            .collect();
        let hidden = abandoned(&log.events);
        for (e, h) in log.events.iter().zip(hidden) {
            assert_eq!(is_abandoned(&rewinds, e.seq), h, "seq {}", e.seq);
        }
        assert!(is_abandoned(&rewinds, v2));
    }

    #[test]
    fn a_fork_point_defaults_to_before_the_running_attempt() {
        let mut log = Log::new("s");
        let u1 = log.user("one");
        let a1 = log.answer(u1, 1, "first");
        let u2 = log.user("two");
        assert_eq!(fork_point(&log.events, None, None), Ok(u2));
        assert_eq!(fork_point(&log.events, None, Some((u2, 1))), Ok(u2));
        let c = log.checkpoint(u2, 1, "par");
        log.checkpoint(u2, 1, "tial");
        assert_eq!(fork_point(&log.events, None, Some((u2, 1))), Ok(u2));
        assert_eq!(
            fork_point(&log.events, Some(c), Some((u2, 1))),
            Err(BadForkPoint::InsideActiveAttempt(c, c))
        );
        // Once it ended, its checkpoints are a partial like any other.
        assert_eq!(fork_point(&log.events, Some(c), None), Ok(c));
        assert_eq!(fork_point(&log.events, Some(a1), Some((u2, 1))), Ok(a1));
        assert_eq!(
            fork_point(&log.events, Some(0), None),
            Err(BadForkPoint::Zero)
        );
        assert_eq!(
            fork_point(&log.events, Some(40), None),
            Err(BadForkPoint::PastEnd(40, c + 1))
        );
        assert_eq!(fork_point(&log.events, Some(1), None), Ok(1));
    }
}
