//! The store on a real SQLite file: seq allocation under concurrency (I1), the sessions
//! cache, reads, delete.

use std::sync::Arc;
use std::thread;

use brain::clock::Clock;
use brain::session::events::{SessionStarted, TitledBy, kind};
use brain::session::{Decoded, Payload, SessionId, StoreError};
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

use crate::support::*;

fn seqs(store: &brain::session::Store, id: SessionId) -> Vec<u64> {
    store
        .events(id, 0, None)
        .expect("events")
        .iter()
        .map(|e| e.seq)
        .collect()
}

#[test]
fn threads_appending_to_one_session_get_gapless_seqs() {
    let db = TempDb::new();
    let store = Arc::new(db.open());
    let id = store.create_session(None, "sys".into()).unwrap().id;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                (0..50)
                    .map(|i| store.append(id, &user(&format!("t{t} m{i}"))).unwrap().seq)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut returned: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    returned.sort_unstable();
    assert_eq!(
        returned,
        (2..=401).collect::<Vec<_>>(),
        "each append got its own seq"
    );
    assert_gapless(&seqs(&store, id));
}

#[test]
fn threads_appending_to_many_sessions_get_gapless_seqs_per_session() {
    let db = TempDb::new();
    let store = Arc::new(db.open());
    let ids: Arc<Vec<SessionId>> = Arc::new(
        (0..5)
            .map(|_| store.create_session(None, String::new()).unwrap().id)
            .collect(),
    );
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (store, ids) = (Arc::clone(&store), Arc::clone(&ids));
            thread::spawn(move || {
                for i in 0..60 {
                    let id = ids[(i * 7 + t * 3) % ids.len()];
                    store.append(id, &user("x")).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut total = 0;
    for id in ids.iter() {
        let s = seqs(&store, *id);
        assert_gapless(&s);
        total += s.len();
    }
    assert_eq!(total, 5 + 4 * 60);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any interleaving of appends across sessions and threads leaves every session with
    /// seqs 1..=n, n being its started event plus its appends.
    #[test]
    fn random_interleavings_give_gapless_seqs(
        sessions in 1usize..5,
        threads in 1usize..5,
        picks in proptest::collection::vec(0usize..100, 0..80),
    ) {
        let db = TempDb::new();
        let store = Arc::new(db.open());
        let ids: Vec<SessionId> = (0..sessions)
            .map(|_| store.create_session(None, String::new()).unwrap().id)
            .collect();
        let ops: Vec<SessionId> = picks.iter().map(|p| ids[p % sessions]).collect();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let store = Arc::clone(&store);
                let mine: Vec<SessionId> = ops.iter().skip(t).step_by(threads).copied().collect();
                thread::spawn(move || {
                    for id in mine {
                        store.append(id, &user("m")).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        for id in &ids {
            let s = seqs(&store, *id);
            let expected = 1 + ops.iter().filter(|o| *o == id).count();
            prop_assert_eq!(s.len(), expected);
            prop_assert!(s.iter().enumerate().all(|(i, q)| *q == i as u64 + 1), "{:?}", s);
        }
    }
}

/// One step of the cache property: an event to append, or the clock moving.
#[derive(Clone, Debug)]
enum Step {
    Append(usize, Box<Payload>),
    Tick(i64),
}

fn step() -> impl Strategy<Value = Step> {
    let payload = prop_oneof![
        Just(user("q")),
        Just(pending(2, 1, "part")),
        Just(answer(2, 1, "a")),
        Just(failed(2, 1, "provider_error")),
        Just(memory(2, 1)),
        Just(compaction("sum", 2)),
        "[a-z]{0,8}".prop_map(|t| titled(&t, TitledBy::User)),
        "[a-z]{0,8}".prop_map(|t| titled(&t, TitledBy::Auto)),
        any::<bool>().prop_map(archived),
    ];
    prop_oneof![
        (0usize..3, payload).prop_map(|(s, p)| Step::Append(s, Box::new(p))),
        (0i64..3).prop_map(Step::Tick),
    ]
}

/// What SPEC §3/§6 say the cache row must be, folded from the log independently of the
/// store's own rule: title from `session_started` then each `session_titled`; archived
/// from each `session_archived`; updated_at from creation, user messages and the events
/// that end an attempt (checkpoints do not move it; an interrupted end touches it itself).
fn expected_cache(events: &[brain::session::Event]) -> (Option<String>, bool, String) {
    let (mut title, mut archived, mut updated) = (None, false, String::new());
    for e in events {
        match e.decode() {
            Decoded::Known(Payload::SessionStarted(SessionStarted { title: t, .. })) => {
                title = t;
                updated = e.created_at.clone();
            }
            Decoded::Known(Payload::SessionTitled(t)) => title = Some(t.title),
            Decoded::Known(Payload::SessionArchived(a)) => archived = a.archived,
            Decoded::Known(
                Payload::UserMessage(_) | Payload::AssistantTurn(_) | Payload::TurnFailed(_),
            ) => updated = e.created_at.clone(),
            _ => {}
        }
    }
    (title, archived, updated)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn sessions_cache_always_agrees_with_the_log(
        initial_title in proptest::option::of("[a-z]{1,6}"),
        steps in proptest::collection::vec(step(), 0..40),
    ) {
        let db = TempDb::new();
        let start: Timestamp = "2026-11-30T00:00:00Z".parse().unwrap();
        let clock = Clock::manual(start);
        let store = db.open_with(clock.clone());
        let ids: Vec<SessionId> = (0..3)
            .map(|_| store.create_session(initial_title.clone(), "sys".into()).unwrap().id)
            .collect();
        for s in &steps {
            match s {
                Step::Append(i, p) => {
                    store.append(ids[*i], p).unwrap();
                }
                Step::Tick(ms) => clock.advance(SignedDuration::from_millis(*ms)),
            }
            for id in &ids {
                let row = store.session(*id).unwrap();
                let (title, archived, updated) = expected_cache(&store.events(*id, 0, None).unwrap());
                prop_assert_eq!(&row.title, &title);
                prop_assert_eq!(row.archived, archived);
                prop_assert_eq!(&row.updated_at, &updated);
                prop_assert!(row.created_at <= row.updated_at);
            }
        }
    }
}

#[test]
fn timestamps_are_rfc3339_utc_with_six_fractional_digits() {
    let db = TempDb::new();
    let store = db.open();
    let row = store.create_session(Some("t".into()), "s".into()).unwrap();
    let e = store.append(row.id, &user("hi")).unwrap();
    for ts in [&row.created_at, &row.updated_at, &e.created_at] {
        assert_eq!(ts.len(), 27, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[19] == b'.', "{ts}");
        assert!(ts.parse::<Timestamp>().is_ok(), "{ts}");
    }
}

#[test]
fn appending_to_an_unknown_session_is_not_found_and_writes_nothing() {
    let db = TempDb::new();
    let store = db.open();
    let ghost = SessionId::generate();
    assert!(matches!(
        store.append(ghost, &user("hello")),
        Err(StoreError::SessionNotFound(id)) if id == ghost
    ));
    assert!(matches!(
        store.events(ghost, 0, None),
        Err(StoreError::SessionNotFound(_))
    ));
    let n: i64 = db
        .raw()
        .query_row("SELECT COUNT(*) FROM session_events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn session_started_is_written_only_at_creation() {
    let db = TempDb::new();
    let store = db.open();
    let row = store
        .create_session(Some("first".into()), "be kind".into())
        .unwrap();
    let again = Payload::SessionStarted(SessionStarted {
        title: None,
        system: "other".into(),
        forked_from: None,
        imported_from: None,
    });
    assert!(matches!(
        store.append(row.id, &again),
        Err(StoreError::Refused(_))
    ));
    let events = store.events(row.id, 0, None).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].seq, 1);
    assert_eq!(events[0].kind, kind::SESSION_STARTED);
    assert_eq!(
        events[0].decode(),
        Decoded::Known(Payload::SessionStarted(SessionStarted {
            title: Some("first".into()),
            system: "be kind".into(),
            forked_from: None,
            imported_from: None,
        }))
    );
    assert_eq!(row.system, "be kind");
    assert_eq!(row.title.as_deref(), Some("first"));
}

#[test]
fn a_failed_write_closure_rolls_back_everything_it_appended() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    let result: Result<(), StoreError> = store.write(|w| {
        w.append(id, &user("one"))?;
        w.append(id, &user("two"))?;
        Err(StoreError::Refused("changed my mind"))
    });
    assert!(result.is_err());
    assert_eq!(seqs(&store, id), vec![1]);
    // The writer is still usable and seq continues without a gap.
    assert_eq!(store.append(id, &user("three")).unwrap().seq, 2);
}

#[test]
fn events_are_never_updated_even_by_raw_sql() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    store.append(id, &user("original")).unwrap();
    let err = db
        .raw()
        .execute(
            "UPDATE session_events SET payload = '{\"text\":\"edited\"}' WHERE seq = 2",
            [],
        )
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    assert_eq!(
        store.events(id, 1, None).unwrap()[0].payload,
        r#"{"text":"original"}"#
    );
}

#[test]
fn events_after_a_seq_and_with_a_limit() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    for i in 0..9 {
        store.append(id, &user(&format!("m{i}"))).unwrap();
    }
    let after: Vec<u64> = store
        .events(id, 4, None)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(after, (5..=10).collect::<Vec<_>>());
    let page: Vec<u64> = store
        .events(id, 4, Some(3))
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(page, vec![5, 6, 7]);
    assert!(store.events(id, 10, None).unwrap().is_empty());
}

#[test]
fn events_for_context_start_at_the_newest_compaction_boundary() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    for i in 0..6 {
        store.append(id, &user(&format!("m{i}"))).unwrap(); // seqs 2..=7
    }
    // No compaction: the whole log.
    assert_eq!(store.events_for_context(id).unwrap().len(), 7);
    store.append(id, &compaction("first", 3)).unwrap(); // seq 8
    store.append(id, &user("m6")).unwrap(); // seq 9
    store.append(id, &compaction("second", 5)).unwrap(); // seq 10
    store.append(id, &user("m7")).unwrap(); // seq 11
    let got: Vec<u64> = store
        .events_for_context(id)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(got, vec![1, 6, 7, 8, 9, 10, 11]);
}

#[test]
fn an_unknown_kind_is_read_back_untouched() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    let payload = r#"{"z": 1, "a": [true, null], "nested": {"k": "v"}}"#;
    db.raw()
        .execute(
            "INSERT INTO session_events (session_n, seq, id, kind, payload, created_at)
             VALUES ((SELECT n FROM sessions WHERE id = ?1), 2, 1000, 'from_the_future', ?2, '2030-01-01T00:00:00.000000Z')",
            rusqlite::params![id.to_string(), payload],
        )
        .unwrap();
    let events = store.events(id, 1, None).unwrap();
    assert_eq!(events[0].kind, "from_the_future");
    assert_eq!(events[0].payload, payload);
    assert_eq!(events[0].decode(), Decoded::UnknownKind);
    // Appending after it still continues the seq.
    assert_eq!(store.append(id, &user("next")).unwrap().seq, 3);
}

