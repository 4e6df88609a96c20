//! Faults through the whole tool loop (issue 17, "Bad input and faults"): a real `brain
//! serve`, mock_llm asking for calls, and tests/mcp/stand_in.py as the MCP server that
//! crashes, hangs, runs slowly and listens for cancels (its log shows what it received).

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use brain::session::{Store, StoreOptions};
use serde_json::{Value, json};

use crate::support::*;
use crate::tools_loop::{call_url, kinds, session, stream, streamed, until};

const DEADLINE: Duration = Duration::from_secs(30);

/// A brain serving `db`; SIGKILLed on drop unless it already exited.
pub(crate) struct Serving {
    pub(crate) child: Child,
    pub(crate) url: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a stand-in writes what it did, in a temp dir.
pub(crate) struct Stand {
    dir: tempfile::TempDir,
}

impl Stand {
    pub(crate) fn new() -> Stand {
        Stand {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn pids_file(&self) -> PathBuf {
        self.dir.path().join("pids")
    }

    /// The pids of every process started so far, in order.
    fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.pids_file())
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }

    /// Every message the stand-ins received.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `--mcp-config` naming one stand-in server `s` with `tools`, all allowed but `ask`.
    pub(crate) fn config(&self, tools: &str, timeout_s: Option<u64>) -> PathBuf {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/stand_in.py");
        let allowed: Vec<&str> = tools.split(',').filter(|t| *t != "ask").collect();
        let mut server = json!({"command": "python3", "args": [script], "allow": allowed,
            "env": {"STAND_IN_TOOLS": tools, "STAND_IN_PIDFILE": self.pids_file(),
                    "STAND_IN_LOG": self.dir.path().join("log")}});
        if let Some(t) = timeout_s {
            server["timeout_s"] = json!(t);
        }
        let path = self.dir.path().join("mcp.json");
        std::fs::write(&path, json!({"mcpServers": {"s": server}}).to_string()).unwrap();
        path
    }
}

pub(crate) fn serve(db: &TempDb, mock: &MockLlm, config: &Path, extra: &[&str]) -> Serving {
    let (child, url) = spawn_serve(
        serve_command(db, &mock.url)
            .arg("--mcp-config")
            .arg(config)
            .args(extra),
    );
    Serving { child, url }
}

pub(crate) fn log(url: &str, id: &str) -> Vec<Value> {
    let (status, v) = call_url(url, &format!("/v1/sessions/{id}/events"));
    assert_eq!(status, 200, "{v}");
    v["events"].as_array().unwrap().clone()
}

fn executions(log: &[Value]) -> Vec<(String, String)> {
    log.iter()
        .filter(|e| e["kind"] == "tool_execution")
        .map(|e| {
            (
                e["payload"]["call_id"].as_str().unwrap().to_owned(),
                e["payload"]["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn said(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "chunk")
        .map(|f| f["text"].as_str().unwrap())
        .collect()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped) has not gone yet but runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "name": name, "arguments": args.to_string()})
}

/// Sends `message` and collects the frames up to the end.
pub(crate) fn turn(url: &str, id: &str, message: &str) -> (Value, Vec<Value>) {
    let frames = stream(
        url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": message}),
    );
    let mut seen = Vec::new();
    let end = until(&frames, "end", &mut seen);
    (end, seen)
}

#[test]
fn a_server_that_crashes_mid_call_fails_that_call_and_the_next_call_restarts_it() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config("echo,crash", None), &[]);
    let id = session(&b.url);
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("c1", "s__crash", json!({})),
                                          call("c2", "s__echo", json!({"n": 2}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let (end, seen) = turn(&b.url, &id, "crash then echo");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    let events = log(&b.url, &id);
    assert_eq!(
        executions(&events),
        [("c1".into(), "error".into()), ("c2".into(), "ok".into())]
    );
    let said = said(&seen);
    assert!(said.contains("tool c1: the MCP server s failed"), "{said}");
    assert!(said.contains("tool c2: echo {\"n\": 2}"), "{said}");
    assert_eq!(stand.pids().len(), 2, "restarted for the second call");
}

#[test]
fn a_hanging_tool_times_out_the_model_is_told_and_the_deaf_server_is_restarted() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config("echo,hang", Some(1)), &[]);
    let id = session(&b.url);
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("h1", "s__hang", json!({}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let started = Instant::now();
    let (end, seen) = turn(&b.url, &id, "hang");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        said(&seen).contains("tool h1: [the tool did not answer in 1 s]"),
        "{}",
        said(&seen)
    );
    assert_eq!(
        executions(&log(&b.url, &id)),
        [("h1".into(), "timeout".into())]
    );
    // It answers neither the cancel nor a ping: within CANCEL_ANSWER_WAIT it is killed,
    // and started again.
    let first = stand.pids()[0];
    wait_for("the deaf server killed", || !alive(first));
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("e1", "s__echo", json!({"after": "hang"}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let (end, seen) = turn(&b.url, &id, "echo");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    assert!(said(&seen).contains("tool e1: echo {\"after\": \"hang\"}"));
    assert_eq!(stand.pids().len(), 2);
}

#[test]
fn stop_while_a_slow_tool_runs_cancels_it_at_once_and_the_server_keeps_running() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config("echo,slow", None), &[]);
    let id = session(&b.url);
    mock.script(json!({"kind": "stream",
        "tool_calls": [call("s1", "s__slow", json!({"seconds": 120}))]}));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "slow"}),
    );
    let mut seen = Vec::new();
    until(&frames, "tool_call", &mut seen);
    let call_id = || {
        stand
            .received()
            .iter()
            .find(|m| m["method"] == "tools/call")
            .map(|m| m["id"].clone())
    };
    wait_for("the call at the server", || call_id().is_some());
    let stopped_at = Instant::now();
    let stop = agent_post(&format!("{}/v1/sessions/{id}/stop", b.url));
    assert_eq!(stop, 202);
    let end = until(&frames, "end", &mut seen);
    assert!(
        stopped_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped_at.elapsed()
    );
    assert_eq!(
        end["status"], "failed",
        "no text: §6's stop before any text"
    );
    let events = log(&b.url, &id);
    assert_eq!(executions(&events), [("s1".into(), "cancelled".into())]);
    let failed = events.last().unwrap();
    assert_eq!(
        (&failed["kind"], &failed["payload"]["code"]),
        (&json!("turn_failed"), &json!("stopped"))
    );
    let asked = call_id().unwrap();
    wait_for("notifications/cancelled at the server", || {
        stand
            .received()
            .iter()
            .any(|m| m["method"] == "notifications/cancelled" && m["params"]["requestId"] == asked)
    });
    // It answers a ping: it listens, so it is not restarted.
    wait_for("a ping", || {
        stand.received().iter().any(|m| m["method"] == "ping")
    });
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("e1", "s__echo", json!({}))]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let (end, seen) = turn(&b.url, &id, "echo");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    assert!(said(&seen).contains("tool e1: echo {}"), "{}", said(&seen));
    assert_eq!(stand.pids().len(), 1, "the same process");
}

