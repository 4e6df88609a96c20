//! Imports and exports: a log comes back byte for byte (payload text, key order and
//! spacing, unknown kinds, timestamps), on either store.

use brain::session::{Event, SessionId, StoreError};

use super::{Db, log, row};
use crate::support::run_brain;

conformance!(
    an_imported_log_reads_back_byte_for_byte,
    extending_an_import_continues_the_seqs_exactly,
    a_bad_import_is_refused_and_writes_nothing,
    export_of_an_import_is_byte_identical_through_the_cli,
);

fn event(seq: u64, kind: &str, payload: &str, at: &str) -> Event {
    Event {
        seq,
        kind: kind.into(),
        payload: payload.into(),
        created_at: at.into(),
    }
}

/// Payloads no serialiser of ours would write: keys out of order, odd spacing, escapes,
/// numbers as written, an unknown kind, a pretty-printed payload across lines.
fn odd_log() -> Vec<Event> {
    vec![
        event(
            1,
            "session_started",
            r#"{"title":"odd","system":"be brief"}"#,
            "2026-01-02T03:04:05.000001Z",
        ),
        event(
            2,
            "user_message",
            r#"{"zeta": 1,  "text":"h\u00e9llo \"q\"","alpha":[2.50, 1e3, {"b":1,"a":2}]}"#,
            "2026-01-02T03:04:06.100000Z",
        ),
        event(
            3,
            "some_future_kind",
            r#"{ "z" : true , "a" : null }"#,
            "2026-01-02T03:04:07.000000Z",
        ),
        event(
            4,
            "user_message",
            "{\n  \"text\": \"pretty\"\n}",
            "2026-01-02T03:04:08.999999Z",
        ),
    ]
}

fn an_imported_log_reads_back_byte_for_byte(db: &Db) {
    let store = db.open();
    let id = SessionId::generate();
    let events = odd_log();
    store.write(|w| w.import_session(id, &events)).unwrap();
    assert_eq!(log(&store, id), events);
    let r = row(&store, id);
    assert_eq!(r.title.as_deref(), Some("odd"));
    assert_eq!(r.created_at, "2026-01-02T03:04:05.000001Z");
    assert_eq!(r.updated_at, "2026-01-02T03:04:08.999999Z");
    let e = store.write(|w| w.import_session(id, &events)).unwrap_err();
    assert!(matches!(e, StoreError::AlreadyExists(_)), "{e}");
}

fn extending_an_import_continues_the_seqs_exactly(db: &Db) {
    let store = db.open();
    let id = SessionId::generate();
    let mut events = odd_log();
    let tail = events.split_off(2);
    store.write(|w| w.import_session(id, &events)).unwrap();
    store.write(|w| w.extend_imported(id, &tail)).unwrap();
    assert_eq!(log(&store, id), odd_log());
    let gap = vec![event(
        9,
        "user_message",
        r#"{"text":"x"}"#,
        "2026-01-03T00:00:00.000000Z",
    )];
    let e = store.write(|w| w.extend_imported(id, &gap)).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt(_)), "{e}");
    assert_eq!(log(&store, id), odd_log());
}

fn a_bad_import_is_refused_and_writes_nothing(db: &Db) {
    let store = db.open();
    let id = SessionId::generate();
    let mut events = odd_log();
    events[2].seq = 7;
    let e = store.write(|w| w.import_session(id, &events)).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt(_)), "{e}");
    assert!(!store.write(|w| w.exists(id)).unwrap());
    let headless = vec![event(
        1,
        "user_message",
        r#"{"text":"x"}"#,
        "2026-01-03T00:00:00.000000Z",
    )];
    let e = store
        .write(|w| w.import_session(id, &headless))
        .unwrap_err();
    assert!(matches!(e, StoreError::Corrupt(_)), "{e}");
}

fn export_of_an_import_is_byte_identical_through_the_cli(db: &Db) {
    let store = db.open();
    store
        .write(|w| w.import_session(SessionId::generate(), &odd_log()))
        .unwrap();
    drop(store);
    let first = brain_on(
        db,
        &["sessions", "export", "--all", "--format", "jsonl"],
        b"",
    );
    assert_eq!(
        String::from_utf8_lossy(&first).lines().count(),
        odd_log().len()
    );
    // Into a fresh database of the same kind, and out again.
    let again = db.fresh_like("export_of_an_import_is_byte_identical_through_the_cli");
    brain_on(&again, &["sessions", "import", "-"], &first);
    let second = brain_on(
        &again,
        &["sessions", "export", "--all", "--format", "jsonl"],
        b"",
    );
    assert_eq!(
        String::from_utf8_lossy(&first),
        String::from_utf8_lossy(&second)
    );
}

/// Runs brain on the database; its standard output, once it succeeded.
fn brain_on(db: &Db, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let mut all = vec![std::ffi::OsStr::new("--db"), db.target().as_os_str()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    let out = run_brain(&all, stdin);
    assert!(
        out.status.success(),
        "brain {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
