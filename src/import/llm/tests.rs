//! Databases built here with the columns `llm` writes (the real tool writes one in
//! tests/it/import_llm.rs): the 0.32+ tables as 0.36 creates them, the legacy ones as the
//! docs list them.

use super::*;

/// The 0.32+ tables, the columns as llm 0.36 creates them (`messages`, `parts`,
/// `fragments`, `threads`, `turns`), and the legacy two (which 0.36 keeps, empty).
const NEW_SCHEMA: &str = r#"
CREATE TABLE conversations (id TEXT PRIMARY KEY, name TEXT, model TEXT);
CREATE TABLE responses (id TEXT PRIMARY KEY, model TEXT, prompt TEXT, system TEXT,
  prompt_json TEXT, options_json TEXT, response TEXT, response_json TEXT,
  conversation_id TEXT, duration_ms INTEGER, datetime_utc TEXT);
CREATE TABLE fragments (id INTEGER PRIMARY KEY, hash TEXT, content TEXT, datetime_utc TEXT,
  source TEXT);
CREATE TABLE messages (hash TEXT PRIMARY KEY, parent_hash TEXT, role TEXT,
  provider_metadata TEXT);
CREATE TABLE parts (id INTEGER PRIMARY KEY, message_hash TEXT, position INTEGER, type TEXT,
  tool_name TEXT, text TEXT, payload TEXT);
CREATE TABLE threads (id TEXT PRIMARY KEY, name TEXT, tip_message_hash TEXT,
  forked_from TEXT, datetime_utc TEXT);
CREATE TABLE turns (id TEXT PRIMARY KEY, thread_id TEXT, parent_message_hash TEXT,
  tip_message_hash TEXT, model TEXT, resolved_model TEXT, options_json TEXT, schema_id TEXT,
  input_tokens INTEGER, output_tokens INTEGER, token_details TEXT, duration_ms INTEGER,
  datetime_utc TEXT, response_json TEXT);
"#;

/// Before 0.32: the documented columns only.
const LEGACY_SCHEMA: &str = r#"
CREATE TABLE conversations (id TEXT PRIMARY KEY, name TEXT, model TEXT);
CREATE TABLE responses (id TEXT PRIMARY KEY, model TEXT, prompt TEXT, system TEXT,
  response TEXT, conversation_id TEXT, datetime_utc TEXT);
"#;

fn db(schema: &str, rows: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("logs.db");
    let conn = Connection::open(&path).expect("create");
    conn.execute_batch(schema).expect("schema");
    conn.execute_batch(rows).expect("rows");
    (dir, path)
}

fn read_all(path: &Path) -> Result<Vec<Conversation>, ReadError> {
    read(path).collect()
}

fn ts(s: &str) -> Option<Timestamp> {
    Some(s.parse().expect("timestamp"))
}

/// A thread: system → user → two answers (the second a regeneration, the tip), then a
/// follow-up whose prompt borrows a fragment, answered with reasoning and a tool call, a
/// tool result and a final answer.
const THREAD: &str = r#"
INSERT INTO fragments VALUES (1, 'fh', 'THE NOVEL', '2026-01-01', 'novel.txt');
INSERT INTO messages VALUES
  ('b2:s', NULL, 'system', NULL),
  ('b2:u1', 'b2:s', 'user', NULL),
  ('b2:a1', 'b2:u1', 'assistant', NULL),
  ('b2:a1b', 'b2:u1', 'assistant', NULL),
  ('b2:u2', 'b2:a1b', 'user', NULL),
  ('b2:a2', 'b2:u2', 'assistant', NULL),
  ('b2:t2', 'b2:a2', 'tool', NULL),
  ('b2:a3', 'b2:t2', 'assistant', NULL);
