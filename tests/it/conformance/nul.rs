//! A NUL in a model's answer, a checkpoint or a call id, and the typed characters `\u0000`,
//! are kept on either store: appended, paged, searched, exported and imported byte for
//! byte. On PostgreSQL `->>` on a `json` payload holding a `\u0000` escape failed, so V5's
//! expression indexes refused the event (V10 reads fields through `brain_field`).

use brain::session::events::{PermissionRequested, PermissionResolved};
use brain::session::{Payload, SessionId, Store};

use super::{Db, log, new_session};
use crate::support::{answer, pending, user};

conformance!(
    an_answer_holding_a_nul_is_kept,
    an_answer_holding_a_typed_nul_escape_is_kept,
    a_backslash_before_a_nul_is_kept,
);

fn an_answer_holding_a_nul_is_kept(db: &Db) {
    kept(db, "r\0s", "c\0all");
}

/// The characters `\u0000` (JSON `\\u0000`) and `\\u0000` (JSON `\\\\u0000`) are not a NUL
/// escape: removing one there would leave invalid JSON.
fn an_answer_holding_a_typed_nul_escape_is_kept(db: &Db) {
    kept(db, r"r\u0000s \\u0000", r"c\u0000all");
}

/// A backslash then a NUL (JSON `\\\u0000`): an escaped backslash, then the escape.
fn a_backslash_before_a_nul_is_kept(db: &Db) {
    kept(db, "r\\\0s \\\\\0", "c\\\0all");
}

/// Writes a turn whose checkpoint, answer and permission question and answer hold `text`
/// and `call`, and checks every read and a move to another store.
fn kept(db: &Db, text: &str, call: &str) {
    let store = db.open();
    let id = new_session(&store);
    let turn = store.append(id, &user("question walrus")).unwrap().seq;
    let written = [
        store
            .append(id, &pending(turn, 1, &format!("{text} checkpoint")))
            .unwrap(),
        store
            .append(id, &question(turn, call, &format!("{text} args")))
            .unwrap(),
        store.append(id, &resolved(call)).unwrap(),
        store
            .append(id, &answer(turn, 1, &format!("{text} narwhal")))
            .unwrap(),
    ];
    assert_eq!(&log(&store, id)[2..], &written);
    paged_as_whole(&store, id);
    let hits = store
        .search(&brain::session::store::SearchQuery {
            text: "narwhal".into(),
            limit: 20,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        hits.iter().map(|h| h.seq).collect::<Vec<_>>(),
        [written[3].seq]
    );

    // Out to SQLite (as `brain sessions export | brain sessions import`) and back.
    let events = log(&store, id);
    let sqlite = Db::sqlite();
    let there = sqlite.open();
    let out = SessionId::generate();
    there.write(|w| w.import_session(out, &events)).unwrap();
    assert_eq!(bytes(&log(&there, out)), bytes(&events));
    paged_as_whole(&there, out);
    let back = SessionId::generate();
    let exported = log(&there, out);
    store.write(|w| w.import_session(back, &exported)).unwrap();
    assert_eq!(bytes(&log(&store, back)), bytes(&events));
    paged_as_whole(&store, back);
}

fn bytes(events: &[brain::session::Event]) -> Vec<(u64, &str, &str, &str)> {
    events
        .iter()
        .map(|e| (e.seq, &*e.kind, &*e.payload, &*e.created_at))
        .collect()
}

/// A page of one item at a time holds what the whole transcript holds: each item found
/// its turn's other events and its question's answer through the indexes.
fn paged_as_whole(store: &Store, id: SessionId) {
    let end = store.last_seq(id).unwrap() + 1;
    let whole = store.transcript_page(id, end, 100, None).unwrap();
    assert!(!whole.items.is_empty());
    let mut before = end;
    let mut pages = Vec::new();
    loop {
        let page = store.transcript_page(id, before, 1, None).unwrap();
        let Some(first) = page.items.first() else {
            break;
        };
        before = first.seq;
        pages.splice(0..0, page.items.iter().map(|i| format!("{i:?}")));
        if !page.more {
            break;
        }
    }
    let whole: Vec<String> = whole.items.iter().map(|i| format!("{i:?}")).collect();
    assert_eq!(pages, whole);
}

fn question(turn: u64, call: &str, args: &str) -> Payload {
    Payload::PermissionRequested(PermissionRequested {
        turn,
        attempt: 1,
        call_id: call.into(),
        name: "shell".into(),
        args: args.into(),
    })
}

fn resolved(call: &str) -> Payload {
    Payload::PermissionResolved(PermissionResolved {
        turn: None,
        attempt: None,
        call_id: call.into(),
        decision: "allow".into(),
        by: "user".into(),
        remember: false,
        answer_id: None,
    })
}
