//! The tool loop inside a turn (SPEC §13), end to end: a real `brain serve`, mock_llm
//! asking for calls, and the real server-filesystem doing them. Consent is given (or not)
//! through the API while the stream waits; the log keeps the digest; the model sees the
//! whole traffic within the turn and none of it after.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cli::{brain, stdout_ok};
use crate::mcp::npm_server;
use crate::server::agent;
use crate::support::*;

/// A server with tools: brain with `--mcp-config` naming server-filesystem on `dir`.
pub(crate) struct ToolBrain {
    pub(crate) child: Child,
    pub(crate) url: String,
    pub(crate) _db: TempDb,
}

impl Drop for ToolBrain {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn start(test: &str, mock: &MockLlm, dir: &Path, extra: &[&str]) -> Option<ToolBrain> {
    let entry = npm_server(test, "server-filesystem")?;
    let config = dir.join("mcp.json");
    let servers = json!({"mcpServers": {"fs": {"command": "node", "args": [entry, dir]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let db = TempDb::new();
    let (child, url) = spawn_serve(
        serve_command(&db, &mock.url)
            .arg("--mcp-config")
            .arg(&config)
            .args(extra),
    );
    Some(ToolBrain {
        child,
        url,
        _db: db,
    })
}

/// The frames of a POST that streams, as they arrive.
pub(crate) fn stream(url: &str, path: &str, body: Value) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    let full = format!("{url}{path}");
    std::thread::spawn(move || {
        let resp = agent()
            .post(&full)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .unwrap();
        let reader = BufReader::new(resp.into_body().into_reader());
        for line in reader.lines() {
            let Ok(line) = line else { return };
            if let Some(data) = line.strip_prefix("data: ")
                && let Ok(v) = serde_json::from_str::<Value>(data)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    rx
}

/// Frames until one of `kind` (returned), with a deadline.
pub(crate) fn until(frames: &mpsc::Receiver<Value>, kind: &str, seen: &mut Vec<Value>) -> Value {
    loop {
        let f = frames
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no {kind} frame; saw {seen:#?}"));
        seen.push(f.clone());
        if f["type"] == kind {
            return f;
        }
    }
}

pub(crate) fn session(url: &str) -> String {
    let resp = agent()
        .post(&format!("{url}/v1/sessions"))
        .header("Content-Type", "application/json")
        .send("{}")
        .unwrap();
    let v: Value = serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
    v["id"].as_str().unwrap().to_owned()
}

pub(crate) fn events(b: &ToolBrain, id: &str) -> Vec<Value> {
    let resp = agent()
        .get(&format!("{}/v1/sessions/{id}/events", b.url))
        .call()
        .unwrap();
    let v: Value = serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap();
    v["events"].as_array().unwrap().clone()
}

pub(crate) fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

pub(crate) fn answer(url: &str, id: &str, call_id: &str, body: Value) -> u16 {
    agent()
        .post(&format!("{url}/v1/sessions/{id}/permissions/{call_id}"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap()
        .status()
        .as_u16()
}

pub(crate) fn write_call(id: &str, path: &Path, content: &str) -> Value {
    json!({"id": id, "name": "fs__write_file",
           "arguments": json!({"path": path, "content": content}).to_string()})
}

pub(crate) fn streamed(mock: &MockLlm) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| r["stream"] == true)
        .collect()
}

#[test]
fn the_model_writes_a_real_file_with_consent_and_the_next_turn_sees_only_the_answer() {
    let test = "tools_loop::the_model_writes_a_real_file_with_consent_and_the_next_turn_sees_only_the_answer";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = start(test, &mock, dir.path(), &[]) else {
        return;
    };
    let id = session(&b.url);
    let file = dir.path().join("note.txt");
    mock.script(json!([
        {"kind": "stream", "text": "Writing it.", "tool_calls": [write_call("call_w", &file, "hello, disk")]},
        {"kind": "stream", "text": "Done: the note is written."},
    ]));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "write a note"}),
    );
    let mut seen = Vec::new();
    let asked = until(&frames, "permission", &mut seen);
    assert_eq!(asked["name"], "fs__write_file");
    assert_eq!(asked["call_id"], "call_w");
    assert!(!file.exists(), "nothing runs before the answer");
    // While it waits: the transcript shows the open question, /live replays it.
    let (_, transcript) = call_url(&b.url, &format!("/v1/sessions/{id}"));
    let question = transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "permission")
        .cloned()
        .unwrap();
    assert!(question["decision"].is_null(), "{question}");
    assert_eq!(
        answer(&b.url, &id, "call_other", json!({"decision": "allow"})),
        404,
        "only the waiting call can be answered"
    );
    assert_eq!(
        answer(&b.url, &id, "call_w", json!({"decision": "yes"})),
        400
    );
    assert_eq!(
        answer(&b.url, &id, "call_w", json!({"decision": "allow"})),
        200
    );
    let result = until(&frames, "tool_result", &mut seen);
    assert_eq!(result["status"], "ok", "{result}");
    let end = until(&frames, "end", &mut seen);
    assert_eq!(end["status"], "completed", "{end}");
    assert_eq!(end["steps"], 2);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello, disk");
    let text: String = seen
        .iter()
        .filter(|f| f["type"] == "chunk")
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Writing it.\n\nDone: the note is written.");

    // The attempt's events (post-turn work may have added more after them). Step 1's text
    // is checkpointed before its call waits for consent.
    let mut log = events(&b, &id);
    log.truncate(7);
    assert_eq!(
        kinds(&log),
        [
            "session_started",
            "user_message",
            "pending_state",
            "permission_requested",
            "permission_resolved",
            "tool_execution",
            "assistant_turn"
        ]
    );
    assert_eq!(log[2]["payload"]["text"], "Writing it.");
    let exec = &log[5]["payload"];
    assert_eq!(
        (
            &exec["status"],
            &exec["name"],
            &exec["server"],
            &exec["step"]
        ),
        (
            &json!("ok"),
            &json!("fs__write_file"),
            &json!("fs"),
            &json!(1)
        )
    );
    let steps = streamed(&mock);
    let tool_message = &steps[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool_message["role"], "tool");
    assert_eq!(tool_message["tool_call_id"], "call_w");
    let sent = tool_message["content"].as_str().unwrap();
    let digest = &exec["result_digest"];
    assert_eq!(digest["bytes"], sent.len() as u64);
    let hash: String = Sha256::digest(sent.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(digest["sha256"], hash);
    assert_eq!(digest["preview"], sent);
    let answer_event = &log[6]["payload"];
    assert_eq!(
        answer_event["text"],
        "Writing it.\n\nDone: the note is written."
    );
    assert_eq!(answer_event["steps"], 2);
    assert_eq!(
        log[2]["payload"]["step"], 1,
        "the checkpoint names its step"
    );

    // Shown in the order it happened: step 1's text before its question and call, the
    // answer after them with only what came after (its `text` stays the whole answer).
    let (_, transcript) = call_url(&b.url, &format!("/v1/sessions/{id}"));
    let items = transcript["items"].as_array().unwrap();
    let shown: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    // (An automatic title may follow.)
    assert_eq!(
        shown[..5],
        ["user", "step", "permission", "tool", "assistant"]
    );
    assert_eq!(
        (&items[1]["text"], &items[1]["step"]),
        (&json!("Writing it."), &json!(1))
    );
    assert_eq!(items[4]["last_step"]["text"], "Done: the note is written.");
    assert_eq!(
        items[4]["text"],
        "Writing it.\n\nDone: the note is written."
    );
    // `sessions show` reads the same order from the file while the server runs.
    let out = stdout_ok(&brain(&b._db, &["sessions", "show", &id]));
    let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("{s:?} not in {out}"));
    assert!(at("Writing it.") < at("fs__write_file"), "{out}");
    assert!(
        at("fs__write_file") < at("Done: the note is written."),
        "{out}"
    );
    assert_eq!(out.matches("Writing it.").count(), 1, "{out}");

    // I3 within the attempt: step 2's messages extend step 1's; the tools are the same.
    let (one, two) = (&steps[0], &steps[1]);
    assert_eq!(one["tools"], two["tools"]);
    let (m1, m2) = (
        one["messages"].as_array().unwrap(),
        two["messages"].as_array().unwrap(),
    );
    assert_eq!(&m2[..m1.len()], &m1[..]);
    assert_eq!(m2[m1.len()]["tool_calls"][0]["id"], "call_w");
    assert!(
        one["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "fs__write_file")
    );

    // The turn memory names the file (computed from the calls, with `--distill off`).
    let memory = turn_memory(&b, &id);
    assert_eq!(memory["files_changed"], json!([file]), "{memory}");
    assert_eq!(memory["failures"], json!([]));
    assert_eq!(memory["key_findings"], json!([]));

    // The next turn: the answer and the turn memory, not the traffic.
    mock.script(json!({"kind": "stream", "text": "ok"}));
    let mut after = Vec::new();
    let next = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "thanks"}),
    );
    assert_eq!(until(&next, "end", &mut after)["status"], "completed");
    let third = streamed(&mock).pop().unwrap();
    let roles: Vec<&str> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles.iter().filter(|r| **r == "tool").count(),
        0,
        "{third:#}"
    );
    assert!(
        third["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m.get("tool_calls").is_none()),
        "{third:#}"
    );
    assert!(third.to_string().contains("Done: the note is written."));
    let said: Vec<&str> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    let residue = format!("[turn memory]\nfiles changed: {}", file.display());
    assert!(
        said.iter().any(|c| c.contains(&residue)),
        "the next request shows the turn memory: {said:#?}"
    );
    assert!(
        !third.to_string().contains("hello, disk"),
        "the call's arguments are not in the next turn's request"
    );
    // One ledger row per step, and the next turn's.
    let (_, usage) = call_url(&b.url, &format!("/v1/usage?session_id={id}"));
    assert_eq!(usage["by_purpose"]["chat"]["calls"], 3, "{usage}");
}

/// The session's (first) `turn_memory` payload, once it is written (post-turn work runs
/// in the background).
pub(crate) fn turn_memory(b: &ToolBrain, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(m) = events(b, id).iter().find(|e| e["kind"] == "turn_memory") {
            return m["payload"].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no turn_memory in {:#?}",
            events(b, id)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// GET on a bare URL (the `server` helpers take a `Brain`).
pub(crate) fn call_url(url: &str, path: &str) -> (u16, Value) {
    let resp = agent().get(&format!("{url}{path}")).call().unwrap();
    let status = resp.status().as_u16();
    (
        status,
        serde_json::from_str(&resp.into_body().read_to_string().unwrap()).unwrap_or(Value::Null),
    )
}

#[test]
fn denied_unknown_and_malformed_calls_are_recorded_and_the_model_is_told() {
    let test = "tools_loop::denied_unknown_and_malformed_calls_are_recorded_and_the_model_is_told";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = start(test, &mock, dir.path(), &[]) else {
        return;
    };
    let id = session(&b.url);
    let file = dir.path().join("never.txt");
    mock.script(json!([
        {"kind": "stream", "tool_calls": [
            write_call("call_d", &file, "no"),
            {"id": "call_u", "name": "fs__format_disk", "arguments": "{}"},
            {"id": "call_m", "name": "fs__read_text_file", "arguments": "{\"path\": "},
        ]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "try things"}),
    );
    let mut seen = Vec::new();
    until(&frames, "permission", &mut seen);
    assert_eq!(
        answer(&b.url, &id, "call_d", json!({"decision": "deny"})),
        200
    );
    let end = until(&frames, "end", &mut seen);
    assert_eq!(end["status"], "completed", "{seen:#?}");
    assert!(!file.exists());
    let log = events(&b, &id);
    let statuses: Vec<(&str, &str)> = log
        .iter()
        .filter(|e| e["kind"] == "tool_execution")
        .map(|e| {
            (
                e["payload"]["call_id"].as_str().unwrap(),
                e["payload"]["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("call_d", "denied"),
            ("call_u", "error"),
            ("call_m", "error")
        ]
    );
    let resolved = log
        .iter()
        .find(|e| e["kind"] == "permission_resolved")
        .unwrap();
    assert_eq!(
        (&resolved["payload"]["decision"], &resolved["payload"]["by"]),
        (&json!("deny"), &json!("user"))
    );
    // Every client is told who decided, with the event's seq.
    let frame = seen
        .iter()
        .find(|f| f["type"] == "permission_resolved")
        .unwrap();
    assert_eq!(
        (
            &frame["call_id"],
            &frame["decision"],
            &frame["by"],
            &frame["seq"]
        ),
        (
            &json!("call_d"),
            &json!("deny"),
            &json!("user"),
            &resolved["seq"]
        )
    );
    // The model was told each outcome (the mock quotes the tool messages it got).
    let said: String = seen
        .iter()
        .filter(|f| f["type"] == "chunk")
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert!(said.contains("tool call_d: [denied by the user]"), "{said}");
    assert!(
        said.contains("tool call_u: there is no tool named"),
        "{said}"
    );
    assert!(
        said.contains("tool call_m: the arguments are not valid JSON"),
        "{said}"
    );
    // Each failure is in the turn memory; the denied write changed no file.
    let memory = turn_memory(&b, &id);
    assert_eq!(memory["files_changed"], json!([]), "{memory}");
    let failures: Vec<(&str, &str)> = memory["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["what"].as_str().unwrap(), f["why"].as_str().unwrap()))
        .collect();
    assert_eq!(failures.len(), 3, "{memory}");
    assert!(
        failures[0]
            .0
            .starts_with("fs__write_file({\"content\":\"no\""),
        "{failures:?}"
    );
    assert_eq!(failures[0].1, "[denied by the user]");
    assert_eq!(
        failures[1],
        (
            "fs__format_disk({})",
            "there is no tool named \"fs__format_disk\""
        )
    );
    assert_eq!(failures[2].0, "fs__read_text_file({\"path\":)");
    assert!(
        failures[2]
            .1
            .starts_with("the arguments are not valid JSON"),
        "{failures:?}"
    );
}

#[test]
fn remember_allows_the_tool_for_the_session_and_stop_while_asking_cancels() {
    let test = "tools_loop::remember_allows_the_tool_for_the_session_and_stop_while_asking_cancels";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = start(test, &mock, dir.path(), &[]) else {
        return;
    };
    let id = session(&b.url);
    let (one, two) = (dir.path().join("one.txt"), dir.path().join("two.txt"));
    mock.script(json!([
        {"kind": "stream", "tool_calls": [write_call("c1", &one, "1")]},
        {"kind": "stream", "text": "first written"},
        {"kind": "stream", "tool_calls": [write_call("c2", &two, "2")]},
        {"kind": "stream", "text": "second written"},
    ]));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "one"}),
    );
    let mut seen = Vec::new();
    until(&frames, "permission", &mut seen);
    assert_eq!(
        answer(
            &b.url,
            &id,
            "c1",
            json!({"decision": "allow", "remember": true})
        ),
        200
    );
    assert_eq!(until(&frames, "end", &mut seen)["status"], "completed");
    // The same tool again: no question this time.
    let mut second = Vec::new();
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "two"}),
    );
    assert_eq!(until(&frames, "end", &mut second)["status"], "completed");
    assert!(
        second.iter().all(|f| f["type"] != "permission"),
        "{second:#?}"
    );
    assert_eq!(std::fs::read_to_string(&two).unwrap(), "2");

    // A new session asks again; a stop while it asks cancels the call and the attempt.
    let other = session(&b.url);
    let three = dir.path().join("three.txt");
    mock.script(json!({"kind": "stream", "tool_calls": [write_call("c3", &three, "3")]}));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{other}/messages"),
        json!({"message": "three"}),
    );
    let mut third = Vec::new();
    until(&frames, "permission", &mut third);
    let stopped = agent()
        .post(&format!("{}/v1/sessions/{other}/stop", b.url))
        .send_empty()
        .unwrap();
    assert_eq!(stopped.status().as_u16(), 202);
    let end = until(&frames, "end", &mut third);
    assert_eq!(end["status"], "failed", "{third:#?}");
    assert!(!three.exists());
    let log = events(&b, &other);
    let resolved = log
        .iter()
        .find(|e| e["kind"] == "permission_resolved")
        .unwrap();
    assert_eq!(resolved["payload"]["by"], "stop");
    let exec = log.iter().find(|e| e["kind"] == "tool_execution").unwrap();
    assert_eq!(exec["payload"]["status"], "cancelled");
    assert_eq!(log.last().unwrap()["kind"], "turn_failed");
}

#[test]
fn the_last_step_is_sent_with_tool_choice_none() {
    let test = "tools_loop::the_last_step_is_sent_with_tool_choice_none";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = start(test, &mock, dir.path(), &["--max-tool-steps", "2"]) else {
        return;
    };
    let id = session(&b.url);
    let read = json!({"id": "r1", "name": "fs__list_directory",
                      "arguments": json!({"path": dir.path()}).to_string()});
    mock.script(json!([
        {"kind": "stream", "tool_calls": [read]},
        {"kind": "stream", "text": "Here is what I found."},
    ]));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "look"}),
    );
    let mut seen = Vec::new();
    assert_eq!(until(&frames, "end", &mut seen)["status"], "completed");
    // A read-only tool runs without asking.
    assert!(seen.iter().all(|f| f["type"] != "permission"));
    let steps = streamed(&mock);
    assert_eq!(steps.len(), 2);
    assert!(steps[0].get("tool_choice").is_none());
    assert_eq!(steps[1]["tool_choice"], "none");
}