INSERT INTO parts (message_hash, position, type, tool_name, text, payload) VALUES
  ('b2:s', 0, 'text', NULL, 'Be terse.', NULL),
  ('b2:u1', 0, 'text', NULL, 'Hello ü 🦀', NULL),
  ('b2:a1', 0, 'text', NULL, 'first answer', NULL),
  ('b2:a1b', 0, 'text', NULL, 'second answer', NULL),
  ('b2:u2', 0, 'text', NULL, NULL,
    '{"text_ref": [{"literal": "Summarise "}, {"fragment": 1}, {"literal": " please"}]}'),
  ('b2:u2', 1, 'attachment', NULL, NULL, '{"attachment": {"id": "att1"}}'),
  ('b2:a2', 0, 'reasoning', NULL, 'thinking...', NULL),
  ('b2:a2', 1, 'text', NULL, 'Let me count. ', NULL),
  ('b2:a2', 2, 'tool_call', 'count', NULL, '{"name": "count", "arguments": {"s": "x"}}'),
  ('b2:t2', 0, 'tool_result', 'count', NULL, '{"name": "count", "output": "42"}'),
  ('b2:a3', 0, 'text', NULL, 'It has 42 words.', NULL);
INSERT INTO threads VALUES
  ('01thread', 'Hello', 'b2:a3', NULL, '2026-11-30 10:00:00.000000+00:00');
INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, model,
    resolved_model, duration_ms, datetime_utc) VALUES
  ('t1', '01thread', 'b2:u1', 'b2:a1', 'mock', NULL, 500, '2026-11-30T10:00:00+00:00'),
  ('t1b', '01thread', 'b2:u1', 'b2:a1b', 'mock', 'mock-2025', 700,
    '2026-11-30T10:01:00+00:00'),
  ('t2', '01thread', 'b2:u2', 'b2:a3', 'mock', NULL, 2000, '2026-11-30T10:02:00+00:00');
"#;

#[test]
fn a_thread_with_branches_fragments_and_tools() {
    let (_dir, path) = db(NEW_SCHEMA, THREAD);
    let all = read_all(&path).expect("reads");
    assert_eq!(all.len(), 1);
    let c = &all[0];
    assert_eq!(c.source, Source::Llm);
    assert_eq!(c.id, "01thread");
    assert_eq!(c.title.as_deref(), Some("Hello"));
    assert_eq!(c.created_at, ts("2026-11-30T10:00:00Z"));
    assert_eq!(c.current.as_deref(), Some("b2:a3"));
    let by = |h: &str| c.messages.iter().find(|m| m.id == h).expect(h);
    assert_eq!(c.messages.len(), 8, "both answers to u1 are kept");
    assert_eq!(
        c.messages[0].id, "b2:s",
        "the tip's line reads oldest first"
    );
    assert_eq!(by("b2:s").role, Role::System);
    assert_eq!(by("b2:u1").text, "Hello ü 🦀");
    assert_eq!(by("b2:a1").parent.as_deref(), Some("b2:u1"));
    assert_eq!(by("b2:a1b").parent.as_deref(), Some("b2:u1"));
    assert_eq!(by("b2:u2").text, "Summarise THE NOVEL please");
    assert_eq!(by("b2:u2").skipped, vec![("attachment".to_owned(), 1)]);
    let a2 = by("b2:a2");
    assert_eq!(a2.text, "Let me count. ");
    assert_eq!(
        a2.skipped,
        vec![("reasoning".to_owned(), 1), ("tool_call".to_owned(), 1)]
    );
    let t2 = by("b2:t2");
    assert_eq!((t2.role, t2.text.as_str()), (Role::Tool, "42"));
    assert_eq!(t2.tool_name.as_deref(), Some("count"));
    // Times from the turn that wrote each message: the prompt at its start, the answer at
    // start + duration; the model (resolved when llm knew it) on answers only.
    assert_eq!(by("b2:u1").created_at, ts("2026-11-30T10:00:00Z"));
    assert_eq!(by("b2:s").created_at, ts("2026-11-30T10:00:00Z"));
    assert_eq!(by("b2:a1").created_at, ts("2026-11-30T10:00:00.5Z"));
    assert_eq!(by("b2:a1b").created_at, ts("2026-11-30T10:01:00.7Z"));
    assert_eq!(by("b2:a1b").model.as_deref(), Some("mock-2025"));
    assert_eq!(by("b2:a1").model.as_deref(), Some("mock"));
    assert_eq!(by("b2:u2").created_at, ts("2026-11-30T10:02:00Z"));
    assert_eq!(by("b2:a3").created_at, ts("2026-11-30T10:02:02Z"));
    assert_eq!(by("b2:u1").model, None);
}

