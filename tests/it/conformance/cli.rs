//! brain's commands on a PostgreSQL URL (SPEC §16): migrate, import, and backup's refusal.

use brain::session::SessionId;

use super::{Db, log};
use crate::support::run_brain;

/// The test server trusts every connection, so a password in the URL is accepted and
/// ignored: enough to see that no message repeats it.
fn with_password(db: &Db) -> String {
    db.target().to_string_lossy().replacen(
        "postgres://postgres@",
        "postgres://postgres:hunter2@",
        1,
    )
}

#[test]
fn migrate_on_a_url_names_it_without_the_password_and_backup_points_at_pg_dump() {
    let name = "migrate_on_a_url_names_it_without_the_password_and_backup_points_at_pg_dump";
    let Some(db) = Db::postgres(name) else {
        return;
    };
    let url = with_password(&db);
    assert!(url.contains("hunter2"), "{url}");
    let out = run_brain(&["--db", &url, "migrate"], b"");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("postgres://postgres@127.0.0.1"), "{said}");
    assert!(!said.contains("hunter2"), "{said}");
    let backup = tempfile::tempdir().unwrap();
    let target = backup.path().join("copy.db");
    let out = run_brain(&["--db", &url, "backup", &target.to_string_lossy()], b"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("pg_dump"), "{err}");
    assert!(!target.exists());
}

#[test]
fn sessions_import_writes_into_postgres() {
    let Some(db) = Db::postgres("sessions_import_writes_into_postgres") else {
        return;
    };
    let id = SessionId::generate();
    let line = format!(
        r#"{{"session_id":"{id}","seq":1,"kind":"session_started","payload":{{"system":"s", "title":"moved"}},"created_at":"2026-01-01T00:00:00.000000Z"}}"#
    );
    let out = run_brain(
        &[
            "--db",
            &db.target().to_string_lossy(),
            "sessions",
            "import",
            "-",
        ],
        format!("{line}\n").as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = log(&db.open(), id);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload, r#"{"system":"s", "title":"moved"}"#);
}
