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

/// Review: `brain sessions export --all | brain sessions import - --db postgres://…` of a
/// history whose answer held a NUL aborted with PostgreSQL's text (V5's indexes read the
/// payload with `->>`, which a `\u0000` escape makes fail; V10).
#[test]
fn sessions_import_of_an_answer_holding_a_nul_writes_into_postgres() {
    let name = "sessions_import_of_an_answer_holding_a_nul_writes_into_postgres";
    let Some(db) = Db::postgres(name) else {
        return;
    };
    let id = SessionId::generate();
    let at = "2026-01-01T00:00:00.000000Z";
    const ANSWER: &str = r#"{"turn":2,"attempt":1,"text":"r\u0000s","provider":"p","model":"m","duration_ms":1,"steps":1}"#;
    let lines = [
        (1, "session_started", r#"{"system":"s"}"#),
        (2, "user_message", r#"{"text":"q"}"#),
        (3, "pending_state", r#"{"turn":2,"attempt":1,"text":"r\u0000"}"#),
        (4, "assistant_turn", ANSWER),
    ]
    .map(|(seq, kind, payload)| {
        format!(
            r#"{{"session_id":"{id}","seq":{seq},"kind":"{kind}","payload":{payload},"created_at":"{at}"}}"#
        )
    });
    let out = run_brain(
        &[
            "--db",
            &db.target().to_string_lossy(),
            "sessions",
            "import",
            "-",
        ],
        format!("{}\n", lines.join("\n")).as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = log(&db.open(), id);
    assert_eq!(events.len(), 4);
    assert_eq!(events[3].payload, ANSWER);
}

#[test]
fn serve_on_a_url_creates_sessions_in_postgres_and_names_it_without_the_password() {
    let name = "serve_on_a_url_creates_sessions_in_postgres_and_names_it_without_the_password";
    let Some(db) = Db::postgres(name) else {
        return;
    };
    let url = with_password(&db);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_brain"));
    cmd.args(["--db", &url, "serve", "--listen", "127.0.0.1:0"])
        .args([
            "--distill",
            "off",
            "--provider-url",
            "http://127.0.0.1:9/v1",
        ])
        .stderr(std::process::Stdio::null());
    let mut banner = String::new();
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start brain serve");
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut banner,
    )
    .expect("banner");
    let server = banner
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {banner:?}"))
        .to_owned();
    let created = ureq::post(&format!("{server}/v1/sessions"))
        .header("Content-Type", "application/json")
        .send(r#"{"title":"team"}"#)
        .map(|mut r| r.body_mut().read_to_string().unwrap_or_default());
    let _ = child.kill();
    let _ = child.wait();
    assert!(banner.contains("database postgres://postgres@"), "{banner}");
    assert!(!banner.contains("hunter2"), "{banner}");
    let created: serde_json::Value = serde_json::from_str(&created.expect("created")).unwrap();
    let id: SessionId = created["id"].as_str().expect("an id").parse().unwrap();
    let events = log(&db.open(), id);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "session_started");
}

/// Review #3: `/health` ran a listing inline, so it hung while the database did. With the
/// `sessions` table locked, every `/health` answers within a second, and `"db"` turns to
/// `"error"` once the last good check is stale; it is `"ok"` again once the lock goes.
#[test]
fn health_answers_within_a_second_while_the_database_hangs() {
    use std::time::{Duration, Instant};

    use crate::server::{Brain, call};
    use crate::support::MockLlm;

    let Some(db) = Db::postgres("health_answers_within_a_second_while_the_database_hangs") else {
        return;
    };
    let url = db.target().to_string_lossy().into_owned();
    let mock = MockLlm::start(&[]);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_brain"));
    cmd.args(["--db", &url, "serve", "--listen", "127.0.0.1:0"])
        .args(["--distill", "off", "--provider-url", &mock.url])
        .stderr(std::process::Stdio::null());
    let b = Brain::spawn(&mut cmd);
    let health = |b: &Brain| {
        let started = Instant::now();
        let (status, body) = call(b, "GET", "/health", None);
        let took = started.elapsed();
        assert_eq!(status, 200, "{body}");
        assert!(took < Duration::from_secs(1), "/health took {took:?}");
        body["db"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(health(&b), "ok");
    let mut locker = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut tx = locker.transaction().unwrap();
    tx.batch_execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while health(&b) == "ok" {
        assert!(Instant::now() < deadline, "db never went stale");
    }
    tx.rollback().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while health(&b) != "ok" {
        assert!(Instant::now() < deadline, "db never recovered");
    }
}