fn fts_matches(db: &TempDb, word: &str) -> i64 {
    db.raw()
        .query_row(
            "SELECT COUNT(*) FROM session_search WHERE session_search MATCH ?1",
            [word],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn delete_removes_the_session_its_events_and_index_rows_and_nothing_else() {
    let db = TempDb::new();
    let store = db.open();
    let doomed = store
        .create_session(Some("zebra title".into()), String::new())
        .unwrap()
        .id;
    let kept = store
        .create_session(Some("zebra kept".into()), String::new())
        .unwrap()
        .id;
    for id in [doomed, kept] {
        store.append(id, &user("the zebra question")).unwrap();
        store.append(id, &answer(2, 1, "a zebra answer")).unwrap();
        store.append(id, &compaction("zebra summary", 3)).unwrap();
    }
    store.append(doomed, &user("quokka only here")).unwrap();
    db.raw()
        .execute(
            "INSERT INTO ledger (session_id, purpose, provider, model, latency_ms, status, created_at)
             VALUES (?1, 'chat', 'p', 'm', 5, 'ok', '2026-11-30T00:00:00.000000Z')",
            [doomed.to_string()],
        )
        .unwrap();
    assert_eq!(fts_matches(&db, "zebra"), 8);
    assert_eq!(fts_matches(&db, "quokka"), 1);
    let kept_before = store.events(kept, 0, None).unwrap();

    store.delete_session(doomed).unwrap();

    assert!(matches!(
        store.session(doomed),
        Err(StoreError::SessionNotFound(_))
    ));
    assert!(matches!(
        store.events(doomed, 0, None),
        Err(StoreError::SessionNotFound(_))
    ));
    assert!(matches!(
        store.delete_session(doomed),
        Err(StoreError::SessionNotFound(_))
    ));
    // The events go in the background (issue 19).
    wait_for("the purge is done", PURGE_DEADLINE, || {
        store.pending_purges().unwrap() == 0
    });
    let raw = db.raw();
    let left: i64 = raw
        .query_row(
            "SELECT COUNT(*) FROM session_events WHERE session_n = (SELECT n FROM sessions WHERE id = ?1)",
            [doomed.to_string()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
    let rows: i64 = raw
        .query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        rows, 1,
        "the deleted session's row goes at the end of its purge"
    );
    assert_eq!(fts_matches(&db, "zebra"), 4, "only the kept session's rows");
    assert_eq!(fts_matches(&db, "quokka"), 0);
    raw.execute(
        "INSERT INTO session_search (session_search) VALUES ('integrity-check')",
        [],
    )
    .expect("FTS index agrees with its content");
    let ledger: i64 = raw
        .query_row("SELECT COUNT(*) FROM ledger", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ledger, 1, "ledger rows outlive their session");
    assert_eq!(store.events(kept, 0, None).unwrap(), kept_before);
    assert_eq!(
        store.session(kept).unwrap().title.as_deref(),
        Some("zebra kept")
    );
    assert_eq!(store.session_ids().unwrap(), vec![kept]);
}

#[test]
fn search_index_covers_messages_answers_partials_summaries_and_titles_only() {
    let db = TempDb::new();
    let store = db.open();
    let id = store
        .create_session(Some("alpha".into()), "system words".into())
        .unwrap()
        .id;
    store.append(id, &user("bravo")).unwrap();
    // A cut attempt's partial (a completed attempt's checkpoints leave the index, V8:
    // tests/it/search_size.rs).
    store.append(id, &pending(2, 1, "charlie")).unwrap();
    store.append(id, &answer(2, 2, "delta")).unwrap();
    store.append(id, &compaction("echo", 3)).unwrap();
    store
        .append(id, &titled("foxtrot", TitledBy::User))
        .unwrap();
    store.append(id, &failed(2, 3, "golf")).unwrap();
    for word in ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"] {
        assert_eq!(fts_matches(&db, word), 1, "{word}");
    }
    for word in ["system", "golf"] {
        assert_eq!(fts_matches(&db, word), 0, "{word}");
    }
}

/// A checkpoint whose attempt completed is not a hit of its own (its answer holds the same
/// text, and the reader should land there); an interrupted attempt's checkpoint is.
#[test]
fn search_leaves_out_checkpoints_of_completed_answers() {
    use brain::session::store::{SearchOrder, SearchQuery, Syntax};
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    store.append(id, &user("tell me")).unwrap();
    store.append(id, &pending(2, 1, "quokka ")).unwrap();
    let answer_seq = store.append(id, &answer(2, 1, "quokka story")).unwrap().seq;
    store.append(id, &user("again")).unwrap();
    let cut_seq = store
        .append(id, &pending(5, 1, "quokka again"))
        .unwrap()
        .seq;
    // The interrupted one's retry completed: its own checkpoint is still the partial.
    store
        .append(id, &answer(5, 2, "a different answer"))
        .unwrap();
    for order in [SearchOrder::Relevance, SearchOrder::Recent] {
        let hits = store
            .search(&SearchQuery {
                text: "quokka".into(),
                syntax: Syntax::Plain,
                limit: 20,
                offset: 0,
                order,
                stem: false,
            })
            .unwrap();
        let mut found: Vec<(u64, &str)> = hits.iter().map(|h| (h.seq, h.kind.as_str())).collect();
        found.sort();
        assert_eq!(
            found,
            [(answer_seq, "assistant_turn"), (cut_seq, "pending_state")],
            "{order:?}"
        );
    }
}

#[test]
fn failing_and_panicking_writers_in_a_group_leave_the_others_committed() {
    let db = TempDb::new();
    let store = Arc::new(db.open());
    let id = store.create_session(None, String::new()).unwrap().id;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                let mut kept = Vec::new();
                for i in 0..30 {
                    let text = format!("t{t} i{i}");
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        store.write(|w| {
                            let e = w.append(id, &user(&text))?;
                            match i % 6 {
                                1 => Err(StoreError::Refused("this write fails")),
                                4 => panic!("this write panics"),
                                _ => Ok(e.seq),
                            }
                        })
                    }));
                    match outcome {
                        Ok(Ok(seq)) => kept.push((seq, text)),
                        Ok(Err(StoreError::Refused(_))) => assert_eq!(i % 6, 1),
                        Ok(Err(other)) => panic!("unexpected {other:?}"),
                        Err(_) => assert_eq!(i % 6, 4),
                    }
                }
                kept
            })
        })
        .collect();
    let kept: Vec<(u64, String)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(kept.len(), 8 * 20);
    let events = store.events(id, 1, None).unwrap();
    assert_eq!(
        events.len(),
        kept.len(),
        "only the writes that returned Ok stand"
    );
    let mut all: Vec<u64> = vec![1];
    all.extend(events.iter().map(|e| e.seq));
    assert_gapless(&all);
    for (seq, text) in &kept {
        let e = &events[(*seq - 2) as usize];
        assert_eq!(e.decode(), Decoded::Known(user(text)), "seq {seq}");
    }
    // The lane still works after all that.
    assert_eq!(
        store.append(id, &user("after")).unwrap().seq,
        kept.len() as u64 + 2
    );
}

