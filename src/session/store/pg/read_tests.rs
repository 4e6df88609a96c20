//! Tests of the PostgreSQL reads (`read.rs`): the whole log's projections and SQLite's
//! answers on the same data.

use std::cell::RefCell;
use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;
use crate::session::projection::page::InMemory;
use crate::session::projection::{llm_context, ui_transcript};
use crate::session::store::pg::fixture::{Twin, same_events, twin};
use crate::session::store::pg::rows::{EVENT_COLUMNS, SESSION_COLUMNS};
use crate::session::testlog::Log;

#[test]
fn the_column_literals_are_the_rows_columns() {
    assert_eq!(session_columns!(), SESSION_COLUMNS);
    assert_eq!(event_columns!(), EVENT_COLUMNS);
}

/// A session with one of everything a page or the context has to get right: an
/// interrupted attempt whose checkpoints lie far apart (more than a first window),
/// its completed retry, a permission question answered much later, a compaction, and
/// an edit whose rewind hides that compaction.
fn long_log() -> Log {
    let mut log = Log::new("be brief");
    log.title("Otters");
    let t1 = log.user("where do otters live?");
    log.checkpoint(t1, 1, "By rivers ");
    let asked = log.asked(t1, "call-1", "fs__write_file");
    for _ in 0..80 {
        log.tool();
    }
    log.checkpoint(t1, 1, "and lakes");
    log.ended(t1, 1, " and seas", "cut");
    log.answered("call-1", "allow", true);
    log.checkpoint(t1, 2, "Rivers, ");
    log.answer(t1, 2, "Rivers, lakes and seas.");
    log.memory(t1, 2, "otters like water");
    let t2 = log.user("and what do they eat?");
    log.answer(t2, 1, "Fish.");
    log.compaction("They asked about otters.", asked);
    let t3 = log.user("how big are they?");
    log.checkpoint(t3, 1, "About a metre");
    for _ in 0..10 {
        log.tool();
    }
    log.failed(t3, 1, "provider_error");
    log.edit(t2, "and what do they drink?");
    assert!(log.next_seq() > 100);
    log
}

#[test]
fn rows_ids_and_last_seq_equal_sqlites() {
    let Some(mut t) = twin("rows_ids_and_last_seq_equal_sqlites") else {
        return;
    };
    let log = long_log();
    let a = t.import(&log.events);
    let b = t.import(&Log::new("other").events);
    for id in [a, b] {
        assert_eq!(
            session(&mut t.pg, id).unwrap(),
            t.sqlite.session(id).unwrap()
        );
        assert_eq!(
            last_seq(&mut t.pg, id).unwrap(),
            t.sqlite.last_seq(id).unwrap()
        );
    }
    assert_eq!(
        session(&mut t.pg, a).unwrap().title.as_deref(),
        Some("Otters")
    );
    assert_eq!(last_seq(&mut t.pg, a).unwrap(), log.next_seq() - 1);
    assert_eq!(
        session_ids(&mut t.pg).unwrap(),
        t.sqlite.session_ids().unwrap()
    );
    let missing = SessionId::generate();
    assert!(matches!(
        session(&mut t.pg, missing),
        Err(StoreError::SessionNotFound(m)) if m == missing
    ));
    assert_eq!(last_seq(&mut t.pg, missing).unwrap(), 0);
}

#[test]
fn events_equal_sqlites_and_a_missing_session_is_not_found() {
    let Some(mut t) = twin("events_equal_sqlites_and_a_missing_session_is_not_found") else {
        return;
    };
    let log = long_log();
    let id = t.import(&log.events);
    let n = log.next_seq() - 1;
    for (after, limit) in [
        (0, None),
        (0, Some(1)),
        (5, Some(10)),
        (n - 1, None),
        (n, None),
    ] {
        let pg = events(&mut t.pg, id, after, limit).unwrap();
        let sqlite = t.sqlite.events(id, after, limit).unwrap();
        assert!(same_events(&pg, &sqlite), "after {after}, limit {limit:?}");
    }
    assert!(same_events(
        &events(&mut t.pg, id, 0, None).unwrap(),
        &log.events
    ));
    assert!(events(&mut t.pg, id, n, None).unwrap().is_empty());
    let missing = SessionId::generate();
    assert!(matches!(
        events(&mut t.pg, missing, 0, None),
        Err(StoreError::SessionNotFound(_))
    ));
    assert!(matches!(
        events_for_context(&mut t.pg, missing),
        Err(StoreError::SessionNotFound(_))
    ));
    assert!(matches!(
        transcript_page(&mut t.pg, missing, u64::MAX, 10, None),
        Err(StoreError::SessionNotFound(_))
    ));
}

