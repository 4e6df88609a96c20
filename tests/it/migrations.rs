//! The schema: migrations applied one by one equal migrations applied at once; a database
//! newer than the binary is refused; the PostgreSQL files mirror the SQLite ones.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use brain::session::store::sqlite::schema;
use brain::session::{Store, StoreError, StoreOptions};

use crate::support::TempDb;

/// The whole schema as SQLite stores it: every object's type, name and SQL.
fn schema_of(path: &Path) -> Vec<(String, String, String)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT type, name, COALESCE(sql, '') FROM sqlite_master
             WHERE name != 'refinery_schema_history' ORDER BY type, name",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn migrating_step_by_step_gives_the_same_schema_as_a_fresh_database() {
    let fresh = TempDb::new();
    drop(fresh.open());

    let stepped = TempDb::new();
    for v in schema::versions() {
        let mut conn = rusqlite::Connection::open(stepped.path()).unwrap();
        let applied = schema::migrate_to(&mut conn, Some(v)).unwrap();
        assert_eq!(applied, 1, "version {v} applied on its own");
        assert_eq!(schema::current_version(&conn).unwrap(), v);
    }
    drop(stepped.open()); // opening a current database applies nothing more

    assert_eq!(schema_of(&fresh.path()), schema_of(&stepped.path()));
    assert!(schema_of(&fresh.path()).len() > 5);
}

#[test]
fn opening_twice_applies_nothing_the_second_time() {
    let db = TempDb::new();
    drop(db.open());
    let mut conn = db.raw();
    assert_eq!(schema::migrate(&mut conn).unwrap(), 0);
    assert_eq!(
        schema::current_version(&conn).unwrap(),
        schema::latest_version()
    );
}

fn mark_newer(db: &TempDb) -> i64 {
    let newer = schema::latest_version() + 1;
    db.raw()
        .execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
             VALUES (?1, 'from_the_future', '2030-01-01T00:00:00Z', '0')",
            [newer],
        )
        .unwrap();
    newer
}

