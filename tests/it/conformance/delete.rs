//! Deleting a session: its events and row go, other sessions and the ledger stay.

use brain::session::StoreError;
use brain::session::store::{CallStatus, LedgerEntry, Purpose};

use super::{Db, log, new_session, seqs};
use crate::support::user;

conformance!(
    delete_removes_the_session_and_its_events_and_nothing_else,
    delete_keeps_the_sessions_ledger_rows,
);

fn delete_removes_the_session_and_its_events_and_nothing_else(db: &Db) {
    let store = db.open();
    let (gone, kept) = (new_session(&store), new_session(&store));
    for id in [gone, kept] {
        store.append(id, &user("words")).unwrap();
    }
    store.delete_session(gone).unwrap();
    assert!(!store.write(|w| w.exists(gone)).unwrap());
    assert!(log(&store, gone).is_empty());
    assert_eq!(seqs(&log(&store, kept)), vec![1, 2]);
    let e = store.delete_session(gone).unwrap_err();
    assert!(matches!(e, StoreError::SessionNotFound(_)), "{e}");
}

fn delete_keeps_the_sessions_ledger_rows(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    store.record_call(&call(Some(id), 7)).unwrap();
    store.delete_session(id).unwrap();
    let usage = store.usage(Some(id)).unwrap();
    assert_eq!(usage.total.calls, 1);
    assert_eq!(usage.total.input_tokens, 7);
}

pub fn call(session: Option<brain::session::SessionId>, input: u64) -> LedgerEntry {
    LedgerEntry {
        session_id: session,
        purpose: Purpose::Chat,
        provider: "mock".into(),
        model: "m".into(),
        usage: brain::session::events::Usage {
            input_tokens: input,
            output_tokens: 2 * input,
            cache_read_tokens: 1,
            cache_write_tokens: 0,
        },
        latency_ms: 12,
        status: CallStatus::Ok,
        error_code: None,
    }
}