#[test]
fn a_fork_is_its_own_conversation_with_the_shared_beginning() {
    let fork = r#"
      INSERT INTO messages VALUES ('b2:u9', 'b2:a1', 'user', NULL),
        ('b2:a9', 'b2:u9', 'assistant', NULL);
      INSERT INTO parts (message_hash, position, type, text) VALUES
        ('b2:u9', 0, 'text', 'other way'), ('b2:a9', 0, 'text', 'fine');
      INSERT INTO threads VALUES ('02fork', NULL, 'b2:a9', '01thread',
        '2026-11-30 11:00:00+00:00');
      INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, model,
        duration_ms, datetime_utc) VALUES
        ('t9', '02fork', 'b2:u9', 'b2:a9', 'mock', 0, '2026-11-30T11:00:00+00:00');
    "#;
    let (_dir, path) = db(NEW_SCHEMA, &format!("{THREAD}{fork}"));
    let all = read_all(&path).expect("reads");
    let ids: Vec<&str> = all.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["01thread", "02fork"]);
    let f = &all[1];
    let hashes: Vec<&str> = f.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(hashes, ["b2:s", "b2:u1", "b2:a1", "b2:u9", "b2:a9"]);
    // The shared beginning keeps the times the original thread's turns gave it.
    assert_eq!(f.messages[2].created_at, ts("2026-11-30T10:00:00.5Z"));
    assert_eq!(f.messages[4].created_at, ts("2026-11-30T11:00:00Z"));
}

const LEGACY_ROWS: &str = r#"
INSERT INTO conversations VALUES ('01conv', 'Old chat', 'gpt-4o-mini');
INSERT INTO responses VALUES
  ('r1', 'gpt-4o-mini', 'hi', 'Be kind.', 'hello!', '01conv', '2024-05-06T12:00:00.250000'),
  ('r2', NULL, 'more', 'Be kind.', 'sure', '01conv', '2024-05-06T12:01:00'),
  ('r3', 'gpt-4o', 'again', 'Be brief.', 'ok', '01conv', '2024-05-06T12:02:00'),
  ('r0', 'claude-3', 'lonely', NULL, 'alone', NULL, '2024-05-01T08:00:00');
"#;

#[test]
fn the_legacy_schema_reads_as_lines() {
    let (_dir, path) = db(LEGACY_SCHEMA, LEGACY_ROWS);
    let all = read_all(&path).expect("reads");
    let ids: Vec<&str> = all.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["r0", "01conv"],
        "oldest first; no conversation: its own"
    );
    let c = &all[1];
    assert_eq!(c.title.as_deref(), Some("Old chat"));
    let line: Vec<(&str, Role, &str)> = c
        .messages
        .iter()
        .map(|m| (m.id.as_str(), m.role, m.text.as_str()))
        .collect();
    assert_eq!(
        line,
        [
            ("r1:system", Role::System, "Be kind."),
            ("r1:prompt", Role::User, "hi"),
            ("r1:response", Role::Assistant, "hello!"),
            ("r2:prompt", Role::User, "more"),
            ("r2:response", Role::Assistant, "sure"),
            ("r3:system", Role::System, "Be brief."),
            ("r3:prompt", Role::User, "again"),
            ("r3:response", Role::Assistant, "ok"),
        ]
    );
    for pair in c.messages.windows(2) {
        assert_eq!(pair[1].parent.as_deref(), Some(pair[0].id.as_str()));
    }
    assert_eq!(c.current.as_deref(), Some("r3:response"));
    assert_eq!(
        c.created_at,
        ts("2024-05-06T12:00:00.25Z"),
        "no offset: UTC"
    );
    assert_eq!(c.messages[2].model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(
        c.messages[4].model.as_deref(),
        Some("gpt-4o-mini"),
        "the conversation's model when the response has none"
    );
    assert_eq!(c.messages[7].model.as_deref(), Some("gpt-4o"));
    assert_eq!(all[0].title, None);
}

