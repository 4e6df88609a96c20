//! A real `logs.db`: PyPI's `llm==0.36` (installed by .ci/llm-deps in target/llm-venv)
//! talks to examples/mock_llm and logs what it sent and got; brain's llm reader reads it.
//! So the schema read is the one the tool writes, not one copied from its docs.

use std::path::{Path, PathBuf};
use std::process::Command;

use brain::import::{Role, llm};

use crate::support::{MockLlm, skipped};

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
    let line: Vec<(Role, &str)> = first
        .messages
        .iter()
        .map(|m| (m.role, m.text.as_str()))
        .collect();
    assert_eq!(line.len(), 4, "{line:?}");
    assert_eq!(line[0], (Role::User, "hello there"));
    assert_eq!(line[1].0, Role::Assistant);
    assert!(line[1].1.contains("hello there"), "{line:?}");
    assert_eq!(line[2], (Role::User, "follow-up ü 🦀"));
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
    let roles: Vec<Role> = tools.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant
        ]
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
