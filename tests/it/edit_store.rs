//! Editing and forking in the store, on a real SQLite file: the tail read for the context
//! with rewinds present equals projecting the whole log, an edit is one transaction, a fork
//! copies events byte for byte.

use brain::session::events::{Decoded, ForkedFrom, Payload, SessionStarted, TitledBy, kind};
use brain::session::projection::{BadForkPoint, NotEditable, Role, llm_context, ui_transcript};
use brain::session::{SessionId, Store, StoreError};
use proptest::prelude::*;

use crate::support::*;

fn whole_log_context(store: &Store, id: SessionId) -> brain::session::projection::Context {
    llm_context(&store.events(id, 0, None).unwrap())
}

#[test]
fn the_tail_read_starts_at_the_newest_visible_compaction() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    store.append(id, &user("one")).unwrap(); // 2
    store.append(id, &answer(2, 1, "first")).unwrap(); // 3
    store.append(id, &user("two")).unwrap(); // 4
    store.append(id, &answer(4, 1, "second")).unwrap(); // 5
    store.append(id, &compaction("about one", 3)).unwrap(); // 6
    store.append(id, &user("three")).unwrap(); // 7
    store.append(id, &answer(7, 1, "third")).unwrap(); // 8
    store
        .append(id, &compaction("about one and two", 5))
        .unwrap(); // 9
    let seqs = |s: &Store| -> Vec<u64> {
        s.events_for_context(id)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect()
    };
    assert_eq!(seqs(&store), vec![1, 6, 7, 8, 9]);
    // Editing "three" (7) hides the newer compaction (9): the older one's boundary counts.
    let edited = store.write(|w| w.edit(id, 7, "three, v2")).unwrap();
    assert_eq!(edited.seq, 11);
    assert_eq!(
        seqs(&store),
        (1..=11).filter(|s| *s == 1 || *s > 3).collect::<Vec<_>>()
    );
    let tail = llm_context(&store.events_for_context(id).unwrap());
    assert_eq!(tail, whole_log_context(&store, id));
    assert!(tail.messages[0].content.contains("about one"));
    assert!(!tail.messages[0].content.contains("about one and two"));
    assert_eq!(tail.messages.last().unwrap().content, "three, v2");
}

#[test]
fn an_edit_writes_the_rewind_and_the_message_together_or_nothing() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    store.append(id, &user("one")).unwrap(); // 2
    store.append(id, &answer(2, 1, "first")).unwrap(); // 3
    let new = store.write(|w| w.edit(id, 2, "one, v2")).unwrap();
    let events = store.events(id, 0, None).unwrap();
    assert_eq!(events[3].kind, kind::REWIND);
    let rewind: serde_json::Value = serde_json::from_str(&events[3].payload).unwrap();
    assert_eq!(rewind, serde_json::json!({"to_seq": 1, "edited_seq": 2}));
    assert_eq!(
        (events[4].seq, events[4].kind.as_str()),
        (new.seq, kind::USER_MESSAGE)
    );
    // Every refusal writes nothing.
    let before = events.len();
    let refused = |seq: u64| match store.write(|w| w.edit(id, seq, "x")) {
        Err(StoreError::NotEditable(why)) => why,
        other => panic!("{seq}: {other:?}"),
    };
    assert_eq!(refused(2), NotEditable::Abandoned(2));
    assert_eq!(refused(3), NotEditable::NotAUserMessage(3));
    assert_eq!(refused(4), NotEditable::NotAUserMessage(4));
    assert_eq!(refused(1), NotEditable::NotAUserMessage(1));
    assert_eq!(refused(0), NotEditable::NoSuchEvent(0));
    assert_eq!(refused(6), NotEditable::NoSuchEvent(6));
    assert_eq!(refused(u64::MAX), NotEditable::NoSuchEvent(u64::MAX));
    // Another session's message is not this one's.
    let other = store.create_session(None, "sys".into()).unwrap().id;
    for _ in 0..8 {
        store.append(other, &user("elsewhere")).unwrap();
    }
    assert_eq!(refused(9), NotEditable::NoSuchEvent(9));
    assert!(matches!(
        store.write(|w| w.edit(SessionId::generate(), 2, "x")),
        Err(StoreError::SessionNotFound(_))
    ));
    assert_eq!(store.events(id, 0, None).unwrap().len(), before);
    assert_eq!(
        store.write(|w| w.edit(id, new.seq, "one, v3")).unwrap().seq,
        7
    );
}