fn agent_post(url: &str) -> u16 {
    crate::server::agent()
        .post(url)
        .send_empty()
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn sigkill_while_a_tool_runs_keeps_the_message_and_the_text_and_leaves_no_server_behind() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let config = stand.config("echo,hang", Some(600));
    let mut b = serve(&db, &mock, &config, &[]);
    let id = session(&b.url);
    mock.script(json!({"kind": "stream", "text": "Looking it up.",
        "tool_calls": [call("h1", "s__hang", json!({}))]}));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "look it up"}),
    );
    let mut seen = Vec::new();
    until(&frames, "tool_call", &mut seen);
    wait_for("the call at the server", || {
        stand.received().iter().any(|m| m["method"] == "tools/call")
    });
    let server = stand.pids()[0];
    b.child.kill().unwrap(); // SIGKILL
    b.child.wait().unwrap();
    // The server, stuck in its call, does not notice its stdin closing: it dies with
    // brain (PR_SET_PDEATHSIG), not an orphan running forever.
    wait_for("the server gone with brain", || !alive(server));

    let store = Store::open(&db.path(), StoreOptions::default()).unwrap();
    let sid = id.parse().unwrap();
    let stored: Vec<(String, Value)> = store
        .events(sid, 1, None)
        .unwrap()
        .into_iter()
        .map(|e| (e.kind.clone(), serde_json::from_str(&e.payload).unwrap()))
        .collect();
    drop(store);
    let stored_kinds: Vec<&str> = stored.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        stored_kinds,
        ["user_message", "pending_state"],
        "the step's text was made durable before the call"
    );
    assert_eq!(stored[1].1["text"], "Looking it up.");

    let b = serve(&db, &mock, &config, &[]);
    let (_, transcript) = call_url(&b.url, &format!("/v1/sessions/{id}"));
    let interrupted = transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "interrupted")
        .cloned()
        .unwrap_or_else(|| panic!("{transcript:#}"));
    assert_eq!(interrupted["text"], "Looking it up.");
    mock.script(json!({"kind": "stream", "text": "Back again."}));
    let (end, seen) = turn(&b.url, &id, "are you there?");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    let last = streamed(&mock).pop().unwrap();
    assert!(last.to_string().contains("Looking it up."), "{last:#}");
    assert!(kinds(&log(&b.url, &id)).contains(&"assistant_turn"));
    assert_eq!(stand.pids().len(), 2, "the restarted brain started its own");
}