#[test]
fn a_legacy_conversation_continued_by_a_thread_is_read_once() {
    // 0.32+ continues conversation 01conv as thread 01conv (same id, the whole history
    // in its messages) and dual-wrote response r9 as turn r9.
    let rows = r#"
      INSERT INTO conversations VALUES ('01conv', 'Old chat', 'm');
      INSERT INTO responses (id, model, prompt, response, conversation_id, datetime_utc)
      VALUES ('r1', 'm', 'hi', 'hello', '01conv', '2024-05-06T12:00:00'),
             ('r9', 'm', 'x', 'y', '09solo', '2024-05-07T12:00:00'),
             ('r5', 'm', 'kept', 'yes', '05old', '2024-05-05T12:00:00');
      INSERT INTO messages VALUES ('h1', NULL, 'user', NULL), ('h2', 'h1', 'assistant', NULL);
      INSERT INTO parts (message_hash, position, type, text) VALUES
        ('h1', 0, 'text', 'hi'), ('h2', 0, 'text', 'hello');
      INSERT INTO threads VALUES ('01conv', 'Old chat', 'h2', NULL, '2024-05-06 12:00:00');
      INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, datetime_utc)
      VALUES ('r9', '01conv', 'h1', 'h2', '2024-05-08T00:00:00+00:00');
    "#;
    let (_dir, path) = db(NEW_SCHEMA, rows);
    let all = read_all(&path).expect("reads");
    let ids: Vec<&str> = all.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["05old", "01conv"]);
    assert_eq!(all[1].messages.len(), 2);
}

#[test]
fn a_new_database_with_no_history_is_empty() {
    let (_dir, path) = db(NEW_SCHEMA, "");
    assert!(read_all(&path).expect("reads").is_empty());
}

fn error(schema: &str, rows: &str) -> ReadError {
    let (_dir, path) = db(schema, rows);
    match read_all(&path) {
        Err(e) => e,
        Ok(c) => panic!("read {} conversations from {rows}", c.len()),
    }
}

#[test]
fn hostile_databases_are_named() {
    let ok = r#"INSERT INTO threads VALUES ('00ok', NULL, NULL, NULL, '2026-01-01 00:00:00');"#;
    let cases = [
        (
            r#"INSERT INTO threads VALUES ('01bad', 'Bad', 'b2:nope', NULL, '2026-01-02');"#,
            "not stored",
        ),
        (
            r#"INSERT INTO messages VALUES ('x', 'y', 'user', NULL), ('y', 'x', 'user', NULL);
               INSERT INTO threads VALUES ('01bad', 'Bad', 'x', NULL, '2026-01-02');"#,
            "cycle",
        ),
        (
            r#"INSERT INTO messages VALUES ('x', NULL, 'wizard', NULL);
               INSERT INTO threads VALUES ('01bad', 'Bad', 'x', NULL, '2026-01-02');"#,
            "unknown role",
        ),
        (
            r#"INSERT INTO messages VALUES ('x', NULL, X'07', NULL);
               INSERT INTO threads VALUES ('01bad', 'Bad', 'x', NULL, '2026-01-02');"#,
            "reading the database",
        ),
        (
            r#"INSERT INTO messages VALUES ('x', NULL, 'user', NULL);
               INSERT INTO parts (message_hash, position, type, payload)
                 VALUES ('x', 0, 'text', '{not json');
               INSERT INTO threads VALUES ('01bad', 'Bad', 'x', NULL, '2026-01-02');"#,
            "not JSON",
        ),
        (
            r#"INSERT INTO threads VALUES ('01bad', 'Bad', NULL, NULL, 'yesterday');"#,
            "\"yesterday\" is not a time",
        ),
    ];
    for (rows, reason) in cases {
        let e = error(NEW_SCHEMA, &format!("{ok}{rows}"));
        assert_eq!(e.index, 1, "{rows}");
        assert_eq!(e.id.as_deref(), Some("01bad"), "{rows}");
        assert!(e.reason.contains(reason), "{reason:?} in {e}");
        assert!(e.reason.contains("“Bad”"), "the title in {e}");
    }
    let e = error(
        LEGACY_SCHEMA,
        "INSERT INTO responses VALUES ('r1', 'm', 'p', NULL, 'r', 'c1', 'soon');",
    );
    assert_eq!(e.id.as_deref(), Some("c1"));
    assert!(e.reason.contains("\"soon\""), "{e}");
}

