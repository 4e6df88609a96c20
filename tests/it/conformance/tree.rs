//! Editing (a rewind and the new message), forking (byte copies) and tools' events, on
//! either store.

use brain::session::projection::NotEditable;
use brain::session::{Decoded, Event, Payload, StoreError};

use super::{Db, log, new_session, row, seqs};
use crate::support::{answer, archived, user};

conformance!(
    an_edit_appends_a_rewind_and_the_new_message_together,
    an_edit_of_anything_but_a_user_message_is_refused_and_writes_nothing,
    a_fork_copies_the_events_byte_for_byte_under_its_own_head,
    tool_events_are_kept_byte_for_byte,
);

fn an_edit_appends_a_rewind_and_the_new_message_together(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    store.append(id, &user("first")).unwrap();
    store.append(id, &answer(2, 1, "reply")).unwrap();
    store.set_archived(id, true).unwrap();
    let edited = store.write(|w| w.edit(id, 2, "second")).unwrap();
    let events = log(&store, id);
    let n = events.len();
    assert_eq!(edited, events[n - 1]);
    assert_eq!(events[n - 2].kind, "rewind");
    let Decoded::Known(Payload::Rewind(rewind)) = events[n - 2].decode() else {
        panic!("not a rewind: {:?}", events[n - 2]);
    };
    assert_eq!((rewind.to_seq, rewind.edited_seq), (1, 2));
    assert_eq!(events[n - 1].payload, r#"{"text":"second"}"#);
    assert!(
        !row(&store, id).archived,
        "an edit unarchives, as a send does"
    );
    crate::support::assert_gapless(&seqs(&events));
}

fn an_edit_of_anything_but_a_user_message_is_refused_and_writes_nothing(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    store.append(id, &user("first")).unwrap();
    store.append(id, &answer(2, 1, "reply")).unwrap();
    for (seq, expected) in [
        (3, NotEditable::NotAUserMessage(3)),
        (9, NotEditable::NoSuchEvent(9)),
    ] {
        let e = store.write(|w| w.edit(id, seq, "x")).unwrap_err();
        assert!(
            matches!(&e, StoreError::NotEditable(why) if *why == expected),
            "{e}"
        );
    }
    assert_eq!(seqs(&log(&store, id)), vec![1, 2, 3]);
}

fn a_fork_copies_the_events_byte_for_byte_under_its_own_head(db: &Db) {
    let store = db.open();
    let source = new_session(&store);
    store.append(source, &user("one")).unwrap();
    store.append(source, &answer(2, 1, "two")).unwrap();
    store.append(source, &archived(true)).unwrap();
    store.append(source, &user("later")).unwrap();
    let upto = store.write(|w| w.last_seq(source)).unwrap();
    let fork = store
        .write(|w| w.fork(source, Some(4), None, upto))
        .unwrap();
    assert_eq!(fork.title.as_deref(), Some("t (fork)"));
    assert!(
        !fork.archived,
        "the copies archived it; the fork is unarchived"
    );
    let (from, to) = (log(&store, source), log(&store, fork.id));
    assert_eq!(to[1..4], from[1..4], "events 2…4 byte for byte");
    let Decoded::Known(Payload::SessionStarted(head)) = to[0].decode() else {
        panic!("no head: {:?}", to[0]);
    };
    let forked = head.forked_from.expect("forked_from");
    assert_eq!((forked.session_id, forked.seq), (source.to_string(), 4));
    assert_eq!(to.last().map(|e| e.kind.as_str()), Some("session_archived"));
    crate::support::assert_gapless(&seqs(&to));
    assert_eq!(row(&store, fork.id), fork);
}

fn tool_events_are_kept_byte_for_byte(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    store.append(id, &user("list files")).unwrap();
    let kinds = [
        (
            "permission_requested",
            r#"{"turn":2,"attempt":1,"call_id":"c1","name":"shell","args":"{\"cmd\": \"ls\"}"}"#,
        ),
        (
            "permission_resolved",
            r#"{"call_id":"c1","decision":"allow","by":"user","remember":false}"#,
        ),
        (
            "tool_execution",
            r#"{"turn":2,"attempt":1,"step":1,"call_id":"c1","name":"shell","server":"builtin","args":"{\"cmd\": \"ls\"}","status":"ok","result_digest":{"bytes":3,"sha256":"ab","preview":"a.txt"},"duration_ms":4}"#,
        ),
    ];
    for (kind, json) in kinds {
        let probe = Event {
            seq: 0,
            kind: kind.into(),
            payload: json.into(),
            created_at: String::new(),
        };
        let Decoded::Known(payload) = probe.decode() else {
            panic!("{kind} does not decode: {json}");
        };
        let written = store.append(id, &payload).unwrap();
        assert_eq!(written.kind, kind);
    }
    let events = log(&store, id);
    let stored: Vec<(&str, &str)> = events[2..]
        .iter()
        .map(|e| (e.kind.as_str(), e.payload.as_str()))
        .collect();
    let written: Vec<Payload> = events[2..]
        .iter()
        .map(|e| match e.decode() {
            Decoded::Known(p) => p,
            other => panic!("{other:?}"),
        })
        .collect();
    for ((kind, json), p) in stored.iter().zip(&written) {
        assert_eq!(*json, p.to_json(), "{kind} kept as written");
    }
    assert_eq!(stored.len(), 3);
}