#[test]
fn fifty_calls_in_one_step_all_run_in_order() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config("echo", None), &[]);
    let id = session(&b.url);
    let many: Vec<Value> = (0..50)
        .map(|i| call(&format!("c{i}"), "s__echo", json!({"i": i})))
        .collect();
    mock.script(json!([
        {"kind": "stream", "tool_call_pieces": 1, "tool_calls": many},
        {"kind": "stream", "quote_tools": true},
    ]));
    let (end, seen) = turn(&b.url, &id, "many");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    let ran = executions(&log(&b.url, &id));
    let expected: Vec<(String, String)> = (0..50).map(|i| (format!("c{i}"), "ok".into())).collect();
    assert_eq!(ran, expected);
    let said = said(&seen);
    for i in 0..50 {
        assert!(
            said.contains(&format!("tool c{i}: echo {{\"i\": {i}}}")),
            "{said}"
        );
    }
}

#[test]
fn a_model_that_never_stops_calling_is_ended_by_the_step_limit() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(
        &db,
        &mock,
        &stand.config("echo", None),
        &["--max-tool-steps", "3"],
    );
    let id = session(&b.url);
    let steps: Vec<Value> = (1..=6)
        .map(|n| {
            json!({"kind": "stream", "text": format!("step {n}"),
                        "tool_calls": [call(&format!("c{n}"), "s__echo", json!({"n": n}))]})
        })
        .collect();
    mock.script(json!(steps));
    let (end, seen) = turn(&b.url, &id, "loop forever");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    assert_eq!(end["steps"], 3);
    let sent = streamed(&mock);
    assert_eq!(sent.len(), 3);
    assert!(sent[1].get("tool_choice").is_none());
    assert_eq!(sent[2]["tool_choice"], "none");
    let events = log(&b.url, &id);
    assert_eq!(
        executions(&events),
        [("c1".into(), "ok".into()), ("c2".into(), "ok".into())],
        "the last step's calls are not run"
    );
    let answer = events
        .iter()
        .find(|e| e["kind"] == "assistant_turn")
        .unwrap();
    assert_eq!(answer["payload"]["text"], "step 1\n\nstep 2\n\nstep 3");
}

#[test]
fn a_provider_that_rejects_tools_still_answers_and_the_model_is_listed_tool_less() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config("echo", None), &[]);
    let id = session(&b.url);
    let (_, before) = call_url(&b.url, "/v1/models");
    let tools_of = |models: &Value| {
        models["data"]
            .as_array()
            .or(models["models"].as_array())
            .unwrap()
            .iter()
            .find(|m| m["id"] == "mock-model")
            .map(|m| m["tools"].clone())
    };
    assert_eq!(tools_of(&before), Some(json!(true)), "{before}");
    mock.script(json!({"kind": "stream", "reject_tools": true, "text": "A plain answer."}));
    let (end, seen) = turn(&b.url, &id, "hello");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    assert_eq!(said(&seen), "A plain answer.");
    let (_, after) = call_url(&b.url, "/v1/models");
    assert_eq!(tools_of(&after), Some(json!(false)), "{after}");
}

