//! A real `logs.db`: PyPI's `llm==0.36` (installed by .ci/llm-deps in target/llm-venv)
//! talks to examples/mock_llm and logs what it sent and got; brain's llm reader reads it.
//! So the schema read is the one the tool writes, not one copied from its docs.

use std::path::{Path, PathBuf};
use std::process::Command;

use brain::import::{Role as R, llm};
use brain::session::projection::{ItemBody, Role, ui_transcript};

use crate::import::{brain, context, export, failed, import, ok, session_of};
use crate::support::{MockLlm, TempDb, skipped};

fn llm_bin() -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    let bin = target.join("llm-venv/bin/llm");
    bin.exists().then_some(bin)
}

/// Runs `llm ARGS` against the mock with its logs in `dir`; panics with its stderr on failure.
fn run_llm(bin: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .env("LLM_USER_PATH", dir)
        .env("OPENAI_API_KEY", "not-a-key")
        .env_remove("LLM_MODEL")
        .output()
        .expect("run llm");
    assert!(
        out.status.success(),
        "llm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `logs.db` written by the real `llm`: a conversation continued with `-c`, one with a
/// system prompt and a tool call, one whose prompt borrows a fragment (a file). `None` when
/// llm is not installed (a visible skip, or a failure under CI).
pub fn real_logs_db(test: &str, dir: &Path, mock: &MockLlm) -> Option<PathBuf> {
    let Some(bin) = llm_bin() else {
        skipped(test, "llm (PyPI) is not installed", "run .ci/llm-deps");
        return None;
    };
    std::fs::write(
        dir.join("extra-openai-models.yaml"),
        format!(
            "- model_id: mock\n  model_name: mock-model\n  api_base: \"{}\"\n  supports_tools: true\n",
            mock.url
        ),
    )
    .expect("models yaml");
    run_llm(&bin, dir, &["-m", "mock", "hello there"]);
    run_llm(&bin, dir, &["-c", "follow-up ü 🦀"]);
    mock.script(serde_json::json!([
        {"tool_calls": [{"id": "call_1", "name": "llm_version", "arguments": "{}"}]},
        {"text": "The version is known."}
    ]));
    run_llm(
        &bin,
        dir,
        &[
            "-m",
            "mock",
            "-T",
            "llm_version",
            "-s",
            "Be terse.",
            "which version?",
        ],
    );
    let doc = dir.join("doc.txt");
    std::fs::write(&doc, "A long document about crabs.\n").expect("doc");
    run_llm(
        &bin,
        dir,
        &[
            "-m",
            "mock",
            "-f",
            doc.to_str().expect("utf-8"),
            "summarise",
        ],
    );
    Some(dir.join("logs.db"))
}

#[test]
fn the_reader_reads_what_llm_0_36_writes() {
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(db) = real_logs_db(
        "import_llm::the_reader_reads_what_llm_0_36_writes",
        dir.path(),
        &mock,
    ) else {
        return;
    };
    let before = std::fs::read(&db).expect("logs.db");
    let all: Vec<_> = llm::read(&db)
        .collect::<Result<_, _>>()
        .expect("reads the real logs.db");
    assert_eq!(
        std::fs::read(&db).expect("logs.db"),
        before,
        "read-only: not a byte changes"
    );
    assert_eq!(all.len(), 3, "{all:#?}");

    let first = &all[0];
    let line: Vec<(R, &str)> = first
        .messages
        .iter()
        .map(|m| (m.role, m.text.as_str()))
        .collect();
    assert_eq!(line.len(), 4, "{line:?}");
    assert_eq!(line[0], (R::User, "hello there"));
    assert_eq!(line[1].0, R::Assistant);
    assert!(line[1].1.contains("hello there"), "{line:?}");
    assert_eq!(line[2], (R::User, "follow-up ü 🦀"));
    assert!(line[3].1.contains("follow-up ü 🦀"), "{line:?}");
    assert_eq!(
        first.current.as_deref(),
        Some(first.messages[3].id.as_str())
    );
    assert_eq!(first.title.as_deref(), Some("hello there"));
    assert!(first.created_at.is_some());
    let times: Vec<_> = first.messages.iter().map(|m| m.created_at).collect();
    assert!(times.iter().all(Option::is_some), "{times:?}");
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(first.messages[3].model.as_deref(), Some("mock"));

    let tools = &all[1];
    let roles: Vec<R> = tools.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [R::System, R::User, R::Assistant, R::Tool, R::Assistant]
    );
    assert_eq!(tools.messages[0].text, "Be terse.");
    assert_eq!(
        tools.messages[2].skipped,
        vec![("tool_call".to_owned(), 1)],
        "the call is left out and counted"
    );
    assert_eq!(tools.messages[3].text, "0.36", "llm_version's output");
    assert_eq!(tools.messages[3].tool_name.as_deref(), Some("llm_version"));
    assert_eq!(tools.messages[4].text, "The version is known.");

    let fragment = &all[2];
    assert_eq!(
        fragment.messages[0].text, "A long document about crabs.\n\nsummarise",
        "the borrowed fragment is put back"
    );
}

/// Through the real `brain` binary: import → what the model sees and the tool record;
/// again → not a byte changes; `llm` writes more → only the new messages; a damaged copy →
/// nothing imported.
#[test]
fn a_real_logs_db_imports_once_grows_and_a_damaged_one_imports_nothing() {
    let test = "import_llm::a_real_logs_db_imports_once_grows_and_a_damaged_one_imports_nothing";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(logs) = real_logs_db(test, dir.path(), &mock) else {
        return;
    };
    let threads: Vec<String> = llm::read(&logs).map(|c| c.unwrap().id).collect();
    let db = TempDb::new();
    let report = ok(&import(&db, &logs, &[]));
    assert!(
        report.contains("imported 3 conversations from llm: 3 created, 0 extended, 0 unchanged, 0 forked; 10 messages"),
        "{report}"
    );
    assert!(report.contains("left out: 1 tool_call"), "{report}");
    let first = session_of("llm", &threads[0]);
    let (_, seen) = context(&db, first);
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[2], (Role::User, "follow-up ü 🦀".to_owned()));
    let events = db.open().events(first, 0, None).unwrap();
    assert!(events[0].payload.contains(&format!(
        r#""imported_from":{{"id":"{}","source":"llm"}}"#,
        threads[0]
    )));
    assert!(
        events.iter().any(|e| e.kind == "assistant_turn"
            && e.payload.contains(r#""provider":"llm""#)
            && e.payload.contains(r#""model":"mock""#)),
        "{events:?}"
    );
    let tools = session_of("llm", &threads[1]);
    let (system, _) = context(&db, tools);
    assert_eq!(system, "Be terse.");
    let items = ui_transcript(&db.open().events(tools, 0, None).unwrap(), None);
    let tool = items.iter().find_map(|i| match &i.body {
        ItemBody::Tool(t) => Some((t.name.clone(), t.status.clone())),
        _ => None,
    });
    assert_eq!(tool, Some(("llm_version".into(), "ok".into())));

    let before = export(&db);
    let again = ok(&import(&db, &logs, &["--from", "llm"]));
    assert!(
        again.contains("0 created, 0 extended, 3 unchanged, 0 forked; 0 messages"),
        "{again}"
    );
    assert_eq!(
        export(&db),
        before,
        "a second import must not change a byte"
    );

    // llm goes on with the latest conversation: only its new prompt and answer come in.
    let bin = llm_bin().expect("installed");
    run_llm(&bin, dir.path(), &["-c", "and a third"]);
    let grown = ok(&import(&db, &logs, &[]));
    assert!(
        grown.contains("0 created, 1 extended, 2 unchanged, 0 forked; 2 messages"),
        "{grown}"
    );
    let (_, seen) = context(&db, session_of("llm", &threads[2]));
    assert_eq!(seen[seen.len() - 2], (Role::User, "and a third".to_owned()));

    // A damaged copy: its first half only. Nothing of it is imported.
    let fresh = TempDb::new();
    let bytes = std::fs::read(&logs).expect("logs.db");
    let cut = fresh.dir.path().join("cut.db");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let err = failed(&import(&fresh, &cut, &[]));
    assert!(
        err.contains("nothing was imported") && err.contains("malformed"),
        "{err}"
    );
    assert!(fresh.open().session_ids().unwrap().is_empty());
    // And it must be a file: SQLite cannot read a database from a pipe.
    let piped = failed(&brain(&fresh, &["sessions", "import", "-"], &bytes));
    assert!(piped.contains("give its path"), "{piped}");
}

/// llm's tables before 0.32, from their documented columns.
pub const LEGACY_SCHEMA: &str = "
    CREATE TABLE conversations (id TEXT PRIMARY KEY, name TEXT, model TEXT);
    CREATE TABLE responses (id TEXT PRIMARY KEY, model TEXT, prompt TEXT, system TEXT,
      response TEXT, conversation_id TEXT, datetime_utc TEXT);";

/// The schema before 0.32, built from its documented columns (`conversations`: `id`,
/// `name`, `model`; `responses`: `prompt`, `system`, `response`, `model`,
/// `conversation_id`, `datetime_utc`), through the binary.
#[test]
fn a_legacy_logs_db_imports_each_conversation_as_a_line() {
    let db = TempDb::new();
    let path = db.dir.path().join("logs.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(LEGACY_SCHEMA).unwrap();
    conn.execute_batch(
        r#"
        INSERT INTO conversations VALUES ('01hx', 'Bread ü', 'gpt-4o-mini');
        INSERT INTO responses VALUES
          ('r1', 'gpt-4o-mini', 'How long to proof?', 'You bake.', 'About an hour.', '01hx',
           '2024-05-06T12:00:00.250000'),
          ('r2', 'gpt-4o-mini', 'And at 18 °C?', 'You bake.', 'Closer to two.', '01hx',
           '2024-05-06T12:05:00');
        "#,
    )
    .unwrap();
    drop(conn);
    let report = ok(&import(&db, &path, &[]));
    assert!(
        report.contains("imported 1 conversation from llm: 1 created")
            && report.contains("4 messages"),
        "{report}"
    );
    let id = session_of("llm", "01hx");
    let (system, seen) = context(&db, id);
    assert_eq!(system, "You bake.");
    assert_eq!(
        seen,
        [
            (Role::User, "How long to proof?".to_owned()),
            (Role::Assistant, "About an hour.".to_owned()),
            (Role::User, "And at 18 °C?".to_owned()),
            (Role::Assistant, "Closer to two.".to_owned()),
        ]
    );
    let store = db.open();
    let row = store.session(id).unwrap();
    assert_eq!(row.title.as_deref(), Some("Bread ü"));
    let events = store.events(id, 0, None).unwrap();
    assert_eq!(events[0].created_at, "2024-05-06T12:00:00.250000Z");
    let before = export(&db);
    ok(&import(&db, &path, &[]));
    assert_eq!(export(&db), before);
}