/// After a rewind hides the newest compaction, the tail starts at the older boundary
/// (here: none, so the whole log); while the compaction is visible, at its boundary.
/// Either way the context equals the whole log's, and the tail equals SQLite's.
#[test]
fn the_context_tail_starts_at_the_newest_visible_compaction() {
    let Some(mut t) = twin("the_context_tail_starts_at_the_newest_visible_compaction") else {
        return;
    };
    let mut log = Log::new("s");
    let t1 = log.user("one");
    log.answer(t1, 1, "1");
    let t2 = log.user("two");
    log.answer(t2, 1, "2");
    let compaction = log.compaction("one and two", t2);
    let t3 = log.user("three");
    log.answer(t3, 1, "3");
    let visible = t.import(&log.events);
    let tail = events_for_context(&mut t.pg, visible).unwrap();
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [vec![1], (t2 + 1..log.next_seq()).collect()].concat()
    );
    assert!(tail.iter().any(|e| e.seq == compaction));
    assert!(same_events(
        &tail,
        &t.sqlite.events_for_context(visible).unwrap()
    ));
    assert_eq!(llm_context(&tail), llm_context(&log.events));

    // Editing the second message (before the compaction) abandons the compaction.
    log.edit(t2, "two, edited");
    let hidden = t.import(&log.events);
    let tail = events_for_context(&mut t.pg, hidden).unwrap();
    assert_eq!(tail.len() as u64, log.next_seq() - 1, "the whole log");
    assert!(same_events(
        &tail,
        &t.sqlite.events_for_context(hidden).unwrap()
    ));
    assert_eq!(llm_context(&tail), llm_context(&log.events));
    assert!(
        !llm_context(&tail).messages[0]
            .content
            .contains("one and two")
    );

    let long = long_log();
    let id = t.import(&long.events);
    let tail = events_for_context(&mut t.pg, id).unwrap();
    assert!(same_events(
        &tail,
        &t.sqlite.events_for_context(id).unwrap()
    ));
    assert_eq!(llm_context(&tail), llm_context(&long.events));
}

/// Every page of a long session, from every `before_seq` and several limits, active
/// attempt or not, equals the whole log's transcript sliced, and SQLite's page.
/// `stride` thins the `before_seq`s tried (the first and last are always tried).
fn check_pages(
    t: &mut Twin,
    id: SessionId,
    log: &[Event],
    active: Option<(u64, u32)>,
    stride: usize,
) {
    let whole = ui_transcript(log, active);
    let n = log.len() as u64;
    for limit in [1usize, 3, 64, 500] {
        // SQLite cannot bind a seq past i64 (PostgreSQL's read clamps it).
        let befores = (1..=n + 1).step_by(stride).chain([n, n + 1]);
        for before in befores.chain([i64::MAX as u64, u64::MAX]) {
            let mut tx = snapshot(&mut t.pg).unwrap();
            let page = transcript_page(&mut tx, id, before, limit, active).unwrap();
            tx.commit().unwrap();
            let older: Vec<_> = whole.iter().filter(|i| i.seq < before).cloned().collect();
            let start = older.len().saturating_sub(limit);
            assert_eq!(page.items, older[start..], "before {before}, limit {limit}");
            assert_eq!(page.more, start > 0, "before {before}, limit {limit}");
            if before <= i64::MAX as u64 {
                let sqlite = t.sqlite.transcript_page(id, before, limit, active).unwrap();
                assert_eq!(page, sqlite, "before {before}, limit {limit}");
            }
        }
    }
}

