//! Two `brain serve` processes on one PostgreSQL (SPEC §16), as a team runs them behind a
//! load balancer: one turn at a time across them (409), `/stop` and `/live` through the
//! server that does not run the attempt, `turn_active` seen from the other, and a server
//! SIGKILLed mid-turn leaving the session usable from the other at once, its partial kept.

use std::ffi::OsStr;
use std::process::{Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::testdb::{self, TestDb};
use serde_json::{Value, json};

use crate::server::{Brain, agent, call, new_session, read_frames, slow_answer, stream, wait_for};
use crate::support::*;
use crate::tools_loop::{stream as tools_stream, until, write_call};

/// How long the other server may take to see a killed server's claim gone: the database
/// ends the dead connections as soon as their sockets close.
const DEAD_CLAIM_RELEASE: Duration = Duration::from_secs(5);

/// `brain --db DB serve` on a free port (DB a path or a URL), talking to `mock`.
pub fn serve_on(db: &str, mock: &MockLlm) -> Brain {
    serve_with(db, mock, &[])
}

pub(crate) fn serve_with(db: &str, mock: &MockLlm, extra: &[&OsStr]) -> Brain {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_brain"));
    cmd.args(["--db", db, "serve", "--listen", "127.0.0.1:0"])
        .args(["--distill", "off", "--titles", "off"])
        .args(["--stream-idle-timeout", "5", "--provider-url", &mock.url])
        .args(extra)
        .stderr(Stdio::null());
    Brain::spawn(&mut cmd)
}

/// Two servers on one fresh database.
fn pair(test: &str, mock: &MockLlm) -> Option<(TestDb, Brain, Brain)> {
    let db = testdb::fresh(test)?;
    let (a, b) = (serve_on(&db.url, mock), serve_on(&db.url, mock));
    Some((db, a, b))
}

/// Sends `message` on `b` in a thread: the whole stream's frames once it ends.
fn send_in_background(b: &Brain, id: &str, message: &str) -> JoinHandle<Vec<Value>> {
    let url = format!("{}/v1/sessions/{id}/messages", b.url);
    let body = json!({"message": message}).to_string();
    thread::spawn(move || {
        let resp = agent()
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body)
            .unwrap();
        let (status, _, frames) = read_frames(resp);
        assert_eq!(status, 200, "{frames:?}");
        frames
    })
}

/// `/live` on `b` in a thread: its frames once the attempt ends.
fn live_in_background(b: &Brain, id: &str) -> JoinHandle<(u16, Vec<Value>)> {
    let url = format!("{}/v1/sessions/{id}/live", b.url);
    thread::spawn(move || {
        let (status, _, frames) = read_frames(agent().get(&url).call().unwrap());
        (status, frames)
    })
}

fn text(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "chunk")
        .filter_map(|f| f["text"].as_str())
        .collect()
}

/// The `end` frame, which must be the last and only one.
fn end(frames: &[Value]) -> &Value {
    let ends = frames.iter().filter(|f| f["type"] == "end").count();
    assert_eq!(ends, 1, "{frames:?}");
    let last = frames.last().unwrap();
    assert_eq!(last["type"], "end", "{frames:?}");
    last
}

fn turn_active(b: &Brain, id: &str) -> bool {
    call(b, "GET", &format!("/v1/sessions/{id}"), None).1["session"]["turn_active"] == true
}