#[test]
fn sigterm_while_a_permission_question_waits_denies_it_by_shutdown_and_exits_in_10_s() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    // `ask` is not in the allow list: it needs consent.
    let mut b = serve(&db, &mock, &stand.config("echo,ask", None), &[]);
    let id = session(&b.url);
    mock.script(json!({"kind": "stream", "tool_calls": [call("q1", "s__ask", json!({}))]}));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "ask me"}),
    );
    let mut seen = Vec::new();
    until(&frames, "permission", &mut seen);
    let started = Instant::now();
    let pid = b.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let mut child = std::mem::replace(
        &mut b.child,
        std::process::Command::new("true").spawn().unwrap(),
    );
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("brain exits within 10 s")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let store = Store::open(&db.path(), StoreOptions::default()).unwrap();
    let sid = id.parse().unwrap();
    let stored: Vec<(String, Value)> = store
        .events(sid, 1, None)
        .unwrap()
        .into_iter()
        .map(|e| (e.kind.clone(), serde_json::from_str(&e.payload).unwrap()))
        .collect();
    let resolved = stored
        .iter()
        .find(|(k, _)| k == "permission_resolved")
        .unwrap_or_else(|| panic!("{stored:#?}"));
    assert_eq!(
        (&resolved.1["decision"], &resolved.1["by"]),
        (&json!("deny"), &json!("shutdown"))
    );
    let exec = stored.iter().find(|(k, _)| k == "tool_execution").unwrap();
    assert_eq!(exec.1["status"], "cancelled");
    assert_eq!(stored.last().unwrap().0, "turn_failed");
    assert_eq!(stored.last().unwrap().1["code"], "shutdown");
    assert!(stand.received().iter().all(|m| m["method"] != "tools/call"));
}

#[test]
fn with_distill_on_the_mini_model_reads_the_calls_and_only_its_findings_are_kept() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let (child, url) = spawn_serve(
        std::process::Command::new(env!("CARGO_BIN_EXE_brain"))
            .arg("--db")
            .arg(db.path())
            .args(["--sync", "normal", "serve", "--listen", "127.0.0.1:0"])
            .args([
                "--distill",
                "on",
                "--titles",
                "off",
                "--provider-url",
                &mock.url,
            ])
            .arg("--mcp-config")
            .arg(stand.config("echo,crash", None))
            .stderr(std::process::Stdio::null()),
    );
    let b = Serving { child, url };
    // A mini model that invents a file: the calls say which files changed, not it.
    let memory = json!({"files_changed": ["/invented"], "failures": [],
                        "key_findings": ["the echo works"]});
    mock.defaults(json!({"memory": {"text": memory.to_string()}}));
    let id = session(&b.url);
    mock.script(json!([
        {"kind": "stream", "tool_calls": [call("c1", "s__echo", json!({"path": "/t/a.txt"})),
                                          call("c2", "s__crash", json!({}))]},
        {"kind": "stream", "text": "Done."},
    ]));
    let (end, seen) = turn(&b.url, &id, "go");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    let mut stored = None;
    wait_for("the turn memory", || {
        stored = log(&b.url, &id)
            .into_iter()
            .find(|e| e["kind"] == "turn_memory");
        stored.is_some()
    });
    let m = &stored.unwrap()["payload"];
    assert_eq!(m["files_changed"], json!(["/t/a.txt"]), "{m}");
    assert_eq!(m["key_findings"], json!(["the echo works"]));
    assert_eq!(m["failures"][0]["what"], "s__crash({})", "{m}");
    let asked = mock
        .requests()
        .into_iter()
        .find(|q| {
            q["stream"] != true
                && q["messages"][0]["content"]
                    .as_str()
                    .is_some_and(|s| s.contains("Extract a memory"))
        })
        .unwrap();
    let input = asked["messages"][1]["content"].as_str().unwrap();
    assert!(input.starts_with("User: go\n\nAssistant: Done."), "{input}");
    assert!(
        input.contains("- s__echo({\"path\":\"/t/a.txt\"}) → ok: echo {\"path\": \"/t/a.txt\"}"),
        "{input}"
    );
    assert!(
        input.contains("- s__crash({}) → error: the MCP server s failed"),
        "{input}"
    );
}