#[test]
fn a_fork_copies_seqs_kinds_payload_bytes_and_times() {
    let db = TempDb::new();
    let store = db.open();
    let source = store
        .create_session(Some("plans".into()), "sys".into())
        .unwrap()
        .id;
    store.append(source, &user("one")).unwrap(); // 2
    store.append(source, &answer(2, 1, "first")).unwrap(); // 3
    store
        .append(source, &titled("renamed", TitledBy::User))
        .unwrap(); // 4
    store.append(source, &user("two")).unwrap(); // 5
    store.write(|w| w.edit(source, 5, "two, v2")).unwrap(); // 6, 7
    store.append(source, &answer(7, 1, "second")).unwrap(); // 8
    store.append(source, &archived(true)).unwrap(); // 9
    store.append(source, &user("three")).unwrap(); // 10
    let fork = store
        .write(|w| w.fork(source, Some(9), None, u64::MAX))
        .unwrap();
    assert_eq!(fork.title.as_deref(), Some("renamed (fork)"));
    assert!(!fork.archived);
    let src = store.events(source, 0, None).unwrap();
    let copy = store.events(fork.id, 0, None).unwrap();
    assert_eq!(&copy[1..9], &src[1..9], "events 2…9 byte for byte");
    let Decoded::Known(Payload::SessionStarted(started)) = copy[0].decode() else {
        panic!("{:?}", copy[0])
    };
    assert_eq!(
        started,
        SessionStarted {
            title: Some("renamed (fork)".into()),
            system: "sys".into(),
            forked_from: Some(ForkedFrom {
                session_id: source.to_string(),
                seq: 9
            }),
            imported_from: None,
        }
    );
    // The copies renamed and archived it; the fork says its own title and is not archived,
    // in the log as in the cache.
    let tail: Vec<&str> = copy[9..].iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(tail, vec![kind::SESSION_TITLED, kind::SESSION_ARCHIVED]);
    assert_eq!(
        llm_context(&copy),
        llm_context(&src[..9]),
        "the fork's context is the source's at 9"
    );
    // The transcript flags the copied abandoned branch as the source's does.
    let abandoned = |events: &[brain::session::events::Event]| -> Vec<u64> {
        ui_transcript(events, None)
            .iter()
            .filter(|i| i.abandoned)
            .map(|i| i.seq)
            .collect()
    };
    assert_eq!(abandoned(&copy), abandoned(&src[..9]));
    // Bad points write nothing.
    let sessions = store.session_ids().unwrap().len();
    let bad = |through: Option<u64>, active: Option<(u64, u32)>| match store
        .write(|w| w.fork(source, through, active, u64::MAX))
    {
        Err(StoreError::BadForkPoint(why)) => why,
        other => panic!("{other:?}"),
    };
    assert_eq!(bad(Some(0), None), BadForkPoint::Zero);
    assert_eq!(bad(Some(11), None), BadForkPoint::PastEnd(11, 10));
    store.append(source, &pending(10, 1, "half")).unwrap(); // 11
    assert_eq!(
        bad(Some(11), Some((10, 1))),
        BadForkPoint::InsideActiveAttempt(11, 11)
    );
    assert_eq!(store.session_ids().unwrap().len(), sessions);
    // The default stops before the running attempt's first checkpoint.
    let f = store
        .write(|w| w.fork(source, None, Some((10, 1)), u64::MAX))
        .unwrap();
    let copied = store.events(f.id, 0, None).unwrap();
    assert_eq!(copied.iter().filter(|e| e.seq <= 10).count(), 10);
    assert!(!copied.iter().any(|e| e.kind == kind::PENDING_STATE));
}

#[test]
fn an_untitled_session_forks_untitled_and_a_fork_of_seq_1_is_empty() {
    let db = TempDb::new();
    let store = db.open();
    let source = store.create_session(None, "sys".into()).unwrap().id;
    store.append(source, &user("one")).unwrap();
    let fork = store
        .write(|w| w.fork(source, Some(1), None, u64::MAX))
        .unwrap();
    assert_eq!(fork.title, None);
    assert_eq!(store.events(fork.id, 0, None).unwrap().len(), 1);
}

/// One step of a generated session, written through the store as the engine would.
#[derive(Clone, Debug)]
enum Step {
    Turn,
    Edit(usize),
    Compact,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Turn),
        2 => (0usize..6).prop_map(Step::Edit),
        1 => Just(Step::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// On a real file, with edits and compactions in any order, what the store reads for
    /// the context projects exactly like the whole log.
    #[test]
    fn the_tail_read_projects_like_the_whole_log(steps in proptest::collection::vec(step(), 1..24)) {
        let db = TempDb::new();
        let store = db.open();
        let id = store.create_session(None, "sys".into()).unwrap().id;
        for (n, s) in steps.iter().enumerate() {
            match s {
                Step::Turn => {
                    let u = store.append(id, &user(&format!("q{n}"))).unwrap().seq;
                    store.append(id, &answer(u, 1, &format!("a{n}"))).unwrap();
                }
                Step::Edit(i) => {
                    let ctx = whole_log_context(&store, id);
                    let picked = ctx.messages.iter()
                        .filter(|m| m.role == Role::User)
                        .map(|m| m.last_seq)
                        .nth(*i);
                    if let Some(seq) = picked {
                        if let Ok(e) = store.write(|w| w.edit(id, seq, &format!("edit {n}"))) {
                            store.append(id, &answer(e.seq, 1, &format!("a{n}"))).unwrap();
                        }
                    }
                }
                Step::Compact => {
                    let ctx = whole_log_context(&store, id);
                    let half = ctx.messages.len() / 2;
                    if let Some(m) = ctx.messages[..half].iter().rev().find(|m| m.role == Role::Assistant) {
                        store.append(id, &compaction(&format!("through {}", m.last_seq), m.last_seq)).unwrap();
                    }
                }
            }
            let tail = llm_context(&store.events_for_context(id).unwrap());
            prop_assert_eq!(tail, whole_log_context(&store, id));
        }
    }
}

/// A fork moved to another database (export, import) keeps its place in the list: its
/// `updated_at` is its own creation, not the older time of the last event it copied
/// (found by an outside review).
#[test]
fn a_fork_keeps_its_updated_at_through_export_and_import() {
    let db = TempDb::new();
    let store = db.open();
    let source = store.create_session(None, "sys".into()).unwrap().id;
    store.append(source, &user("one")).unwrap();
    store.append(source, &answer(2, 1, "first")).unwrap();
    let fork = store
        .write(|w| w.fork(source, None, None, u64::MAX))
        .unwrap();
    let events = store.events(fork.id, 0, None).unwrap();
    let other = TempDb::new();
    let moved = other.open();
    moved.write(|w| w.import_session(fork.id, &events)).unwrap();
    let row = moved.session(fork.id).unwrap();
    assert_eq!(
        (row.created_at, row.updated_at),
        (fork.created_at, fork.updated_at)
    );
}
