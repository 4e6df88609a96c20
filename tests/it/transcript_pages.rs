//! Transcript pages read from a real SQLite file (SPEC §7 `before_seq`, `limit`, `more`)
//! equal the whole log's transcript, sliced: the page read's SQL (the V5 indexes by turn
//! and call id, the rewinds) finds every event an item on the page needs, whatever lies
//! outside the window.

use brain::session::events::{Event, SessionId};
use brain::session::projection::ui_transcript;
use brain::session::{Payload, Store};
use proptest::prelude::*;

use crate::support::*;

/// One step of a generated log; indexes pick among what exists (modulo its length).
#[derive(Clone, Debug)]
enum Step {
    User,
    /// A checkpoint of some attempt (new or earlier), anywhere later in the log.
    Checkpoint(usize),
    /// Another attempt of some turn.
    Retry(usize),
    /// Some attempt completes.
    Complete(usize),
    Ask(usize),
    Answer(usize),
    Edit(usize),
    Compact(usize),
    Title,
    Unreadable,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::User),
        5 => any::<usize>().prop_map(Step::Checkpoint),
        1 => any::<usize>().prop_map(Step::Retry),
        2 => any::<usize>().prop_map(Step::Complete),
        1 => any::<usize>().prop_map(Step::Ask),
        1 => any::<usize>().prop_map(Step::Answer),
        1 => any::<usize>().prop_map(Step::Edit),
        1 => any::<usize>().prop_map(Step::Compact),
        1 => Just(Step::Title),
        1 => Just(Step::Unreadable),
    ]
}

fn build(steps: &[Step]) -> Vec<Event> {
    let mut events: Vec<Event> = Vec::new();
    let mut push = |events: &mut Vec<Event>, kind: &str, payload: String| {
        let seq = events.len() as u64 + 1;
        events.push(Event {
            seq,
            kind: kind.into(),
            payload,
            created_at: format!("2026-11-30T00:00:00.{seq:06}Z"),
        });
        seq
    };
    let p = |events: &mut Vec<Event>,
             payload: Payload,
             push: &mut dyn FnMut(&mut Vec<Event>, &str, String) -> u64| {
        push(events, payload.kind(), payload.to_json())
    };
    push(&mut events, "session_started", r#"{"system": "s"}"#.into());
    let mut turns: Vec<u64> = Vec::new();
    let mut attempts: Vec<(u64, u32)> = Vec::new();
    let mut calls: Vec<String> = Vec::new();
    for s in steps {
        let pick = |i: usize, n: usize| i % n.max(1);
        match s {
            Step::User => turns.push(p(&mut events, user("q"), &mut push)),
            Step::Checkpoint(i) if !turns.is_empty() => {
                if attempts.is_empty() || i % 3 == 0 {
                    attempts.push((turns[turns.len() - 1], 1));
                }
                let (t, a) = attempts[pick(*i, attempts.len())];
                p(&mut events, pending(t, a, &format!("{t}.{a} ")), &mut push);
            }
            Step::Retry(i) if !turns.is_empty() => {
                let t = turns[pick(*i, turns.len())];
                let a = attempts.iter().filter(|x| x.0 == t).count() as u32 + 1;
                attempts.push((t, a));
                p(&mut events, pending(t, a, "retry "), &mut push);
            }
            Step::Complete(i) if !attempts.is_empty() => {
                let (t, a) = attempts[pick(*i, attempts.len())];
                p(&mut events, answer(t, a, "done"), &mut push);
            }
            Step::Ask(i) if !turns.is_empty() => {
                let t = turns[pick(*i, turns.len())];
                let call = format!("call{}", events.len());
                let q = format!(
                    r#"{{"turn": {t}, "attempt": 1, "call_id": "{call}", "name": "fs__write_file", "args": "{{}}"}}"#
                );
                push(&mut events, "permission_requested", q);
                calls.push(call);
            }
            Step::Answer(i) if !calls.is_empty() => {
                let call = &calls[pick(*i, calls.len())];
                let decision = if i % 2 == 0 { "allow" } else { "deny" };
                let r = format!(
                    r#"{{"call_id": "{call}", "decision": "{decision}", "by": "user", "remember": {}}}"#,
                    i % 3 == 0
                );
                push(&mut events, "permission_resolved", r);
            }
            Step::Edit(i) if !turns.is_empty() => {
                let edited = turns[pick(*i, turns.len())];
                let r = format!(r#"{{"to_seq": {}, "edited_seq": {edited}}}"#, edited - 1);
                push(&mut events, "rewind", r);
                turns.push(p(&mut events, user("edited"), &mut push));
            }
            Step::Compact(i) => {
                let through = pick(*i, events.len()) as u64 + 1;
                p(&mut events, compaction("summary", through), &mut push);
            }
            Step::Title => {
                p(
                    &mut events,
                    titled("t", brain::session::events::TitledBy::User),
                    &mut push,
                );
            }
            Step::Unreadable => {
                push(&mut events, "pending_state", r#"{"turn": "x"}"#.into());
            }
            _ => {}
        }
    }
    events
}

fn check(
    store: &Store,
    id: SessionId,
    events: &[Event],
    active: Option<(u64, u32)>,
) -> Result<(), TestCaseError> {
    let all = ui_transcript(events, active);
    let last = events.len() as u64;
    for limit in [1usize, 4, 500] {
        for before in 1..=last + 1 {
            let older: Vec<_> = all.iter().filter(|i| i.seq < before).cloned().collect();
            let start = older.len().saturating_sub(limit);
            let page = store.transcript_page(id, before, limit, active).unwrap();
            prop_assert_eq!(
                &page.items[..],
                &older[start..],
                "before_seq {} limit {}",
                before,
                limit
            );
            prop_assert_eq!(
                page.more,
                start > 0,
                "before_seq {} limit {}",
                before,
                limit
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_page_read_from_sqlite_equals_the_whole_log_sliced(steps in proptest::collection::vec(step(), 1..60), running: usize) {
        let db = TempDb::new();
        let store = db.open();
        let events = build(&steps);
        let id = SessionId::generate();
        store.write(|w| w.import_session(id, &events)).unwrap();
        check(&store, id, &events, None)?;
        // The newest attempt, as the running one.
        let active = events.iter().rev().find_map(|e| match e.decode() {
            brain::session::Decoded::Known(Payload::PendingState(c)) if running % 2 == 0 => Some((c.turn, c.attempt)),
            _ => None,
        });
        check(&store, id, &events, active)?;
    }
}
