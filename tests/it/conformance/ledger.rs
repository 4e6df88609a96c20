//! The ledger: one row per provider call, summed per purpose.

use brain::session::store::{CallStatus, LedgerEntry, Purpose};

use super::delete::call;
use super::{Db, new_session};

conformance!(
    recorded_calls_get_increasing_ids,
    usage_sums_calls_per_purpose_and_per_session,
);

fn recorded_calls_get_increasing_ids(db: &Db) {
    let store = db.open();
    let id = new_session(&store);
    let a = store.record_call(&call(Some(id), 1)).unwrap();
    let b = store.record_call(&call(None, 1)).unwrap();
    assert!(b > a, "{a} then {b}");
}

fn usage_sums_calls_per_purpose_and_per_session(db: &Db) {
    let store = db.open();
    let (one, two) = (new_session(&store), new_session(&store));
    store.record_call(&call(Some(one), 10)).unwrap();
    store.record_call(&call(Some(one), 5)).unwrap();
    store.record_call(&call(Some(two), 100)).unwrap();
    store
        .record_call(&LedgerEntry {
            purpose: Purpose::Title,
            status: CallStatus::Error,
            error_code: Some("timeout".into()),
            ..call(None, 3)
        })
        .unwrap();
    let all = store.usage(None).unwrap();
    assert_eq!(all.total.calls, 4);
    assert_eq!(all.total.input_tokens, 118);
    assert_eq!(all.total.output_tokens, 236);
    assert_eq!(all.total.cache_read_tokens, 4);
    assert_eq!(all.by_purpose["chat"].calls, 3);
    assert_eq!(all.by_purpose["title"].input_tokens, 3);
    let first = store.usage(Some(one)).unwrap();
    assert_eq!(first.total.calls, 2);
    assert_eq!(first.total.input_tokens, 15);
    assert!(!first.by_purpose.contains_key("title"));
}