fn kinds(b: &Brain, id: &str) -> Vec<String> {
    let (_, events) = call(b, "GET", &format!("/v1/sessions/{id}/events"), None);
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn two_servers_one_turn_at_a_time_stop_and_live_through_the_other() {
    let mock = MockLlm::start(&[]);
    let Some((db, a, b)) = pair("two_servers_one_turn_at_a_time", &mock) else {
        return;
    };
    let id = new_session(&a);
    mock.script(slow_answer());
    let on_a = send_in_background(&a, &id, "write a lot");
    wait_for("B to see A's turn", || turn_active(&b, &id));
    let (_, page) = call(&b, "GET", "/v1/sessions", None);
    let listed = &page["sessions"].as_array().unwrap()[0];
    assert_eq!(
        (&listed["id"], &listed["turn_active"]),
        (&json!(id), &json!(true))
    );
    // I7 across servers: a send, a retry and a delete through B are refused.
    let messages = format!("/v1/sessions/{id}/messages");
    let (status, busy) = call(&b, "POST", &messages, Some(json!({"message": "me too"})));
    assert_eq!(
        (status, busy["error"].as_str()),
        (409, Some("turn_in_flight"))
    );
    let (status, _) = call(
        &b,
        "POST",
        &format!("/v1/sessions/{id}/retry"),
        Some(json!({})),
    );
    assert_eq!(status, 409);
    assert_eq!(
        call(&b, "DELETE", &format!("/v1/sessions/{id}"), None).0,
        409
    );
    // So is a compaction by hand in another process on the URL (in-process, claiming).
    let out = run_brain(
        &[
            "--db",
            &db.url,
            "sessions",
            "compact",
            &id,
            "--provider-url",
            &mock.url,
        ],
        b"",
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("still running"),
        "{said}"
    );
    // And an in-process `brain chat` on the URL, sending to it.
    let out = run_brain(
        &[
            "--db",
            &db.url,
            "chat",
            "--session",
            &id,
            "--provider-url",
            &mock.url,
        ],
        b"me too\n",
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("still running"), "{said}");
    let followed = live_in_background(&b, &id);
    wait_for("a checkpoint", || {
        kinds(&b, &id).iter().any(|k| k == "pending_state")
    });
    // A fork in another process on the URL leaves A's running attempt out.
    let out = run_brain(&["--db", &db.url, "sessions", "fork", &id, "--json"], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fork: Value = serde_json::from_slice(&out.stdout).unwrap();
    let copied = kinds(&b, fork["id"].as_str().unwrap());
    assert_eq!(copied, ["session_started", "user_message"], "{copied:?}");
    // `/stop` through B ends the attempt A runs.
    assert_eq!(
        call(&b, "POST", &format!("/v1/sessions/{id}/stop"), None).0,
        202
    );
    let seen = on_a.join().unwrap();
    let (status, live) = followed.join().unwrap();
    assert_eq!(status, 200);
    let ended = end(&seen);
    assert_eq!(ended["status"], "interrupted", "{seen:?}");
    assert_eq!(live[0]["type"], "turn", "{live:?}");
    assert_eq!(
        (&end(&live)["status"], &end(&live)["seq"]),
        (&ended["status"], &ended["seq"])
    );
    // The final checkpoint holds all A streamed, so B's follower saw the same text.
    assert!(text(&seen).starts_with("word0 "), "{seen:?}");
    assert_eq!(text(&live), text(&seen));
    // Free at once, from either server: B answers the next message.
    assert!(!turn_active(&a, &id));
    assert_eq!(
        call(&b, "POST", &format!("/v1/sessions/{id}/stop"), None).0,
        404
    );
    mock.script(json!({"kind": "stream", "text": "one two three four five six", "delay_ms": 150}));
    let on_b = send_in_background(&b, &id, "count");
    wait_for("A to see B's turn", || turn_active(&a, &id));
    // Followed from A to its end: the whole answer, the same end.
    let (status, live) = live_in_background(&a, &id).join().unwrap();
    let seen = on_b.join().unwrap();
    assert_eq!(status, 200);
    assert_eq!(end(&seen)["status"], "completed");
    assert_eq!(
        (&end(&live)["status"], &end(&live)["seq"]),
        (&end(&seen)["status"], &end(&seen)["seq"])
    );
    assert_eq!(text(&live), "one two three four five six");
    assert_eq!(text(&seen), text(&live));
}

#[test]
fn a_server_killed_mid_turn_leaves_the_session_usable_from_the_other_with_the_partial() {
    let mock = MockLlm::start(&[]);
    let Some((_db, mut a, b)) = pair("a_server_killed_mid_turn", &mock) else {
        return;
    };
    let id = new_session(&a);
    mock.script(slow_answer());
    let on_a = send_in_background(&a, &id, "write a lot");
    wait_for("a checkpoint", || {
        kinds(&b, &id).iter().any(|k| k == "pending_state")
    });
    assert!(turn_active(&b, &id));
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let _ = on_a.join();
    crate::support::wait_for(
        "the dead server's claim is gone",
        DEAD_CLAIM_RELEASE,
        || !turn_active(&b, &id),
    );
    // The partial from the last checkpoint is in the transcript, as interrupted.
    let (_, transcript) = call(&b, "GET", &format!("/v1/sessions/{id}"), None);
    let partial = &transcript["items"][1];
    assert_eq!(partial["kind"], "interrupted", "{transcript}");
    let (status, _, frames) = stream(
        &b,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "go on"}),
    );
    assert_eq!(status, 200);
    assert_eq!(end(&frames)["status"], "completed", "{frames:?}");
    // The next turn's request carries the partial.
    let sent = mock
        .requests()
        .into_iter()
        .rfind(|r| r["stream"] == true)
        .unwrap();
    let messages = sent["messages"].as_array().unwrap();
    let partial = messages[messages.len() - 2]["content"].as_str().unwrap();
    assert!(partial.starts_with("word0 "), "{partial}");
    assert_eq!(messages.last().unwrap()["content"], "go on");
}