#[test]
fn pages_straddling_attempts_and_answers_equal_the_whole_transcript_and_sqlites() {
    let Some(mut t) =
        twin("pages_straddling_attempts_and_answers_equal_the_whole_transcript_and_sqlites")
    else {
        return;
    };
    let log = long_log();
    let id = t.import(&log.events);
    let items = ui_transcript(&log.events, None);
    assert!(
        items.iter().any(|i| i.abandoned),
        "the log has an abandoned branch"
    );
    check_pages(&mut t, id, &log.events, None, 1);
    // The same log with the first turn's retry still streaming.
    let mut open = Log::new("s");
    let t1 = open.user("q");
    open.checkpoint(t1, 1, "a");
    for _ in 0..70 {
        open.tool();
    }
    open.checkpoint(t1, 1, "b");
    let id = t.import(&open.events);
    check_pages(&mut t, id, &open.events, Some((t1, 1)), 3);
    check_pages(&mut t, id, &open.events, None, 3);
}

/// A window's turns and questions are looked up when the window is read (a statement
/// each, not one per item): the walk is handed them from that read, so rows deleted
/// after it are still handed out, equal to the whole log's.
#[test]
fn a_windows_attempts_and_answers_are_read_with_the_window() {
    let Some(mut t) = twin("a_windows_attempts_and_answers_are_read_with_the_window") else {
        return;
    };
    let log = long_log();
    let id = t.import(&log.events);
    let mut page = PgPage {
        c: &mut t.pg,
        id,
        attempts: HashMap::new(),
        answers: HashMap::new(),
    };
    let window = page.events_before(u64::MAX, 1_000).unwrap();
    assert_eq!(window.len() as u64, log.next_seq() - 1);
    page.c
        .execute(
            "DELETE FROM session_events WHERE session_id = $1
             AND kind IN ('pending_state', 'assistant_turn', 'permission_requested',
                          'permission_resolved')",
            &[&id.as_uuid()],
        )
        .unwrap();
    let mut whole = InMemory(&log.events);
    let (mut turns, mut calls) = (BTreeSet::new(), BTreeSet::new());
    for e in &window {
        match e.decode() {
            Decoded::Known(Payload::PendingState(c)) => {
                turns.insert(c.turn);
            }
            Decoded::Known(Payload::PermissionRequested(q)) => {
                calls.insert(q.call_id);
            }
            _ => {}
        }
    }
    assert!(turns.len() >= 2 && !calls.is_empty());
    let by_seq = |mut v: Vec<Event>| {
        v.sort_by_key(|e| e.seq);
        v
    };
    for turn in turns {
        let got = by_seq(page.turn_attempts(turn).unwrap());
        let want = whole.turn_attempts(turn).unwrap();
        assert!(!want.is_empty() && same_events(&got, &want), "turn {turn}");
    }
    for call in calls {
        let got = by_seq(page.permission_events(&call).unwrap());
        let want = whole.permission_events(&call).unwrap();
        assert!(!want.is_empty() && same_events(&got, &want), "call {call}");
    }
}

/// One random step of a generated log (indexes pick among what exists).
#[derive(Clone, Debug)]
enum Step {
    User,
    Checkpoint(usize),
    Complete(usize),
    Fail(usize),
    Ask(usize),
    Answer(usize),
    Edit(usize),
    Compact(usize),
    Tool,
    Unreadable,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::User),
        5 => any::<usize>().prop_map(Step::Checkpoint),
        2 => any::<usize>().prop_map(Step::Complete),
        1 => any::<usize>().prop_map(Step::Fail),
        1 => any::<usize>().prop_map(Step::Ask),
        1 => any::<usize>().prop_map(Step::Answer),
        1 => any::<usize>().prop_map(Step::Edit),
        1 => any::<usize>().prop_map(Step::Compact),
        3 => Just(Step::Tool),
        1 => Just(Step::Unreadable),
    ]
}

