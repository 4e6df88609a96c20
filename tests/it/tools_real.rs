//! Real tool sources through a real `brain serve` and its loop (SPEC §13): server-everything
//! over Streamable HTTP (listed, called, gone and back), PyPI's mcp-server-time over stdio,
//! and the built-in `search_history` finding another chat. mock_llm asks for the calls and
//! quotes the results it is sent, so each test sees what the model saw.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp::{everything_http, free_port, npm_server, root};
use crate::support::*;
use crate::tools_loop::{call_url, session, stream, until};

/// How long a condition (a server seen gone, back) may take: the backoff doubles from 1 s.
const PATIENCE: Duration = Duration::from_secs(90);

struct Serve {
    child: Child,
    url: String,
    _db: TempDb,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `brain serve` on a fresh database, with `--mcp-config` holding `servers` (if any).
fn serve(mock: &MockLlm, dir: &Path, servers: Option<Value>, extra: &[&str]) -> Serve {
    let db = TempDb::new();
    let mut cmd = serve_command(&db, &mock.url);
    if let Some(servers) = servers {
        let config = dir.join("mcp.json");
        std::fs::write(&config, json!({"mcpServers": servers}).to_string()).unwrap();
        cmd.arg("--mcp-config").arg(&config);
    }
    let (child, url) = spawn_serve(cmd.args(extra));
    Serve {
        child,
        url,
        _db: db,
    }
}

/// PyPI's mcp-server-time from the venv `.ci/mcp-deps` makes, or a visible skip.
fn time_server(test: &str) -> Option<PathBuf> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    let bin = target.join("mcp-venv/bin/mcp-server-time");
    if bin.exists() {
        return Some(bin);
    }
    skipped(
        test,
        "mcp-server-time (PyPI) is missing",
        "run .ci/mcp-deps",
    );
    None
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            Instant::now() < until,
            "{what} did not happen in {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn listed<'a>(listing: &'a Value, name: &str) -> Option<&'a Value> {
    listing["tools"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == name)
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "name": name, "arguments": args.to_string()})
}

/// One turn: the model calls `calls`, then quotes what it was sent. Every frame, and the
/// quoted text.
fn turn(b: &Serve, mock: &MockLlm, session: &str, calls: Vec<Value>) -> (Vec<Value>, String) {
    mock.script(json!([
        {"kind": "stream", "tool_calls": calls},
        {"kind": "stream", "quote_tools": true},
    ]));
    let frames: mpsc::Receiver<Value> = stream(
        &b.url,
        &format!("/v1/sessions/{session}/messages"),
        json!({"message": "use the tool"}),
    );
    let mut seen = Vec::new();
    let end = until(&frames, "end", &mut seen);
    assert_eq!(end["status"], "completed", "{seen:#?}");
    let said = seen
        .iter()
        .filter(|f| f["type"] == "chunk")
        .filter_map(|f| f["text"].as_str())
        .collect();
    (seen, said)
}