/// A PostgreSQL database, a mock and the filesystem MCP server in a fresh directory, for
/// team tests of tool consent: the MCP config's path, the database, the mock, the directory.
fn fs_team(
    test: &str,
    db: &str,
) -> Option<(std::path::PathBuf, TestDb, MockLlm, tempfile::TempDir)> {
    let fs = crate::mcp::npm_server(test, "server-filesystem")?;
    let db = testdb::fresh(db)?;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp.json");
    let servers = json!({"mcpServers": {"fs": {"command": "node", "args": [fs, dir.path()]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    Some((config, db, MockLlm::start(&[]), dir))
}

/// Sends a turn on `a` whose model writes `text` to `file`, up to its permission question:
/// the frames, those seen, the question.
fn ask_to_write(
    mock: &MockLlm,
    a: &Brain,
    id: &str,
    file: &std::path::Path,
    text: &str,
) -> (std::sync::mpsc::Receiver<Value>, Vec<Value>, Value) {
    mock.script(json!([
        {"kind": "stream", "text": "Writing.", "tool_calls": [write_call("c1", file, text)]},
        {"kind": "stream", "text": "Done."},
    ]));
    let frames = tools_stream(
        &a.url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "write it"}),
    );
    let mut seen = Vec::new();
    let asked = until(&frames, "permission", &mut seen);
    (frames, seen, asked)
}

#[test]
fn a_permission_asked_on_one_server_is_answered_through_the_other() {
    let Some((fs, db, mock, dir)) = fs_team(
        "team_e2e::a_permission_asked_on_one_server_is_answered_through_the_other",
        "a_permission_asked_on_one_server",
    ) else {
        return;
    };
    let extra = [OsStr::new("--mcp-config"), fs.as_os_str()];
    let (a, b) = (
        serve_with(&db.url, &mock, &extra),
        serve_with(&db.url, &mock, &extra),
    );
    let id = new_session(&a);
    let file = dir.path().join("from_b.txt");
    let (frames, mut seen, asked) = ask_to_write(&mock, &a, &id, &file, "allowed on b");
    assert_eq!(asked["call_id"], "c1");
    assert!(turn_active(&b, &id), "B sees the attempt waiting on A");
    let answer = |call_id: &str| {
        call(
            &b,
            "POST",
            &format!("/v1/sessions/{id}/permissions/{call_id}"),
            Some(json!({"decision": "allow"})),
        )
    };
    let (status, body) = answer("c2");
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("no_pending_permission"))
    );
    assert_eq!(answer("c1").0, 200);
    let ended = until(&frames, "end", &mut seen);
    assert_eq!(ended["status"], "completed", "{seen:#?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "allowed on b");
    let decided = kinds(&a, &id);
    assert!(
        decided.iter().any(|k| k == "permission_resolved"),
        "{decided:?}"
    );
}

/// Review finding 5: two users allowing the same question through different servers were
/// both told 200; only the answer that decided is, the other learns who decided.
#[test]
fn racing_answers_through_other_servers_get_one_200_and_the_rest_409() {
    let Some((fs, db, mock, dir)) = fs_team(
        "team_e2e::racing_answers_through_other_servers_get_one_200_and_the_rest_409",
        "racing_answers_through_other_servers",
    ) else {
        return;
    };
    let extra = [OsStr::new("--mcp-config"), fs.as_os_str()];
    let a = serve_with(&db.url, &mock, &extra);
    let others = [
        serve_with(&db.url, &mock, &extra),
        serve_with(&db.url, &mock, &extra),
    ];
    let id = new_session(&a);
    let file = dir.path().join("raced.txt");
    let (frames, mut seen, _) = ask_to_write(&mock, &a, &id, &file, "once");
    let path = format!("/v1/sessions/{id}/permissions/c1");
    let go = std::sync::Barrier::new(4);
    let answers: Vec<(u16, Value)> = thread::scope(|s| {
        let racers: Vec<_> = (0..4)
            .map(|i| {
                let (b, go, path) = (&others[i % 2], &go, &path);
                s.spawn(move || {
                    go.wait();
                    call(b, "POST", path, Some(json!({"decision": "allow"})))
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let accepted = answers.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!(accepted, 1, "{answers:#?}");
    for (status, body) in answers.iter().filter(|(status, _)| *status != 200) {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["error"], "already_decided", "{body}");
        assert_eq!(
            (&body["decision"], &body["by"]),
            (&json!("allow"), &json!("user"))
        );
    }
    let ended = until(&frames, "end", &mut seen);
    assert_eq!(ended["status"], "completed", "{seen:#?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "once");
}

#[test]
fn a_server_shut_down_mid_turn_releases_the_session_before_it_exits() {
    let mock = MockLlm::start(&[]);
    let Some((_db, mut a, b)) = pair("a_server_shut_down_mid_turn", &mock) else {
        return;
    };
    let id = new_session(&a);
    mock.script(slow_answer());
    let on_a = send_in_background(&a, &id, "write a lot");
    wait_for("a checkpoint", || {
        kinds(&b, &id).iter().any(|k| k == "pending_state")
    });
    let started = Instant::now();
    a.signal("-TERM");
    assert!(a.child.wait().unwrap().success());
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(end(&on_a.join().unwrap())["status"], "interrupted");
    // Released by the attempt's end, not by the database noticing a dead connection.
    assert!(!turn_active(&b, &id));
    let (_, _, frames) = stream(
        &b,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "go on"}),
    );
    assert_eq!(end(&frames)["status"], "completed", "{frames:?}");
}
