//! The search index holds no checkpoint of an attempt that completed (V8, issue 19): its
//! answer holds the same text. A database written at V5 migrates to the same index and the
//! same answers; deleting events in any order keeps the index whole.

use brain::session::events::{AssistantTurn, PendingState};
use brain::session::projection::ui_transcript;
use brain::session::store::sqlite::schema;
use brain::session::store::{SearchOrder, SearchQuery};
use brain::session::{Payload, SessionId, Store};

use crate::support::{PURGE_DEADLINE, TempDb, user, wait_for};

fn checkpoint(turn: u64, attempt: u32, text: &str) -> Payload {
    Payload::PendingState(PendingState {
        turn,
        attempt,
        text: text.into(),
        reasoning: None,
        ended: None,
        step: None,
    })
}

fn answer(turn: u64, attempt: u32, text: &str) -> Payload {
    Payload::AssistantTurn(AssistantTurn {
        turn,
        attempt,
        text: text.into(),
        reasoning: None,
        provider: "p".into(),
        model: "m".into(),
        finish_reason: Some("stop".into()),
        usage: Default::default(),
        duration_ms: 1,
        ledger_id: None,
        steps: 1,
    })
}

/// A session's log: a completed turn streamed in two checkpoints, an interrupted turn, and
/// a turn whose first attempt was cut and whose retry completed.
fn log() -> Vec<Payload> {
    vec![
        user("tell me about herons"),                         // 2
        checkpoint(2, 1, "herons wade "),                     // 3
        checkpoint(2, 1, "in shallow water"),                 // 4
        answer(2, 1, "herons wade in shallow water"),         // 5
        user("and egrets"),                                   // 6
        checkpoint(6, 1, "egrets are herons too, cut"),       // 7 (interrupted)
        user("and bitterns"),                                 // 8
        checkpoint(8, 1, "bitterns hide among herons"),       // 9 (attempt 1 cut)
        checkpoint(8, 2, "bitterns boom "),                   // 10
        answer(8, 2, "bitterns boom at dusk, unlike herons"), // 11
    ]
}

fn sessions_at_v5(db: &TempDb) -> Vec<SessionId> {
    sessions_at(db, 5)
}

/// Two sessions written as the writer of schema `version` (5 to 14) wrote them.
fn sessions_at(db: &TempDb, version: i64) -> Vec<SessionId> {
    let mut conn = db.raw();
    schema::migrate_to(&mut conn, Some(version)).unwrap();
    let mut ids = Vec::new();
    for n in 0..2 {
        let id = SessionId::generate();
        let key = id.to_string();
        conn.execute(
            "INSERT INTO sessions (id, title, archived, system, created_at, updated_at)
             VALUES (?1, NULL, 0, '', '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z')",
            [&key],
        )
        .unwrap();
        let started = r#"{"system":""}"#.to_owned();
        let mut rows = vec![("session_started", started)];
        rows.extend(log().iter().map(|p| (p.kind(), p.to_json())));
        for (i, (kind, payload)) in rows.iter().enumerate() {
            // The insert the writer issued up to V14 (keyed by arrival, as at V5).
            conn.execute(
                "INSERT INTO session_events (session_id, seq, id, kind, payload, created_at)
                 VALUES (?1, ?2, (SELECT COALESCE(MAX(id), 0) + 1 FROM session_events), ?3, ?4, ?5)",
                rusqlite::params![
                    key,
                    i as i64 + 1,
                    kind,
                    payload,
                    format!("2026-01-01T00:00:{:02}.{n:06}Z", i)
                ],
            )
            .unwrap();
        }
        ids.push(id);
    }
    ids
}

fn sessions_fresh(store: &Store) -> Vec<SessionId> {
    (0..2)
        .map(|_| {
            let id = store.create_session(None, String::new()).unwrap().id;
            store
                .write(|w| {
                    for p in log() {
                        w.append(id, &p)?;
                    }
                    Ok(())
                })
                .unwrap();
            id
        })
        .collect()
}

