//! What either store files for the restart recovery (V16's `questions_to_check`): the keys
//! of every question and answer, whichever path wrote the event, until the recovery says
//! it has checked them; never a deleted session's. The recovery's correctness rests on
//! this: a question no row stands for would stay open forever after a kill.

use brain::session::events::{PermissionRequested, PermissionResolved, QuestionKey, QuestionSide};
use brain::session::projection::questions::any_open;
use brain::session::{Event, Payload, SessionId, Store};

use super::{Db, log, new_session};
use crate::support::user;

conformance!(
    questions_and_answers_are_filed_until_checked,
    an_import_files_its_questions,
    a_deleted_session_has_nothing_to_check,
    a_field_of_another_type_is_filed_as_unreadable,
    what_is_filed_pairs_as_the_decoded_log_does,
    a_call_id_of_any_length_is_asked_and_answered,
);

fn question(turn: u64, call: &str) -> Payload {
    Payload::PermissionRequested(PermissionRequested {
        turn,
        attempt: 1,
        call_id: call.into(),
        name: "shell".into(),
        // A NUL escape in the arguments: PostgreSQL's `->` fails on the document.
        args: "rm -rf \0 /".into(),
    })
}

fn resolved(turn: u64, call: &str) -> Payload {
    Payload::PermissionResolved(PermissionResolved {
        turn: Some(turn),
        attempt: Some(1),
        call_id: call.into(),
        decision: "deny".into(),
        by: "user".into(),
        remember: false,
        answer_id: None,
    })
}

fn asked(seq: u64, turn: u64, call: &str) -> QuestionKey {
    QuestionKey {
        seq,
        call_id: call.into(),
        side: QuestionSide::Asked { turn, attempt: 1 },
    }
}

fn answered(seq: u64, turn: u64, call: &str) -> QuestionKey {
    QuestionKey {
        seq,
        call_id: call.into(),
        side: QuestionSide::Answered {
            turn: Some(turn),
            attempt: Some(1),
        },
    }
}

/// The session's filed keys, in seq order.
fn filed(store: &Store, id: SessionId) -> Vec<QuestionKey> {
    let all = store.questions_to_check().unwrap();
    all.into_iter()
        .filter(|(s, _)| *s == id)
        .map(|(_, k)| k)
        .collect()
}

fn questions_and_answers_are_filed_until_checked(db: &Db) {
    let store = db.open();
    let (a, b) = (new_session(&store), new_session(&store));
    let t = store.append(a, &user("q")).unwrap().seq;
    let q1 = store.append(a, &question(t, "call_0")).unwrap().seq;
    let r1 = store.append(a, &resolved(t, "call_0")).unwrap().seq;
    let q2 = store.append(a, &question(t, "call_1")).unwrap().seq;
    let tb = store.append(b, &user("q")).unwrap().seq;
    let qb = store.append(b, &question(tb, "call_0")).unwrap().seq;
    assert_eq!(
        filed(&store, a),
        [
            asked(q1, t, "call_0"),
            answered(r1, t, "call_0"),
            asked(q2, t, "call_1")
        ]
    );
    // Sessions come one after another, each in seq order.
    let all = store.questions_to_check().unwrap();
    let ids: Vec<SessionId> = all.iter().map(|(s, _)| *s).collect();
    assert!(ids.chunk_by(|x, y| x == y).count() == 2, "{all:?}");

    store.questions_checked(&[(a, r1)]).unwrap();
    assert_eq!(filed(&store, a), [asked(q2, t, "call_1")]);
    assert_eq!(
        filed(&store, b),
        [asked(qb, tb, "call_0")],
        "b is untouched"
    );
    // Filed again as the log goes on; checking everything empties it.
    let r2 = store.append(a, &resolved(t, "call_1")).unwrap().seq;
    assert_eq!(
        filed(&store, a),
        [asked(q2, t, "call_1"), answered(r2, t, "call_1")]
    );
    store.questions_checked(&[(a, r2), (b, qb)]).unwrap();
    assert!(store.questions_to_check().unwrap().is_empty());
    // The log itself is untouched.
    assert_eq!(log(&store, a).len(), 6);
}

fn an_import_files_its_questions(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let t = store.append(id, &user("q")).unwrap().seq;
    let q = store.append(id, &question(t, "call_0")).unwrap().seq;
    let events = log(&store, id);
    let copy = SessionId::generate();
    store.write(|w| w.import_session(copy, &events)).unwrap();
    assert_eq!(filed(&store, copy), [asked(q, t, "call_0")]);
}

fn a_deleted_session_has_nothing_to_check(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let t = store.append(id, &user("q")).unwrap().seq;
    store.append(id, &question(t, "call_0")).unwrap();
    store.delete_session(id).unwrap();
    assert!(store.questions_to_check().unwrap().is_empty());
}