fn statuses(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .map(|f| f["status"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn server_everything_over_streamable_http_through_brain_goes_away_and_comes_back() {
    let test =
        "tools_real::server_everything_over_streamable_http_through_brain_goes_away_and_comes_back";
    let Some(entry) = npm_server(test, "server-everything") else {
        return;
    };
    let port = free_port();
    let http = everything_http(&entry, port);
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({"everything": {
        "url": format!("http://127.0.0.1:{port}/mcp"), "allow": ["get-sum"]}});
    let b = serve(&mock, dir.path(), Some(servers), &[]);

    let (_, listing) = call_url(&b.url, "/v1/tools");
    let sum = listed(&listing, "everything__get-sum").unwrap_or_else(|| panic!("{listing:#}"));
    assert_eq!(
        (&sum["server"], &sum["policy"]),
        (&json!("everything"), &json!("allow")),
        "{sum}"
    );
    assert_eq!(call_url(&b.url, "/health").1["tools"], "ok");

    let id = session(&b.url);
    let get_sum = |n: &str, a: i64, b: i64| call(n, "everything__get-sum", json!({"a": a, "b": b}));
    let (frames, said) = turn(&b, &mock, &id, vec![get_sum("c1", 2, 3)]);
    assert_eq!(statuses(&frames), ["ok"]);
    assert!(said.contains("tool c1: The sum of 2 and 3 is 5."), "{said}");
    // The model was offered it by its brain name, with the server's own schema.
    let first = &mock
        .requests()
        .into_iter()
        .rev()
        .find(|r| r["stream"] == true)
        .unwrap();
    assert!(
        first["tools"]
            .to_string()
            .contains("\"name\":\"everything__get-sum\""),
        "{first}"
    );

    // The server goes away: the call is an error the model is told about, /health says so.
    drop(http);
    let (frames, said) = turn(&b, &mock, &id, vec![get_sum("c2", 1, 1)]);
    assert_eq!(statuses(&frames), ["error"], "{frames:#?}");
    assert!(
        said.contains("tool c2: the MCP server everything failed"),
        "{said}"
    );
    wait_for("/health tools degraded", || {
        call_url(&b.url, "/health").1["tools"] == "degraded"
    });
    let (_, listing) = call_url(&b.url, "/v1/tools");
    let everything = &listing["servers"][0];
    assert_eq!(everything["status"], "failed", "{listing:#}");
    assert!(everything["error"].is_string(), "{listing:#}");

    // It comes back on the same port: brain connects again (backoff) and calls work.
    let _http = everything_http(&entry, port);
    // (/health says ok while it is `starting` too: wait for the server itself.)
    wait_for("the server ok again", || {
        call_url(&b.url, "/v1/tools").1["servers"][0]["status"] == "ok"
    });
    assert_eq!(call_url(&b.url, "/health").1["tools"], "ok");
    let (frames, said) = turn(&b, &mock, &id, vec![get_sum("c3", 40, 2)]);
    assert_eq!(statuses(&frames), ["ok"], "{frames:#?}");
    assert!(
        said.contains("tool c3: The sum of 40 and 2 is 42."),
        "{said}"
    );
}

#[test]
fn search_history_runs_in_the_loop_without_asking_and_finds_another_chat() {
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let b = serve(&mock, dir.path(), None, &["--tools", "on"]);
    let (_, listing) = call_url(&b.url, "/v1/tools");
    let names: Vec<&str> = listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["search_history"]);

    // An earlier chat mentions the cat.
    let earlier = session(&b.url);
    mock.script(json!([{"kind": "stream", "text": "A fine name for a cat."}]));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{earlier}/messages"),
        json!({"message": "my cat is called Quasimodo"}),
    );
    let end = until(&frames, "end", &mut Vec::new());
    assert_eq!(end["status"], "completed", "{end}");

    // Its title comes from the (mock) title model in the background.
    let mut title = String::new();
    wait_for("the earlier chat's title", || {
        let (_, s) = call_url(&b.url, &format!("/v1/sessions/{earlier}"));
        title = s["session"]["title"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        !title.is_empty()
    });

    let now = session(&b.url);
    let (frames, said) = turn(
        &b,
        &mock,
        &now,
        vec![call("s1", "search_history", json!({"query": "quasimodo"}))],
    );
    assert!(
        !frames.iter().any(|f| f["type"] == "permission"),
        "the built-in is allowed: {frames:#?}"
    );
    assert_eq!(statuses(&frames), ["ok"]);
    assert!(
        said.contains("tool s1: 1 earlier messages match \"quasimodo\""),
        "{said}"
    );
    // Title, session, seq and the snippet.
    assert!(
        said.contains(&format!("\"{title}\" ("))
            && said.contains(&format!("session {earlier}, seq 2,")),
        "{said}"
    );
    assert!(said.contains("Quasimodo"), "{said}");
}

#[test]
fn mcp_server_time_from_pypi_is_listed_and_called_in_a_turn() {
    let test = "tools_real::mcp_server_time_from_pypi_is_listed_and_called_in_a_turn";
    let Some(bin) = time_server(test) else {
        return;
    };
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({"time": {"command": bin, "args": ["--local-timezone", "UTC"]}});
    let b = serve(&mock, dir.path(), Some(servers), &[]);
    let (_, listing) = call_url(&b.url, "/v1/tools");
    let now = listed(&listing, "time__get_current_time").unwrap_or_else(|| panic!("{listing:#}"));
    assert_eq!(now["server"], "time");
    assert!(
        listed(&listing, "time__convert_time").is_some(),
        "{listing:#}"
    );

    // Its tools say readOnlyHint: allowed without asking.
    assert_eq!(now["policy"], "allow", "{now}");

    let id = session(&b.url);
    let (frames, said) = turn(
        &b,
        &mock,
        &id,
        vec![call(
            "t1",
            "time__get_current_time",
            json!({"timezone": "UTC"}),
        )],
    );
    assert!(
        !frames.iter().any(|f| f["type"] == "permission"),
        "{frames:#?}"
    );
    assert_eq!(statuses(&frames), ["ok"]);
    // The server's JSON answer, quoted: {"timezone": "UTC", "datetime": "…+00:00", …}.
    assert!(said.starts_with("tool t1: "), "{said}");
    let answer: Value = serde_json::from_str(said.trim_start_matches("tool t1: ").trim())
        .unwrap_or_else(|e| panic!("{e}: {said}"));
    assert_eq!(answer["timezone"], "UTC", "{answer}");
    assert!(
        answer["datetime"]
            .as_str()
            .is_some_and(|d| d.ends_with("+00:00")),
        "{answer}"
    );
}

#[test]
fn tools_list_and_call_reach_one_http_server_by_mcp_url() {
    let test = "tools_real::tools_list_and_call_reach_one_http_server_by_mcp_url";
    let Some(entry) = npm_server(test, "server-everything") else {
        return;
    };
    let port = free_port();
    let _http = everything_http(&entry, port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let db = TempDb::new();
    let brain = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_brain"))
            .arg("--db")
            .arg(db.path())
            .arg("tools")
            .args(args)
            .args(["--mcp-url", &url])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, listing) = brain(&["list"]);
    assert!(ok, "{listing}");
    assert!(listing.contains("mcp__get-sum"), "{listing}");
    assert!(listing.contains("server mcp: ok"), "{listing}");
    let (ok, sum) = brain(&["call", "mcp__get-sum", r#"{"a": 20, "b": 22}"#]);
    assert!(ok, "{sum}");
    assert_eq!(sum.trim(), "The sum of 20 and 22 is 42.");
    // With a configuration too, it is refused: one or the other.
    let both = Command::new(env!("CARGO_BIN_EXE_brain"))
        .args(["tools", "list", "--mcp-config", "x.json", "--mcp-url", &url])
        .output()
        .unwrap();
    assert!(!both.status.success());
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("cannot be used with"),
        "{both:?}"
    );
}