/// Every indexed event's seq (one session's worth; both sessions hold the same log). The
/// stemmed index (V18) holds the same rows as the plain one.
fn indexed_seqs(db: &TempDb, id: SessionId) -> Vec<u64> {
    let conn = db.raw();
    let seqs = |table: &str| -> Vec<u64> {
        conn.prepare(&format!(
            "SELECT e.seq FROM {table}_docsize d JOIN session_events e ON e.id = d.id
             WHERE e.session_n = (SELECT n FROM sessions WHERE id = ?1) ORDER BY e.seq"
        ))
        .unwrap()
        .query_map([id.to_string()], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let plain = seqs("session_search");
    assert_eq!(seqs("session_search_stem"), plain, "the stemmed index");
    plain
}

/// FTS5's own check of its index (rank 0: not against the content table, which by design
/// holds rows the index left out).
fn integrity(db: &TempDb) {
    for table in ["session_search", "session_search_stem"] {
        db.raw()
            .execute(
                &format!("INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 0)"),
                [],
            )
            .unwrap();
    }
}

fn hits(store: &Store, text: &str, order: SearchOrder) -> Vec<(u64, String)> {
    hits_by(store, text, order, false)
}

fn hits_by(store: &Store, text: &str, order: SearchOrder, stem: bool) -> Vec<(u64, String)> {
    let mut h: Vec<(u64, String)> = store
        .search(&SearchQuery {
            text: text.into(),
            limit: 100,
            order,
            stem,
            ..SearchQuery::default()
        })
        .unwrap()
        .into_iter()
        .map(|h| (h.seq, h.snippet))
        .collect();
    h.sort();
    h
}

fn assert_answers(db: &TempDb, store: &Store, ids: &[SessionId]) {
    for id in ids {
        // Indexed: messages and answers, the cut attempts' checkpoints (7, 9); not the
        // checkpoints of attempts that completed (3, 4, 10).
        assert_eq!(indexed_seqs(db, *id), vec![2, 5, 6, 7, 8, 9, 11]);
        let page = store
            .transcript_page(*id, i64::MAX as u64, 500, None)
            .unwrap();
        assert_eq!(
            page.items,
            ui_transcript(&store.events(*id, 0, None).unwrap(), None)
        );
    }
    for order in [SearchOrder::Relevance, SearchOrder::Recent] {
        let found = hits(store, "herons", order);
        let mut seqs: Vec<u64> = found.iter().map(|h| h.0).collect();
        seqs.dedup();
        // What the search answered before V8 too (it left the checkpoints of completed
        // attempts out at query time): messages, answers, the partials of cut attempts.
        assert_eq!(seqs, vec![2, 5, 7, 9, 11], "{order:?}");
        assert_eq!(found.len(), 10, "{order:?}: {found:?}");
        // A word only the completed checkpoints and their answer hold: the answer only.
        let wade: Vec<u64> = hits(store, "wade", order).iter().map(|h| h.0).collect();
        assert_eq!(wade, vec![5, 5], "{order:?}");
        let boom: Vec<u64> = hits(store, "boom", order).iter().map(|h| h.0).collect();
        assert_eq!(boom, vec![11, 11], "{order:?}");
        // Stemmed, `heron` finds what `herons` finds; unstemmed, nothing.
        assert_eq!(hits_by(store, "heron", order, true), found, "{order:?}");
        assert!(hits(store, "heron", order).is_empty());
    }
    integrity(db);
}

#[test]
fn a_database_at_v5_migrates_to_an_index_without_completed_checkpoints() {
    let db = TempDb::new();
    let ids = sessions_at_v5(&db);
    // Before V15 events were filed under the session's id text.
    let at_v5: Vec<u64> = db
        .raw()
        .prepare(
            "SELECT e.seq FROM session_search_docsize d JOIN session_events e ON e.id = d.id
             WHERE e.session_id = ?1 ORDER BY e.seq",
        )
        .unwrap()
        .query_map([ids[0].to_string()], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(at_v5, vec![2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    let store = db.open();
    assert_answers(&db, &store, &ids);
}

#[test]
fn appends_leave_completed_checkpoints_out_of_the_index() {
    let db = TempDb::new();
    let store = db.open();
    let ids = sessions_fresh(&store);
    assert_answers(&db, &store, &ids);
}

/// A purge deletes a session's events newest first, so an answer goes before its
/// checkpoints; a whole delete goes oldest first. Either way the index stays whole.
#[test]
fn deleting_events_in_either_order_keeps_the_index_whole() {
    let db = TempDb::new();
    let store = db.open();
    let ids = sessions_fresh(&store);
    let conn = db.raw();
    let mut stmt = conn
        .prepare(
            "DELETE FROM session_events
                  WHERE session_n = (SELECT n FROM sessions WHERE id = ?1) AND seq = ?2",
        )
        .unwrap();
    for seq in (1..=11).rev() {
        stmt.execute(rusqlite::params![ids[0].to_string(), seq])
            .unwrap();
    }
    for seq in 1..=11 {
        stmt.execute(rusqlite::params![ids[1].to_string(), seq])
            .unwrap();
    }
    drop(stmt);
    integrity(&db);
    assert_eq!(index_rows(&db), (0, 0));
}

/// Rows in the plain and the stemmed index.
fn index_rows(db: &TempDb) -> (i64, i64) {
    let count = |table: &str| -> i64 {
        db.raw()
            .query_row(&format!("SELECT count(*) FROM {table}_docsize"), [], |r| {
                r.get(0)
            })
            .unwrap()
    };
    (count("session_search"), count("session_search_stem"))
}

/// A session deleted through the store and purged leaves no row in either index; the
/// other session's rows stay, and a stemmed search finds only it.
#[test]
fn a_purged_session_leaves_neither_index() {
    let db = TempDb::new();
    let store = db.open();
    store.stop_maintenance();
    let ids = sessions_fresh(&store);
    let before = index_rows(&db);
    assert_eq!(before.0, before.1);
    store.delete_session(ids[0]).unwrap();
    store.purge_pending(i64::MAX).unwrap();
    assert_eq!(index_rows(&db), (before.0 / 2, before.1 / 2));
    integrity(&db);
    let found = store
        .search(&SearchQuery {
            text: "heron".into(),
            limit: 100,
            stem: true,
            ..SearchQuery::default()
        })
        .unwrap();
    assert!(!found.is_empty());
    assert!(found.iter().all(|h| h.session_id == ids[1]), "{found:?}");
}

/// A new database gets the large pages; a backup of one made with 4 KiB pages gets them
/// too (how an existing database reaches the compact layout).
#[test]
fn new_databases_and_backups_use_the_large_page_size() {
    let page_size = |path: &std::path::Path| -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap()
    };
    let fresh = TempDb::new();
    drop(fresh.open());
    assert_eq!(page_size(&fresh.path()), schema::PAGE_SIZE_BYTES);

    let old = TempDb::new();
    {
        let conn = old.raw();
        conn.pragma_update(None, "page_size", 4096).unwrap();
        conn.pragma_update(None, "journal_mode", "wal").unwrap();
    }
    let store = old.open();
    assert_eq!(page_size(&old.path()), 4096);
    store.create_session(None, String::new()).unwrap();
    let copy = old.dir.path().join("copy.db");
    store.backup_to(&copy).unwrap();
    assert_eq!(page_size(&copy), schema::PAGE_SIZE_BYTES);
}

/// V14 re-keys an existing database in time order (issue 27 item 8): at V5 the two
/// sessions' rows were keyed one session after the other, while their events interleave
/// in time. After the migration newest first interleaves them, the index holds what it
/// held, the log is append-only again, and a new event is keyed after them all.
#[test]
fn a_database_keyed_by_arrival_is_re_keyed_in_time_order() {
    let db = TempDb::new();
    let ids = sessions_at_v5(&db);
    let store = db.open();
    assert_answers(&db, &store, &ids);
    let found: Vec<(SessionId, u64)> = store
        .search(&SearchQuery {
            text: "herons".into(),
            limit: 100,
            order: SearchOrder::Recent,
            ..SearchQuery::default()
        })
        .unwrap()
        .into_iter()
        .map(|h| (h.session_id, h.seq))
        .collect();
    let mut expected = Vec::new();
    for seq in [11, 9, 7, 5, 2] {
        expected.push((ids[1], seq));
        expected.push((ids[0], seq));
    }
    assert_eq!(
        found, expected,
        "newest first by time, the sessions interleaved"
    );
    let conn = db.raw();
    let keys: Vec<i64> = conn
        .prepare(
            "SELECT e.id FROM session_events e JOIN sessions s ON s.n = e.session_n
                  ORDER BY e.created_at, s.id, e.seq",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    // 2026-01-01T00:00:00.000000Z in milliseconds.
    assert_eq!(keys[0], 1_767_225_600_000);
    let refused = conn.execute("UPDATE session_events SET kind = kind", []);
    assert!(
        refused.is_err_and(|e| e.to_string().contains("append-only")),
        "I1's trigger is back"
    );
    drop(conn);
    store.append(ids[0], &user("herons again")).unwrap();
    let newest = store
        .search(&SearchQuery {
            text: "herons".into(),
            limit: 1,
            order: SearchOrder::Recent,
            ..SearchQuery::default()
        })
        .unwrap();
    assert_eq!((newest[0].session_id, newest[0].seq), (ids[0], 12));
    integrity(&db);
}

/// Every event as its columns hold it, filed under its session's id, in key order.
/// The rows the search index holds, by id: a migration must keep them all.
fn indexed_ids(db: &TempDb) -> Vec<i64> {
    db.raw()
        .prepare("SELECT id FROM session_search_docsize ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn every_event(db: &TempDb, sql: &str) -> Vec<(String, i64, i64, String, String, String)> {
    db.raw()
        .prepare(sql)
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// V15 files events under a session number instead of the id's 36 bytes of text (bytes
/// per event, issue 27): every event keeps its bytes and its key, the index what it held,
/// a deleted session its pending purge; writes go on under the numbers.
#[test]
fn events_filed_by_session_id_text_keep_every_byte_under_session_numbers() {
    let db = TempDb::new();
    let ids = sessions_at(&db, 14);
    let doomed = SessionId::generate();
    {
        let conn = db.raw();
        conn.execute(
            "INSERT INTO sessions (id, title, archived, system, created_at, updated_at, deleted_at)
             VALUES (?1, 'gone', 0, '', '2025-01-01T00:00:00.000000Z',
                     '2025-01-01T00:00:00.000000Z', '2026-02-01T00:00:00.000000Z')",
            [doomed.to_string()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO session_events (session_id, seq, id, kind, payload, created_at)
             VALUES (?1, 1, 1000, 'session_started', '{\"system\":\"\"}',
                     '2025-01-01T00:00:00.000000Z')",
            [doomed.to_string()],
        )
        .unwrap();
    }
    let columns = "e.seq, e.id, e.kind, e.payload, e.created_at FROM session_events e";
    let before = every_event(
        &db,
        &format!("SELECT e.session_id, {columns} ORDER BY e.id"),
    );
    let index_before = indexed_ids(&db);
    // Migrated on its own first: the store's purge would start at once.
    schema::migrate(&mut db.raw()).unwrap();
    let after = every_event(
        &db,
        &format!("SELECT s.id, {columns} JOIN sessions s ON s.n = e.session_n ORDER BY e.id"),
    );
    assert_eq!(
        after, before,
        "every event's bytes and key, under its own session"
    );
    assert_eq!(indexed_ids(&db), index_before);
    let store = db.open();
    assert_answers(&db, &store, &ids);
    let conn = db.raw();
    let dangling: i64 = conn
        .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(dangling, 0);
    let refused = conn.execute("UPDATE session_events SET kind = kind", []);
    assert!(refused.is_err_and(|e| e.to_string().contains("append-only")));
    // Writes go on: the next seq of an old session, a new session under a new number.
    assert_eq!(store.append(ids[1], &user("herons again")).unwrap().seq, 12);
    let new = store.create_session(None, String::new()).unwrap().id;
    let number_of = |id: SessionId| -> i64 {
        conn.query_row(
            "SELECT n FROM sessions WHERE id = ?1",
            [id.to_string()],
            |r| r.get(0),
        )
        .unwrap()
    };
    // Numbered by creation: the doomed session (2025) is 1, then the two of 2026.
    let mut migrated = [number_of(ids[0]), number_of(ids[1])];
    migrated.sort();
    assert_eq!(migrated, [2, 3]);
    assert_eq!(number_of(new), 4);
    assert_eq!(store.events(new, 0, None).unwrap().len(), 1);
    // The deleted session kept its pending purge, which runs under the numbers.
    wait_for("the purge is done", PURGE_DEADLINE, || {
        store.pending_purges().unwrap() == 0
    });
    let left: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM session_events WHERE session_n = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        left, 0,
        "the doomed session (the oldest: number 1) left nothing"
    );
    integrity(&db);
}
