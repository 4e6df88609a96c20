//! `brain sessions list|show|search` as a user runs them: the real binary on a real file.

use std::process::{Command, Output};

use brain::session::events::{Payload, TitledBy};
use serde_json::Value;

use crate::support::*;

pub(crate) fn brain(db: &TempDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args(args)
        .output()
        .unwrap()
}

/// `brain` with `args`, which must exit by itself (a refusal): one still running after a
/// generous deadline (say, serving when it should have refused) is killed and fails.
fn brain_exits(db: &TempDb, args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            Command::new("kill").args(["-9", &pid]).status().unwrap();
            panic!("brain {args:?} did not exit");
        }
    }
}

pub(crate) fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn list_show_and_search_from_the_terminal() {
    let db = TempDb::new();
    let store = db.open();
    let a = store
        .create_session(Some("Heron notes".into()), "sys".into())
        .unwrap()
        .id;
    store
        .append(a, &user("herons stand still in shallow water"))
        .unwrap();
    let b = store.create_session(None, String::new()).unwrap().id;
    store.append(b, &user("egrets and a heron")).unwrap();
    store.rename(b, "Egrets".into(), TitledBy::Auto).unwrap();
    store.set_archived(b, true).unwrap();
    drop(store);

    let list = stdout_ok(&brain(&db, &["sessions", "list"]));
    assert!(
        list.contains(&a.to_string()) && list.contains("Heron notes"),
        "{list}"
    );
    assert!(
        !list.contains(&b.to_string()),
        "archived sessions are hidden by default"
    );

    let json: Value = serde_json::from_str(&stdout_ok(&brain(
        &db,
        &["sessions", "list", "--json", "--archived", "include"],
    )))
    .unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], b.to_string(), "newest activity first");
    assert_eq!(rows[0]["title"], "Egrets");
    assert_eq!(rows[0]["archived"], true);

    let found: Value = serde_json::from_str(&stdout_ok(&brain(
        &db,
        &["sessions", "list", "--query", "egrets", "--json"],
    )))
    .unwrap();
    assert_eq!(found.as_array().unwrap().len(), 1, "{found}");
    assert_eq!(
        found[0]["id"],
        b.to_string(),
        "a query includes archived sessions"
    );

    let shown: Value = serde_json::from_str(&stdout_ok(&brain(
        &db,
        &["sessions", "show", &b.to_string(), "--events", "--json"],
    )))
    .unwrap();
    assert_eq!(shown["session"]["title"], "Egrets");
    let kinds: Vec<&str> = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "user_message",
            "session_titled",
            "session_archived"
        ]
    );
    assert_eq!(shown["events"][1]["payload"]["text"], "egrets and a heron");
    let text = stdout_ok(&brain(
        &db,
        &["sessions", "show", &b.to_string(), "--events"],
    ));
    assert!(
        text.contains("session_titled") && text.contains("[archived]"),
        "{text}"
    );

    let hits = stdout_ok(&brain(&db, &["sessions", "search", "heron"]));
    assert!(hits.contains("⟦heron⟧"), "{hits}");
    // The kind in words, never the internal event kind.
    assert!(
        hits.contains(" message ") && !hits.contains("user_message"),
        "{hits}"
    );
    let hits: Value = serde_json::from_str(&stdout_ok(&brain(
        &db,
        &["sessions", "search", "--json", "shallow", "water"],
    )))
    .unwrap();
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1);
    assert_eq!(hits["hits"][0]["title"], "Heron notes");
    assert_eq!(hits["hits"][0]["kind"], "user_message");
    assert_eq!(hits["hits"][0]["label"], "message");
    assert_eq!(hits["hits"][0]["highlights"].as_array().unwrap().len(), 2);
    let recent: Value = serde_json::from_str(&stdout_ok(&brain(
        &db,
        &["sessions", "search", "--recent", "--json", "heron"],
    )))
    .unwrap();
    let times: Vec<&str> = recent["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["created_at"].as_str().unwrap())
        .collect();
    assert!(times.len() > 1, "{recent}");
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
}