/// The user is asked about exactly what the tool would get (I9): a repeated key shows its
/// last value, as the tool receives it; arguments too long to show whole are refused, not
/// shown cut; a call id the model repeats gets a new one, so an answer never reaches
/// another call.
#[test]
fn the_question_shows_exactly_what_runs() {
    let test = "tools_loop::the_question_shows_exactly_what_runs";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = start(test, &mock, dir.path(), &[]) else {
        return;
    };
    let id = session(&b.url);
    let (shown, real) = (dir.path().join("harmless.txt"), dir.path().join("real.txt"));
    let repeated = format!(
        r#"{{"path": {}, "content": "x", "path": {}}}"#,
        json!(shown),
        json!(real)
    );
    let padded = format!(
        r#"{{"path": {}, "zz": "{}", "content": "x", "path": {}}}"#,
        json!(shown),
        "x".repeat(17_000),
        json!(real)
    );
    mock.script(json!([
        {"kind": "stream", "tool_calls": [
            {"id": "same", "name": "fs__write_file", "arguments": padded},
            {"id": "same", "name": "fs__write_file", "arguments": repeated},
        ]},
        {"kind": "stream", "quote_tools": true},
    ]));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "go"}),
    );
    let mut seen = Vec::new();
    let asked = until(&frames, "permission", &mut seen);
    // The padded call was refused before any question; the repeated-key one is asked
    // about with the path it would really write, under an id of its own.
    assert_ne!(asked["call_id"], "same", "{asked}");
    let args: Value = serde_json::from_str(asked["args"].as_str().unwrap()).unwrap();
    assert_eq!(args["path"], json!(real), "{asked}");
    assert_eq!(
        answer(&b.url, &id, "same", json!({"decision": "allow"})),
        404,
        "the first call's id does not reach the second's question"
    );
    let call_id = asked["call_id"].as_str().unwrap().to_owned();
    assert_eq!(
        answer(&b.url, &id, &call_id, json!({"decision": "allow"})),
        200
    );
    assert_eq!(until(&frames, "end", &mut seen)["status"], "completed");
    assert!(!shown.exists());
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "x");
    let statuses: Vec<String> = events(&b, &id)
        .iter()
        .filter(|e| e["kind"] == "tool_execution")
        .map(|e| e["payload"]["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(statuses, ["error", "ok"]);
}

/// A step's results never push the next request past the window (I4): a 60 KB file read
/// by a model with a 4,096-token window reaches it cut to the room left, with a note.
#[test]
fn results_are_cut_to_the_room_left_in_the_window() {
    let test = "tools_loop::results_are_cut_to_the_room_left_in_the_window";
    let mock = MockLlm::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = start(test, &mock, dir.path(), &[]) else {
        return;
    };
    let id = session(&b.url);
    let big = dir.path().join("big.txt");
    let words: String = (0..10_000).map(|i| format!("w{i} ")).collect();
    std::fs::write(&big, &words).unwrap();
    mock.script(json!([
        {"kind": "stream", "tool_calls": [{"id": "r", "name": "fs__read_text_file",
                                            "arguments": json!({"path": big}).to_string()}]},
        {"kind": "stream", "text": "read it"},
    ]));
    let frames = stream(
        &b.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "read"}),
    );
    let mut seen = Vec::new();
    assert_eq!(
        until(&frames, "end", &mut seen)["status"],
        "completed",
        "{seen:#?}"
    );
    let second = streamed(&mock).pop().unwrap();
    let sent = second["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        sent.starts_with("w0 w1 "),
        "{}",
        &sent[..40.min(sent.len())]
    );
    assert!(
        sent.ends_with("[the rest of this result did not fit in the model's context window]"),
        "{}",
        &sent[sent.len().saturating_sub(120)..]
    );
    // Well under 4,096 tokens of text (the request also carries the tools and the rest).
    assert!(sent.len() < 4096 * 2, "{} bytes", sent.len());
    // The log's digest is of the whole result, not of what fit.
    let exec = events(&b, &id)
        .into_iter()
        .find(|e| e["kind"] == "tool_execution")
        .unwrap();
    assert!(exec["payload"]["result_digest"]["bytes"].as_u64().unwrap() >= words.len() as u64 - 1);
}