/// Rows brain never writes, put underneath the store: a turn that is a string, an attempt
/// that is not a whole number, a call id that is a number. The recovery must not pair them
/// (the decoded log leaves such events out), so they are filed as unreadable.
fn a_field_of_another_type_is_filed_as_unreadable(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let t = store.append(id, &user("q")).unwrap().seq;
    let payloads = [
        format!(r#"{{"turn":"{t}","attempt":1,"call_id":"c","name":"n","args":""}}"#),
        format!(r#"{{"turn":{t},"attempt":1.5,"call_id":"c","name":"n","args":""}}"#),
        format!(r#"{{"turn":{t},"attempt":1,"call_id":7,"name":"n","args":""}}"#),
    ];
    for (i, payload) in payloads.iter().enumerate() {
        let seq = t + 1 + i as u64;
        db.raw_execute(&if db.is_postgres() {
            format!(
                "INSERT INTO session_events (session_id, seq, kind, payload, created_at)
                 VALUES ('{id}', {seq}, 'permission_requested', '{payload}', now())"
            )
        } else {
            format!(
                "INSERT INTO session_events (session_n, seq, id, kind, payload, created_at)
                 SELECT n, {seq}, {}, 'permission_requested', '{payload}',
                        '2026-12-07T00:00:00.000000Z'
                 FROM sessions WHERE id = '{id}'",
                9_000_000_000_000_i64 + i as i64
            )
        });
    }
    let sides: Vec<QuestionSide> = filed(&store, id).iter().map(|k| k.side).collect();
    assert_eq!(sides, [QuestionSide::Unreadable; 3]);
}

/// Imported logs brain never writes, in which SQL and serde read the JSON differently: an
/// answer that would not decode (no decision, a duplicate key, a call id that is an
/// object), a call id with a NUL (PostgreSQL's text cannot hold it), a turn past 2^63
/// (SQLite's JSON reads it as a float). In each the decoded log has a question without an
/// answer, so the recovery must find it open: the keys are the decoded events'.
fn what_is_filed_pairs_as_the_decoded_log_does(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let t = store.append(id, &user("q")).unwrap().seq;
    let start = log(&store, id);
    let q = |turn: &str, call: &str| {
        format!(r#"{{"turn":{turn},"attempt":1,"call_id":{call},"name":"n","args":""}}"#)
    };
    let a = |turn: &str, call: &str, rest: &str| {
        format!(r#"{{"turn":{turn},"attempt":1,"call_id":{call}{rest}}}"#)
    };
    let (turn, decided) = (t.to_string(), r#","decision":"deny","by":"user""#);
    let cases = [
        (
            "no decision",
            q(&turn, r#""c""#),
            Some(a(&turn, r#""c""#, r#","by":"user""#)),
        ),
        (
            "a duplicate key",
            q(&turn, r#""c""#),
            Some(a(&turn, r#""c","call_id":"c""#, decided)),
        ),
        (
            "a call id that is an object",
            q(&turn, r#""{\"x\":1}""#),
            Some(a(&turn, r#"{"x":1}"#, decided)),
        ),
        (
            "a NUL in the question's call id",
            q(&turn, r#""a\u0000b""#),
            Some(a(&turn, r#""ab""#, decided)),
        ),
        ("a turn past 2^63", q("9223372036854775808", r#""c""#), None),
    ];
    for (what, question, answer) in cases {
        let mut events = start.clone();
        let mut push = |kind: &str, payload: String| {
            let seq = events.len() as u64 + 1;
            let created_at = events[events.len() - 1].created_at.clone();
            events.push(Event {
                seq,
                kind: kind.into(),
                payload,
                created_at,
            });
        };
        push("permission_requested", question);
        if let Some(answer) = answer {
            push("permission_resolved", answer);
        }
        let copy = SessionId::generate();
        store.write(|w| w.import_session(copy, &events)).unwrap();
        let keys = filed(&store, copy);
        assert!(any_open(&keys), "{what}: {keys:?}");
    }
}

/// A provider may send any id (and an import any text): 8 KiB that do not compress still
/// go in and come out whole (PostgreSQL's b-tree holds at most ~2.7 KB a row, so its index
/// keys a hash of the call id).
fn a_call_id_of_any_length_is_asked_and_answered(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let t = store.append(id, &user("q")).unwrap().seq;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let call: String = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                    [(x % 62) as usize],
            )
        })
        .collect();
    let q = store.append(id, &question(t, &call)).unwrap().seq;
    let r = store.append(id, &resolved(t, &call)).unwrap().seq;
    let found: Vec<u64> = store
        .permission_events(id, &call)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(found, [q, r]);
    assert!(
        store
            .permission_events(id, &call[..8191])
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        filed(&store, id),
        [asked(q, t, &call), answered(r, t, &call)]
    );
}