#[test]
fn a_database_newer_than_the_binary_is_refused_with_a_clear_error() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    drop(store);
    let newer = mark_newer(&db);
    let err = match Store::open(&db.path(), StoreOptions::default()) {
        Err(e) => e,
        Ok(_) => panic!("a newer database was opened"),
    };
    assert!(
        matches!(err, StoreError::SchemaTooNew { found, supported }
            if found == newer && supported == schema::latest_version()),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("newer") && text.contains(&newer.to_string()),
        "{text}"
    );
    // Nothing was touched.
    let n: i64 = db
        .raw()
        .query_row(
            "SELECT COUNT(*) FROM session_events WHERE session_n = (SELECT n FROM sessions WHERE id = ?1)",
            [id.to_string()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn brain_migrate_creates_the_database_and_refuses_a_newer_one() {
    let db = TempDb::new();
    let nested = db.dir.path().join("a").join("b").join("brain.db");
    let ok = Command::new(env!("CARGO_BIN_EXE_brain"))
        .args(["migrate", "--db"])
        .arg(&nested)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(
        out.contains(&format!("version {}", schema::latest_version())),
        "{out}"
    );
    assert!(nested.exists());

    // BRAIN_DB works as well as --db.
    drop(db.open());
    let newer = mark_newer(&db);
    let refused = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("migrate")
        .env("BRAIN_DB", db.path())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("newer") && err.contains(&newer.to_string()),
        "{err}"
    );
}

fn migration_files(dialect: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(dialect);
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn postgres_migrations_are_kept_in_step_file_for_file() {
    let sqlite = migration_files("sqlite");
    assert_eq!(sqlite, migration_files("postgres"));
    assert_eq!(sqlite.len(), schema::versions().len());
}

#[test]
fn sqlite_tables_and_columns_are_the_declared_ones() {
    let db = TempDb::new();
    drop(db.open());
    let cols = schema::table_columns(&db.raw()).unwrap();
    for expected in [
        "sessions.id",
        "sessions.updated_at",
        "session_events.seq",
        "session_events.id",
        "session_events.search_text",
        "ledger.purpose",
    ] {
        assert!(
            cols.iter().any(|c| c == expected),
            "{expected} missing from {cols:?}"
        );
    }
    assert!(
        !cols.iter().any(|c| c.starts_with("session_search")),
        "{cols:?}"
    );
    assert!(!cols.iter().any(|c| c.starts_with("refinery")), "{cols:?}");
}

fn brain_at(db: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .unwrap()
}

fn version_of(db: &TempDb) -> i64 {
    schema::current_version(&db.raw()).unwrap()
}

/// Every command that only reads.
const READ_ONLY_COMMANDS: [&[&str]; 5] = [
    &["sessions", "list"],
    &["sessions", "show", "0192e4a0-7b1c-7d3e-8f00-123456789abc"],
    &["sessions", "search", "herons"],
    &["sessions", "export", "--all"],
    &["sessions", "export", "--all", "--format", "markdown"],
];

#[test]
fn read_only_commands_leave_an_older_schema_as_it_is_and_suggest_migrate() {
    let db = TempDb::new();
    let older = schema::versions()[schema::versions().len() - 2];
    schema::migrate_to(&mut db.raw(), Some(older)).unwrap();
    for args in READ_ONLY_COMMANDS {
        let out = brain_at(&db.path(), args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("older") && err.contains("brain migrate"),
            "{args:?}: {err}"
        );
        assert_eq!(version_of(&db), older, "{args:?} migrated the database");
    }
    // A backup copies the file as it is: the careful order is backup, then migrate.
    let copy = db.dir.path().join("copy.db");
    let out = brain_at(&db.path(), &["backup", copy.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(version_of(&db), older);
    let copied = rusqlite::Connection::open(&copy).unwrap();
    assert_eq!(schema::current_version(&copied).unwrap(), older);
}

#[test]
fn read_only_commands_refuse_a_newer_schema() {
    let db = TempDb::new();
    drop(db.open());
    let newer = mark_newer(&db);
    let copy = db.dir.path().join("copy.db");
    let backup: &[&str] = &["backup", copy.to_str().unwrap()];
    for args in READ_ONLY_COMMANDS.into_iter().chain([backup]) {
        let out = brain_at(&db.path(), args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("newer") && err.contains(&newer.to_string()),
            "{args:?}: {err}"
        );
    }
    assert!(!copy.exists());
}

#[test]
fn read_only_commands_on_a_missing_database_do_not_create_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("nowhere").join("brain.db");
    let copy = dir.path().join("copy.db");
    let backup: &[&str] = &["backup", copy.to_str().unwrap()];
    for args in READ_ONLY_COMMANDS.into_iter().chain([backup]) {
        let out = brain_at(&db, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no database at"), "{args:?}: {err}");
        assert!(
            !db.parent().unwrap().exists(),
            "{args:?} created a directory"
        );
    }
    // Beside an existing directory: no file either.
    let db = dir.path().join("brain.db");
    let out = brain_at(&db, &["sessions", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!db.exists());
}

/// A rolling upgrade in a team: a question an older server writes while this one migrates
/// to V16 is filed for the restart recovery, committed before the migration takes its lock
/// or after (the triggers come before the back-fill, which copies under their lock).
#[test]
fn a_question_an_older_server_writes_during_the_v16_migration_is_filed() {
    let Some(pg) = crate::testdb::fresh("a_question_written_during_the_v16_migration") else {
        return;
    };
    let db = Path::new(&pg.url).to_owned();
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let id = store.create_session(None, "s".into()).unwrap().id;
    let turn = store.append(id, &crate::support::user("q")).unwrap().seq;
    drop(store);
    let connect = || postgres::Client::connect(&pg.url, postgres::NoTls).unwrap();
    // Back to V15, as an older server left it (V17 after V16 makes its index again, V18
    // its stemmed search column).
    connect()
        .batch_execute(
            "DROP INDEX session_search_stem;
             ALTER TABLE session_events DROP COLUMN search_stem;
             DROP TEXT SEARCH CONFIGURATION brain_stem; DROP TEXT SEARCH DICTIONARY brain_stem;
             DROP TRIGGER questions_to_check_insert ON session_events;
             DROP TRIGGER questions_to_check_delete ON session_events;
             DROP TABLE questions_to_check;
             DROP FUNCTION questions_to_check_insert(); DROP FUNCTION questions_to_check_delete();
             DROP FUNCTION brain_question_key(json, text, text, text);
             DROP FUNCTION brain_nul_free(json);
             DELETE FROM refinery_schema_history WHERE version >= 16;",
        )
        .unwrap();
    // The older server's question, in a transaction still open when the migration starts.
    let mut older = connect();
    let mut tx = older.transaction().unwrap();
    let payload = format!(
        r#"{{"turn":{turn},"attempt":1,"call_id":"call_0","name":"fs__write","args":"{{}}"}}"#
    );
    tx.batch_execute(&format!(
        "INSERT INTO session_events (session_id, seq, kind, payload, created_at)
         VALUES ('{id}', {}, 'permission_requested', '{payload}', now())",
        turn + 1
    ))
    .unwrap();
    let migrating = {
        let db = db.clone();
        std::thread::spawn(move || Store::open(&db, StoreOptions::default()).map(drop))
    };
    // Until the migration waits on the open transaction's lock; then it commits.
    let mut look = connect();
    crate::support::wait_for("the migration waiting", Duration::from_secs(30), || {
        look.query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            &[],
        )
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0)
            > 0
    });
    tx.commit().unwrap();
    migrating.join().unwrap().unwrap();
    let store = Store::open(&db, StoreOptions::default()).unwrap();
    let filed: Vec<u64> = store
        .questions_to_check()
        .unwrap()
        .into_iter()
        .filter(|(s, _)| *s == id)
        .map(|(_, k)| k.seq)
        .collect();
    assert_eq!(filed, [turn + 1], "the older server's question is filed");
}
