//! The ledger: a row per provider call, sums per session and per purpose, rows kept when
//! their session is deleted.

use brain::session::SessionId;
use brain::session::events::Usage;
use brain::session::store::{CallStatus, LedgerEntry, Purpose, UsageTotals};

use crate::support::*;

fn call(session: Option<SessionId>, purpose: Purpose, input: u64, cached: u64) -> LedgerEntry {
    LedgerEntry {
        session_id: session,
        purpose,
        provider: "http://127.0.0.1:1/v1".into(),
        model: "m".into(),
        usage: Usage {
            input_tokens: input,
            output_tokens: 10,
            cache_read_tokens: cached,
            cache_write_tokens: 0,
        },
        latency_ms: 20,
        status: CallStatus::Ok,
        error_code: None,
    }
}

#[test]
fn sums_per_session_and_per_purpose_survive_deleting_the_session() {
    let db = TempDb::new();
    let store = db.open();
    let a = store.create_session(None, String::new()).unwrap().id;
    let b = store.create_session(None, String::new()).unwrap().id;
    let first = store
        .record_call(&call(Some(a), Purpose::Chat, 100, 50))
        .unwrap();
    let second = store
        .record_call(&call(Some(a), Purpose::Chat, 30, 120))
        .unwrap();
    assert!(second > first);
    store
        .record_call(&call(Some(a), Purpose::Summarize, 500, 0))
        .unwrap();
    store
        .record_call(&call(Some(b), Purpose::Title, 7, 0))
        .unwrap();
    let mut failed = call(Some(b), Purpose::Chat, 0, 0);
    failed.status = CallStatus::Error;
    failed.error_code = Some("provider_unreachable".into());
    failed.usage = Usage::default();
    store.record_call(&failed).unwrap();

    let usage_a = store.usage(Some(a)).unwrap();
    assert_eq!(
        usage_a.total,
        UsageTotals {
            calls: 3,
            input_tokens: 630,
            output_tokens: 30,
            cache_read_tokens: 170,
            cache_write_tokens: 0
        }
    );
    assert_eq!(usage_a.by_purpose["chat"].calls, 2);
    assert_eq!(usage_a.by_purpose["chat"].cache_read_tokens, 170);
    assert_eq!(usage_a.by_purpose["summarize"].input_tokens, 500);
    assert!(!usage_a.by_purpose.contains_key("title"));

    let all = store.usage(None).unwrap();
    assert_eq!(all.total.calls, 5);
    assert_eq!(all.by_purpose["chat"].calls, 3);
    assert_eq!(all.by_purpose["title"].input_tokens, 7);

    store.delete_session(a).unwrap();
    assert_eq!(
        store.usage(Some(a)).unwrap(),
        usage_a,
        "ledger rows outlive their session"
    );
    assert_eq!(store.usage(None).unwrap(), all);
}

#[test]
fn usage_of_nothing_is_zero() {
    let db = TempDb::new();
    let store = db.open();
    let report = store.usage(Some(SessionId::generate())).unwrap();
    assert_eq!(report.total, UsageTotals::default());
    assert!(report.by_purpose.is_empty());
}