#[test]
fn files_that_are_not_a_logs_db() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("notes.db");
    std::fs::write(&text, "[{\"id\": 1}]").expect("write");
    let e = read_all(&text).expect_err("text is not SQLite");
    assert!(e.reason.contains("not an llm logs.db"), "{e}");
    let (_d, other) = db("CREATE TABLE t (x);", "");
    let e = read_all(&other).expect_err("another app's database");
    assert!(e.reason.contains("neither"), "{e}");
    let e = read_all(&dir.path().join("missing.db")).expect_err("no file");
    assert!(e.reason.contains("cannot open"), "{e}");
}

#[test]
fn the_database_is_not_written() {
    let (_dir, path) = db(NEW_SCHEMA, THREAD);
    let before = std::fs::read(&path).expect("read");
    read_all(&path).expect("reads");
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

#[test]
fn llm_datetimes() {
    assert_eq!(
        datetime(Some("2026-11-30 19:47:38.767618+00:00")),
        Ok(ts("2026-11-30T19:47:38.767618Z"))
    );
    assert_eq!(
        datetime(Some("2026-11-30T19:47:38.706431+00:00")),
        Ok(ts("2026-11-30T19:47:38.706431Z"))
    );
    assert_eq!(
        datetime(Some("2024-05-06T12:00:00")),
        Ok(ts("2024-05-06T12:00:00Z"))
    );
    assert_eq!(datetime(Some("")), Ok(None));
    assert_eq!(datetime(None), Ok(None));
    assert!(datetime(Some("13/01/2024")).is_err());
}

#[test]
fn a_ten_thousand_message_thread() {
    const N: usize = 10_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("logs.db");
    let mut conn = Connection::open(&path).expect("create");
    conn.execute_batch(NEW_SCHEMA).expect("schema");
    let tx = conn.transaction().expect("tx");
    for i in 0..N {
        let parent = (i > 0).then(|| format!("h{}", i - 1));
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        tx.execute(
            "INSERT INTO messages VALUES (?1, ?2, ?3, NULL)",
            rusqlite::params![format!("h{i}"), parent, role],
        )
        .expect("message");
        tx.execute(
            "INSERT INTO parts (message_hash, position, type, text) VALUES (?1, 0, 'text', ?2)",
            rusqlite::params![format!("h{i}"), format!("message {i}")],
        )
        .expect("part");
        if i % 2 == 1 {
            tx.execute(
                "INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, \
                 model, datetime_utc) VALUES (?1, 'long', ?2, ?3, 'm', ?4)",
                rusqlite::params![
                    format!("t{i}"),
                    format!("h{}", i - 1),
                    format!("h{i}"),
                    format!("2026-01-01T00:00:{:02}.{i:06}+00:00", i / 1000)
                ],
            )
            .expect("turn");
        }
    }
    tx.execute(
        "INSERT INTO threads VALUES ('long', NULL, ?1, NULL, '2026-01-01')",
        [format!("h{}", N - 1)],
    )
    .expect("thread");
    tx.commit().expect("commit");
    drop(conn);
    let all = read_all(&path).expect("reads");
    let m = &all[0].messages;
    assert_eq!(m.len(), N);
    assert_eq!((m[0].id.as_str(), m[N - 1].id.as_str()), ("h0", "h9999"));
    assert!(m.iter().all(|m| m.created_at.is_some()));
}

#[test]
fn the_shape_is_recognised() {
    let (_dir, path) = db(LEGACY_SCHEMA, "");
    assert!(looks_like(&std::fs::read(&path).expect("read")[..100]));
    assert!(!looks_like(b"[{\"id\": 1}]"));
}
