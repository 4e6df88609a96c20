//! The schema's life on either store: migrations at open (two at once on a fresh
//! database), a newer schema refused, read-only opens that write nothing.

use std::sync::{Arc, Barrier};

use brain::clock::Clock;
use brain::session::store::OlderSchema;
use brain::session::store::sqlite::schema;
use brain::session::{Store, StoreError};

use super::{Db, new_session, options};

conformance!(
    a_schema_newer_than_this_brain_is_refused,
    a_read_only_open_refuses_writes,
);

/// PostgreSQL only: several servers share one database and may start together (SPEC
/// §16), so migrations run under an advisory lock. A SQLite file has one owner, whose
/// lock file (§12) keeps a second opener out; two `Store::open`s of one fresh file at the
/// same moment do race in refinery (`index … already exists`).
#[test]
fn postgres_two_opens_at_once_on_a_fresh_database_both_migrate_it() {
    let name = "postgres_two_opens_at_once_on_a_fresh_database_both_migrate_it";
    if let Some(db) = Db::postgres(name) {
        two_opens_at_once(&db);
    }
}

fn two_opens_at_once(db: &Db) {
    let start = Arc::new(Barrier::new(2));
    let opens: Vec<_> = (0..2)
        .map(|_| {
            let (target, start) = (db.target().to_owned(), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                Store::open(&target, options(Clock::system()))
            })
        })
        .collect();
    for open in opens {
        let store = open.join().unwrap().unwrap_or_else(|e| panic!("open: {e}"));
        new_session(&store);
    }
}

fn a_schema_newer_than_this_brain_is_refused(db: &Db) {
    drop(db.open());
    let newer = schema::latest_version().max(brain::session::store::pg::latest_version()) + 1;
    db.raw_execute(&format!(
        "INSERT INTO {} (version, name, applied_on, checksum) \
         VALUES ({newer}, 'from_the_future', '2030-01-01', '0')",
        schema::HISTORY_TABLE
    ));
    let e = Store::open(db.target(), options(Clock::system())).err();
    assert!(
        matches!(e, Some(StoreError::SchemaTooNew { found, .. }) if found == newer),
        "{e:?}"
    );
    let e = Store::open_read_only(db.target(), options(Clock::system()), OlderSchema::Accept).err();
    assert!(matches!(e, Some(StoreError::SchemaTooNew { .. })), "{e:?}");
}

fn a_read_only_open_refuses_writes(db: &Db) {
    drop(db.open());
    let store =
        Store::open_read_only(db.target(), options(Clock::system()), OlderSchema::Refuse).unwrap();
    assert!(store.is_read_only());
    let e = store.create_session(None, "s".into()).unwrap_err();
    assert!(matches!(e, StoreError::ReadOnly), "{e}");
}

#[test]
fn postgres_refuses_tls_the_server_does_not_offer_with_a_clear_error() {
    let Some(db) =
        Db::postgres("postgres_refuses_tls_the_server_does_not_offer_with_a_clear_error")
    else {
        return;
    };
    let url = format!("{}?sslmode=require", db.target().display());
    let e = Store::open(std::path::Path::new(&url), options(Clock::system()))
        .err()
        .expect("a TLS-requiring URL against a server without TLS must fail");
    let text = e.to_string();
    assert!(matches!(e, StoreError::Connect { .. }), "{text}");
    assert!(
        text.contains("cannot connect to PostgreSQL at postgres://"),
        "{text}"
    );
    assert!(text.contains("server does not support TLS"), "{text}");
}

#[test]
fn postgres_names_a_missing_database_in_its_error() {
    let Some(db) = Db::postgres("postgres_names_a_missing_database_in_its_error") else {
        return;
    };
    let url =
        crate::testdb::with_database(&db.target().to_string_lossy(), "brain_t_no_such_database");
    let e = Store::open(std::path::Path::new(&url), options(Clock::system()))
        .err()
        .expect("no such database");
    let text = e.to_string();
    assert!(
        text.contains(r#"database "brain_t_no_such_database" does not exist"#),
        "{text}"
    );
}

#[test]
fn postgres_read_only_open_of_an_unmigrated_database_says_to_migrate() {
    let Some(db) =
        Db::postgres("postgres_read_only_open_of_an_unmigrated_database_says_to_migrate")
    else {
        return;
    };
    let e = Store::open_read_only(db.target(), options(Clock::system()), OlderSchema::Refuse).err();
    assert!(
        matches!(e, Some(StoreError::SchemaTooOldServer { found: 0, .. })),
        "{e:?}"
    );
    // `brain backup` refuses PostgreSQL: the advice names pg_dump instead.
    let text = e.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("brain migrate") && !text.contains("brain backup"),
        "{text}"
    );
}