#[test]
fn bad_ids_bad_queries_and_unknown_sessions_are_clear_errors() {
    let db = TempDb::new();
    drop(db.open());
    let cases: [(&[&str], &str); 4] = [
        (&["sessions", "show", "not-an-id"], "not a session id"),
        (
            &["sessions", "show", "0192e4a0-7b1c-7d3e-8f00-123456789abc"],
            "not found",
        ),
        (
            &["sessions", "search", "--fts", "NEAR("],
            "bad search query",
        ),
        (&["sessions", "search", "--fts", "AND"], "bad search query"),
    ];
    for (args, expected) in cases {
        let out = brain(&db, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let plain = brain(&db, &["sessions", "search", "NEAR(", "\"oops"]);
    assert!(stdout_ok(&plain).contains("no matches"));
}

#[test]
fn show_prints_the_transcript_and_what_the_model_would_be_sent() {
    let db = TempDb::new();
    let store = db.open();
    let id = store
        .create_session(None, "You are terse.".into())
        .unwrap()
        .id;
    let u1 = store.append(id, &user("first question")).unwrap().seq;
    store.append(id, &answer(u1, 1, "first answer")).unwrap();
    let u2 = store.append(id, &user("second question")).unwrap().seq;
    store
        .append(id, &pending(u2, 1, "half of the sec"))
        .unwrap();
    store
        .append(id, &failed(u2, 2, "provider_unreachable"))
        .unwrap();
    drop(store);
    let sid = id.to_string();

    let text = stdout_ok(&brain(&db, &["sessions", "show", &sid]));
    for expected in [
        "you",
        "first question",
        "assistant (turn 2, attempt 1",
        "interrupted (turn 4, attempt 1)",
        "half of the sec",
        "failed (turn 4, attempt 2): provider_unreachable",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    let json: Value = serde_json::from_str(&stdout_ok(&brain(
        &db,
        &["sessions", "show", &sid, "--json"],
    )))
    .unwrap();
    let kinds: Vec<&str> = json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["user", "assistant", "user", "interrupted", "error"]);

    let llm = stdout_ok(&brain(&db, &["sessions", "show", &sid, "--llm"]));
    assert!(
        llm.contains("You are terse.") && llm.contains("this response was interrupted"),
        "{llm}"
    );
    assert!(llm.contains("total: ") && llm.contains(" tokens"), "{llm}");
    let ctx: Value = serde_json::from_str(&stdout_ok(&brain(
        &db,
        &["sessions", "show", &sid, "--llm", "--json"],
    )))
    .unwrap();
    let messages = ctx["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[3]["role"], "assistant");
    let sum: u64 = messages
        .iter()
        .map(|m| m["tokens"].as_u64().unwrap())
        .sum::<u64>()
        + ctx["system_tokens"].as_u64().unwrap();
    assert_eq!(ctx["tokens"].as_u64(), Some(sum));
    assert!(messages.iter().all(|m| m["tokens"].as_u64().unwrap() > 4));
}

#[test]
fn compact_by_hand_prints_tokens_before_and_after() {
    let mock = crate::support::MockLlm::start(&[]);
    let db = TempDb::new();
    let id = six_turns(&db);
    mock.script(serde_json::json!({"text": "They asked six questions."}));
    let sid = id.to_string();
    let out = stdout_ok(&brain(
        &db,
        &["sessions", "compact", &sid, "--provider-url", &mock.url],
    ));
    assert!(out.contains("compacted") && out.contains(" → "), "{out}");
    assert!(out.contains("llama.cpp meta.n_ctx"), "{out}");
    let llm = stdout_ok(&brain(&db, &["sessions", "show", &sid, "--llm"]));
    assert!(
        llm.contains("[Summary of the conversation so far]")
            && llm.contains("They asked six questions."),
        "{llm}"
    );
    assert!(!llm.contains("question 0:"), "{llm}");
    let sent = &mock.requests()[0];
    assert_eq!(
        sent["stream"], false,
        "the summary is one non-streamed call"
    );
    assert!(
        sent["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("question 0:")
    );

    // No provider: a clear error, nothing written.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = brain(
        &db,
        &[
            "sessions",
            "compact",
            &sid,
            "--provider-url",
            &format!("http://127.0.0.1:{port}/v1"),
        ],
    );
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains("unreachable"));
    let bad = brain(&db, &["sessions", "compact", &sid, "--compact-at", "2"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("between 0.1 and 0.95"));
}

/// `brain serve` on `db` and its URL; killed on drop.
struct Served(std::process::Child, String);

impl Served {
    fn start(db: &TempDb, provider: &str) -> Served {
        let (child, url) = spawn_serve(&mut serve_command(db, provider));
        Served(child, url)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn six_turns(db: &TempDb) -> brain::session::SessionId {
    let store = db.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    for i in 0..6 {
        let u = store
            .append(id, &user(&format!("question {i}: {}", "words ".repeat(40))))
            .unwrap()
            .seq;
        store
            .append(
                id,
                &answer(u, 1, &format!("answer {i}: {}", "more ".repeat(40))),
            )
            .unwrap();
    }
    id
}

#[test]
fn compact_goes_through_the_server_that_holds_the_database() {
    let mock = crate::support::MockLlm::start(&[]);
    let db = TempDb::new();
    let id = six_turns(&db);
    let server = Served::start(&db, &mock.url);
    mock.script(serde_json::json!({"text": "They asked six questions."}));
    let out = stdout_ok(&brain(&db, &["sessions", "compact", &id.to_string()]));
    assert!(out.contains("compacted") && out.contains(" → "), "{out}");
    assert!(out.contains("llama.cpp meta.n_ctx"), "{out}");
    assert_eq!(
        mock.requests().len(),
        1,
        "the server's summarizer was asked"
    );

    // The route itself: compacts now, whatever the size; its answer has the SPEC's fields.
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent();
    let call = |path: &str| {
        let resp = agent
            .post(&format!("{}{path}", server.1))
            .send_empty()
            .unwrap();
        let status = resp.status().as_u16();
        let body: Value =
            serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
        (status, body)
    };
    let (status, body) = call(&format!("/v1/sessions/{id}/compact"));
    assert_eq!(status, 200, "{body}");
    assert!(
        body["tokens_before"].is_u64() && body["tokens_after"].is_u64(),
        "{body}"
    );
    assert!(body["compacted"].is_boolean(), "{body}");
    let other = brain::session::SessionId::generate();
    let (status, body) = call(&format!("/v1/sessions/{other}/compact"));
    assert_eq!((status, body["error"].as_str()), (404, Some("not_found")));
}

#[test]
fn brain_alone_takes_serves_flags_because_serve_is_the_default_command() {
    use std::io::{BufRead, BufReader};
    let db = TempDb::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args(["--listen", "127.0.0.1:0", "--distill", "off"])
        .args([
            "--provider-url",
            "http://127.0.0.1:9/v1",
            "--sync",
            "normal",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("brain serving http://127.0.0.1:")
            && line.contains("provider http://127.0.0.1:9/v1"),
        "{line:?}"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());

    // Serve's checks apply; serve's flags do not go with another command.
    let bad = brain(&db, &["--listen", "nowhere"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("for '--listen"));
    let mixed = brain(&db, &["--listen", "127.0.0.1:0", "sessions", "list"]);
    assert_eq!(mixed.status.code(), Some(2));
    let typo = brain(&db, &["--listn", "127.0.0.1:0"]);
    assert!(String::from_utf8_lossy(&typo.stderr).contains("unexpected argument '--listn'"));
}

#[test]
fn a_url_without_a_scheme_stops_startup_with_the_fix() {
    let db = TempDb::new();
    for args in [
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--provider-url",
            "localhost:8091",
        ][..],
        &[
            "--listen",
            "127.0.0.1:0",
            "--provider-url",
            "localhost:8091",
        ],
        &["chat", "--provider-url", "localhost:8091"],
        &["chat", "--url", "localhost:8091"],
        &[
            "sessions",
            "compact",
            "0192e4a0-7b1c-7d3e-8f00-123456789abc",
            "--provider-url",
            "localhost:8091",
        ],
    ] {
        let out = brain(&db, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("did you mean http://localhost:8091?"),
            "{args:?}: {err}"
        );
    }
    let env = brain_exits(
        &db,
        &["serve"],
        &[
            ("BRAIN_PROVIDER_URL", "127.0.0.1:11434/v1"),
            ("BRAIN_LISTEN", "127.0.0.1:0"),
        ],
    );
    assert_eq!(env.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&env.stderr).contains("did you mean http://127.0.0.1:11434/v1?")
    );
    assert!(!db.path().exists(), "refused before anything was opened");
}

#[test]
fn export_then_import_keeps_payloads_with_surrounding_whitespace_byte_for_byte() {
    let db = TempDb::new();
    let file = db.dir.path().join("in.jsonl");
    let id = "0192e4a0-7b1c-7d3e-8f00-123456789abc";
    let lines = [
        format!(
            r#"{{"session_id":"{id}","seq":1,"kind":"session_started","payload":{{"system":"s"}},"created_at":"2026-11-30T04:17:26.000000Z"}}"#
        ),
        format!(
            r#"{{"session_id":"{id}","seq":2,"kind":"user_message","payload_text":"{{\"text\":\"x\"}}   ","created_at":"2026-11-30T04:17:27.000000Z"}}"#
        ),
        format!(
            r#"{{"session_id":"{id}","seq":3,"kind":"user_message","payload_text":"  {{\"text\":\"lead\"}}","created_at":"2026-11-30T04:17:28.000000Z"}}"#
        ),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    stdout_ok(&brain(&db, &["sessions", "import", file.to_str().unwrap()]));
    let exported = stdout_ok(&brain(&db, &["sessions", "export", id]));
    let again = TempDb::new();
    let file2 = again.dir.path().join("again.jsonl");
    std::fs::write(&file2, &exported).unwrap();
    stdout_ok(&brain(
        &again,
        &["sessions", "import", file2.to_str().unwrap()],
    ));
    let payloads = |db: &TempDb| -> Vec<String> {
        let conn = db.raw();
        let mut q = conn
            .prepare("SELECT payload FROM session_events ORDER BY seq")
            .unwrap();
        q.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(payloads(&db), payloads(&again));
    assert_eq!(payloads(&again)[1], "{\"text\":\"x\"}   ");
    assert_eq!(payloads(&again)[2], "  {\"text\":\"lead\"}");

    // A second session_started inside a session is refused, naming its line.
    let bad = db.dir.path().join("bad.jsonl");
    let restart = lines[0].replace(r#""seq":1"#, r#""seq":2"#);
    std::fs::write(&bad, format!("{}\n{restart}\n", lines[0])).unwrap();
    let out = brain(
        &TempDb::new(),
        &["sessions", "import", bad.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2") && err.contains("second time"),
        "{err}"
    );
}

#[test]
fn show_says_when_a_compaction_is_an_extractive_digest() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, String::new()).unwrap().id;
    let u1 = store.append(id, &user("first question")).unwrap().seq;
    let a1 = store
        .append(id, &answer(u1, 1, "first answer"))
        .unwrap()
        .seq;
    store.append(id, &compaction("an LLM summary", a1)).unwrap();
    let u2 = store.append(id, &user("second question")).unwrap().seq;
    let a2 = store
        .append(id, &answer(u2, 1, "second answer"))
        .unwrap()
        .seq;
    let Payload::CompactionApplied(mut digest) = compaction("User: second question", a2) else {
        unreachable!()
    };
    digest.method = "extractive".into();
    store
        .append(id, &Payload::CompactionApplied(digest))
        .unwrap();
    drop(store);
    let text = stdout_ok(&brain(&db, &["sessions", "show", &id.to_string()]));
    let dividers: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("── compacted"))
        .collect();
    assert_eq!(dividers.len(), 2, "{text}");
    assert!(dividers[0].contains("and before summarised,"), "{text}");
    assert!(
        dividers[1].contains(
            "and before condensed to an extractive digest (no summary could be written),"
        ),
        "{text}"
    );
}

/// Review #8: a libpq `key=value` string as `--db` became a SQLite file named with the
/// password (and errors repeated it). It is refused, with the URL form to use instead.
#[test]
fn a_libpq_key_value_db_is_refused_without_a_file_or_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let db = "host=127.0.0.1 password=hunter2 dbname=brain";
    for args in [
        &["sessions", "list"][..],
        &["migrate"][..],
        &["backup", "copy.db"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_brain"))
            .arg("--db")
            .arg(db)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains("postgres://"), "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "{args:?}: {err}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "files were made: {left:?}");
}

/// Issue 34 (11): `brain --help` said nothing of the model server answers need, and every
/// help cited "SPEC §N", a file no user has.
#[test]
fn help_names_the_model_server_and_cites_only_what_ships() {
    let top = crate::support::run_brain(&["--help"], b"");
    let text = String::from_utf8_lossy(&top.stdout).into_owned();
    assert!(
        text.contains("--provider-url") && text.contains("11434"),
        "{text}"
    );
    for command in [
        vec!["--help"],
        vec!["serve", "--help"],
        vec!["chat", "--help"],
        vec!["sessions", "--help"],
        vec!["sessions", "fork", "--help"],
        vec!["sessions", "import", "--help"],
        vec!["tools", "--help"],
    ] {
        let out = crate::support::run_brain(&command, b"");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(!help.contains("SPEC"), "{command:?}: {help}");
    }
}

/// Issue 34 (9): `brain tools list` said "tools are off" while the running server offered
/// its tools: without a configuration to check, it asks the server holding the database.
#[test]
fn tools_list_asks_the_server_holding_the_database() {
    let db = crate::support::TempDb::new();
    let mock = crate::support::MockLlm::start(&[]);
    let mut cmd = crate::support::serve_command(&db, &mock.url);
    cmd.args(["--tools", "on"]);
    let (mut server, url) = crate::support::spawn_serve(&mut cmd);
    let listed = crate::support::run_brain_on(&db, &["tools", "list"], b"");
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        text.contains(&format!("the server at {url} offers:")) && text.contains("search_history"),
        "{text}"
    );
    let json = crate::support::run_brain_on(&db, &["tools", "list", "--json"], b"");
    let view: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(view["tools"][0]["name"], "search_history", "{view}");
    server.kill().unwrap();
    server.wait().unwrap();
    // No server: the flags are what is listed, and the message says why none is asked.
    let off = crate::support::run_brain_on(&db, &["tools", "list"], b"");
    let text = String::from_utf8_lossy(&off.stdout).into_owned();
    assert!(
        text.contains("tools are off") && text.contains("no server"),
        "{text}"
    );
}