fn build(steps: &[Step]) -> Log {
    let mut log = Log::new("s");
    let mut turns: Vec<u64> = vec![];
    let mut attempts: Vec<(u64, u32)> = vec![];
    let mut calls: Vec<String> = vec![];
    let pick = |i: usize, n: usize| i % n.max(1);
    for s in steps {
        match *s {
            Step::User => turns.push(log.user("q")),
            Step::Checkpoint(i) if !turns.is_empty() => {
                let t = turns[pick(i, turns.len())];
                let a = attempts.iter().filter(|x| x.0 == t).count() as u32;
                let a = if a == 0 || i % 3 == 0 { a + 1 } else { a };
                attempts.push((t, a));
                log.checkpoint(t, a, "part ");
            }
            Step::Complete(i) if !attempts.is_empty() => {
                let (t, a) = attempts[pick(i, attempts.len())];
                log.answer(t, a, "done");
            }
            Step::Fail(i) if !attempts.is_empty() => {
                let (t, a) = attempts[pick(i, attempts.len())];
                log.failed(t, a, "cut");
            }
            Step::Ask(i) if !turns.is_empty() => {
                let call = format!("call{}", log.next_seq());
                log.asked(turns[pick(i, turns.len())], &call, "fs__write_file");
                calls.push(call);
            }
            Step::Answer(i) if !calls.is_empty() => {
                log.answered(&calls[pick(i, calls.len())], "deny", i % 2 == 0);
            }
            Step::Edit(i) if !turns.is_empty() => {
                turns.push(log.edit(turns[pick(i, turns.len())], "edited"));
            }
            Step::Compact(i) => {
                let through = pick(i, log.next_seq() as usize - 1) as u64 + 1;
                log.compaction("summary", through);
            }
            Step::Tool => {
                log.tool();
            }
            Step::Unreadable => {
                log.raw("pending_state", r#"{"turn": "x"}"#);
            }
            _ => {}
        }
    }
    log
}

/// Generated logs: every page and the context tail agree with the whole log's
/// projections and with SQLite's answers (one database, a session per case).
#[test]
fn generated_logs_page_and_shape_the_context_as_the_whole_log() {
    let Some(t) = twin("generated_logs_page_and_shape_the_context_as_the_whole_log") else {
        return;
    };
    let t = RefCell::new(t);
    let mut runner = TestRunner::new(Config {
        cases: 16,
        ..Config::default()
    });
    let steps = proptest::collection::vec(step(), 0..120);
    runner
        .run(&steps, |steps| {
            let log = build(&steps);
            let mut t = t.borrow_mut();
            let id = t.import(&log.events);
            let tail = events_for_context(&mut t.pg, id).unwrap();
            prop_assert_eq!(llm_context(&tail), llm_context(&log.events));
            prop_assert!(same_events(
                &tail,
                &t.sqlite.events_for_context(id).unwrap()
            ));
            check_pages(&mut t, id, &log.events, None, 7);
            Ok(())
        })
        .unwrap();
}

/// A transcript page's lookups by turn and by call id probe V5's turn index as V10 rebuilt
/// it on `brain_field`, and V13's index of questions and answers: the queries' expression must be the indexes' (the tables are
/// tiny, so sequential scans are switched off to see whether an index path exists).
#[test]
fn a_pages_lookups_use_the_turn_and_call_indexes() {
    let Some(mut t) = twin("a_pages_lookups_use_the_turn_and_call_indexes") else {
        return;
    };
    t.pg.batch_execute("SET enable_seqscan = off").unwrap();
    let id = "'0192e4a0-7b1c-7d3e-8f00-123456789abc'::uuid";
    for (sql, key, index) in [
        (TURN_ATTEMPTS, "'3'", "session_events_attempts"),
        (TURNS_ATTEMPTS, "ARRAY['3','4']", "session_events_attempts"),
        (PERMISSION_EVENTS, "'c1'", "session_events_permissions"),
        (CALLS_EVENTS, "ARRAY['c1']", "session_events_permissions"),
    ] {
        let sql = sql.replace("$1", id).replace("$2", key);
        let plan: Vec<String> =
            t.pg.query(&format!("EXPLAIN {sql}"), &[])
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
        let plan = plan.join("\n");
        // `brain_field` is inlined: the condition on the field is the index's.
        let on_field = plan
            .lines()
            .any(|l| l.contains("Index Cond") && l.contains("regexp_replace"));
        assert!(plan.contains(index) && on_field, "{plan}");
    }
}