/// The best-first window counts only matches that can be hits: 2,100 checkpoints of an
/// answer that completed do not crowd out the message that asked (found by an outside
/// review: the search answered nothing).
#[test]
fn checkpoints_of_a_completed_answer_do_not_fill_the_rank_window() {
    use brain::session::store::{SearchOrder, SearchQuery, Syntax};
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    store.append(id, &user("kiwi question")).unwrap();
    store
        .write(|w| {
            for _ in 0..2_100 {
                w.append(id, &pending(2, 1, "kiwi "))?;
            }
            Ok(())
        })
        .unwrap();
    store
        .append(id, &answer(2, 1, "final answer banana"))
        .unwrap();
    let hits = store
        .search(&SearchQuery {
            text: "kiwi".into(),
            syntax: Syntax::Plain,
            limit: 20,
            offset: 0,
            order: SearchOrder::Relevance,
            stem: false,
        })
        .unwrap();
    assert_eq!(
        hits.iter()
            .map(|h| (h.seq, h.kind.as_str()))
            .collect::<Vec<_>>(),
        [(2, "user_message")]
    );
}

/// A page reads an imported checkpoint whose turn is past SQLite's integers (found by an
/// outside review: the whole session answered 500).
#[test]
fn a_page_reads_a_turn_past_sqlites_integers() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    store.append(id, &user("q")).unwrap();
    store.append(id, &pending(u64::MAX, 1, "x")).unwrap();
    store.append(id, &user("again")).unwrap();
    let page = store.transcript_page(id, 5, 500, None).unwrap();
    let whole =
        brain::session::projection::ui_transcript(&store.events(id, 0, None).unwrap(), None);
    assert_eq!(page.items, whole);
}
