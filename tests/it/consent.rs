//! Permission questions end to end (SPEC §13, I9; issue 27): a real `brain serve`, mock_llm
//! asking for calls and tests/mcp/stand_in.py's `ask` tool, which needs consent. A call id
//! repeated across turns keeps each turn's own decision; a kill while a question waits
//! leaves it decided `by: restart` at the next start; racing answers get one 200 and 409s
//! naming the decision that stands; a decision the log could not take is not told to
//! later answers.

use std::sync::{Arc, Barrier};

use serde_json::{Value, json};

use crate::server::agent;
use crate::support::*;
use crate::tools_faults::{Stand, log, serve, turn};
use crate::tools_loop::{call_url, session, stream, until};

/// A call with no id: brain names it `call_0`, in every turn.
fn ask_without_id() -> Value {
    json!({"name": "s__ask", "arguments": "{}"})
}

/// A POST answering `call_id`: its status and body.
fn answer(url: &str, id: &str, call_id: &str, decision: &str) -> (u16, Value) {
    let resp = agent()
        .post(&format!("{url}/v1/sessions/{id}/permissions/{call_id}"))
        .header("Content-Type", "application/json")
        .send(json!({"decision": decision}).to_string())
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().read_to_string().unwrap();
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// The transcript's permission items as (call id, decision, by).
fn questions(items: &Value) -> Vec<(Value, Value, Value)> {
    items
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "permission")
        .map(|i| (i["call_id"].clone(), i["decision"].clone(), i["by"].clone()))
        .collect()
}

fn transcript(url: &str, id: &str, query: &str) -> Value {
    let (status, v) = call_url(url, &format!("/v1/sessions/{id}{query}"));
    assert_eq!(status, 200, "{v}");
    v["items"].clone()
}

fn resolutions(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "permission_resolved")
        .map(|e| &e["payload"])
        .collect()
}

/// Starts a turn whose model asks for `s__ask` without an id, then answers; returns the
/// frames and waits for the question.
fn ask(url: &str, mock: &MockLlm, id: &str, message: &str) -> std::sync::mpsc::Receiver<Value> {
    mock.script(json!([
        {"kind": "stream", "tool_calls": [ask_without_id()]},
        {"kind": "stream", "text": "Done."},
    ]));
    let frames = stream(
        url,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": message}),
    );
    let mut seen = Vec::new();
    let asked = until(&frames, "permission", &mut seen);
    assert_eq!(asked["call_id"], "call_0", "{seen:#?}");
    frames
}

#[test]
fn a_call_id_repeated_across_turns_shows_each_turns_own_decision() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config("echo,ask", None), &[]);
    let id = session(&b.url);
    for (message, decision) in [("first", "deny"), ("second", "allow")] {
        let frames = ask(&b.url, &mock, &id, message);
        assert_eq!(answer(&b.url, &id, "call_0", decision).0, 200);
        let mut seen = Vec::new();
        let end = until(&frames, "end", &mut seen);
        assert_eq!(end["status"], "completed", "{seen:#?}");
    }
    let by_user = |d: &str| (json!("call_0"), json!(d), json!("user"));
    let want = vec![by_user("deny"), by_user("allow")];
    assert_eq!(questions(&transcript(&b.url, &id, "")), want);
    // A page holding only the first question pairs it with its own answer too.
    let events = log(&b.url, &id);
    let first_answer = events
        .iter()
        .find(|e| e["kind"] == "permission_resolved")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let page = transcript(&b.url, &id, &format!("?before_seq={}", first_answer + 1));
    assert_eq!(questions(&page), want[..1]);
    // The log names each answer's attempt.
    let turns: Vec<u64> = events
        .iter()
        .filter(|e| e["kind"] == "user_message")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let named: Vec<(Value, Value)> = resolutions(&events)
        .iter()
        .map(|r| (r["turn"].clone(), r["attempt"].clone()))
        .collect();
    assert_eq!(
        named,
        [(json!(turns[0]), json!(1)), (json!(turns[1]), json!(1))]
    );
    // So do `brain sessions show` and the tools it remembers (nothing: no `remember`).
    let out = run_brain_on(&db, &["sessions", "show", &id], b"");
    let shown = String::from_utf8_lossy(&out.stdout);
    let deny = shown.find("call_0): deny by user").unwrap_or(usize::MAX);
    let allow = shown.find("call_0): allow by user").unwrap_or(0);
    assert!(deny < allow, "{shown}");
}

#[test]
fn racing_answers_get_one_200_and_409s_naming_the_decision_that_stands() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config("echo,ask", None), &[]);
    let id = session(&b.url);
    let frames = ask(&b.url, &mock, &id, "race");
    let racers = 16;
    let start = Arc::new(Barrier::new(racers));
    let answers: Vec<_> = (0..racers)
        .map(|i| {
            let (url, id, start) = (b.url.clone(), id.clone(), Arc::clone(&start));
            let decision = if i % 2 == 0 { "allow" } else { "deny" };
            std::thread::spawn(move || {
                start.wait();
                (decision, answer(&url, &id, "call_0", decision))
            })
        })
        .collect();
    let answers: Vec<(&str, (u16, Value))> =
        answers.into_iter().map(|h| h.join().unwrap()).collect();
    let won: Vec<&str> = answers
        .iter()
        .filter(|(_, (status, _))| *status == 200)
        .map(|(d, _)| *d)
        .collect();
    assert_eq!(won.len(), 1, "{answers:#?}");
    for (_, (status, body)) in answers.iter().filter(|(_, (s, _))| *s != 200) {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["error"], "already_decided", "{body}");
        assert_eq!(
            (&body["decision"], &body["by"]),
            (&json!(won[0]), &json!("user"))
        );
    }
    let mut seen = Vec::new();
    until(&frames, "end", &mut seen);
    let events = log(&b.url, &id);
    let resolved = resolutions(&events);
    assert_eq!(resolved.len(), 1, "{resolved:#?}");
    assert_eq!(resolved[0]["decision"], won[0]);
    // A late answer, once the attempt has ended, is told the same.
    let (status, body) = answer(&b.url, &id, "call_0", "deny");
    assert_eq!((status, &body["error"]), (409, &json!("already_decided")));
    // A call nobody asked about is still 404.
    assert_eq!(answer(&b.url, &id, "call_9", "deny").0, 404);
}

#[test]
fn an_answer_after_the_timeout_decided_is_told_the_timeout_stands() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(
        &db,
        &mock,
        &stand.config("echo,ask", None),
        &["--permission-timeout", "1"],
    );
    let id = session(&b.url);
    let frames = ask(&b.url, &mock, &id, "too slow");
    let mut seen = Vec::new();
    until(&frames, "permission_resolved", &mut seen);
    let (status, body) = answer(&b.url, &id, "call_0", "allow");
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        (&body["error"], &body["decision"], &body["by"]),
        (&json!("already_decided"), &json!("deny"), &json!("timeout"))
    );
    until(&frames, "end", &mut seen);
    assert_eq!(resolutions(&log(&b.url, &id)).len(), 1);
}

/// A new session on a server on `db`, SIGKILLed while its question waits; its id.
fn killed_while_asking(db: &TempDb, mock: &MockLlm, config: &std::path::Path) -> String {
    let mut b = serve(db, mock, config, &[]);
    let id = session(&b.url);
    let _frames = ask(&b.url, mock, &id, "ask, then die");
    b.child.kill().unwrap(); // SIGKILL
    b.child.wait().unwrap();
    id
}

#[test]
fn sigkill_while_a_question_waits_leaves_it_denied_by_restart_at_the_next_start() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let config = stand.config("echo,ask", None);
    let id = killed_while_asking(&db, &mock, &config);
    let to_check = || -> i64 {
        db.raw()
            .query_row("SELECT COUNT(*) FROM questions_to_check", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(
        to_check(),
        1,
        "the question is filed for the next start to check"
    );
    let b = serve(&db, &mock, &config, &[]);
    let events = log(&b.url, &id);
    let resolved = resolutions(&events);
    assert_eq!(resolved.len(), 1, "{events:#?}");
    assert_eq!(
        (&resolved[0]["decision"], &resolved[0]["by"]),
        (&json!("deny"), &json!("restart"))
    );
    let asked = events
        .iter()
        .find(|e| e["kind"] == "permission_requested")
        .unwrap();
    assert_eq!(resolved[0]["turn"], asked["payload"]["turn"]);
    assert_eq!(
        questions(&transcript(&b.url, &id, "")),
        [(json!("call_0"), json!("deny"), json!("restart"))]
    );
    // Answering it now is told what stands, not 404.
    let (status, body) = answer(&b.url, &id, "call_0", "allow");
    assert_eq!((status, &body["by"]), (409, &json!("restart")), "{body}");
    let out = run_brain_on(&db, &["sessions", "show", &id], b"");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("deny by restart (brain restarted before anyone answered)"),
        "{shown}"
    );
    // The next send works, and a second start finds nothing left to close.
    mock.script(json!({"kind": "stream", "text": "Back."}));
    let (end, seen) = turn(&b.url, &id, "again");
    assert_eq!(end["status"], "completed", "{seen:#?}");
    drop(b);
    let b = serve(&db, &mock, &config, &[]);
    assert_eq!(resolutions(&log(&b.url, &id)).len(), 1);
    assert_eq!(to_check(), 0, "each start removed what it checked");
}

/// Team mode (SPEC §16): a server that starts while another one's attempt waits on a
/// question leaves that question alone (the other server holds the session); answers
/// racing through both servers get one 200, the loser a 409 naming the winner; a question
/// whose server was SIGKILLed is closed by the next server that starts.
#[test]
fn in_a_team_a_start_closes_only_questions_no_server_runs_and_a_race_across_servers_has_one_winner()
{
    let Some(pg) = crate::testdb::fresh("consent_team_questions") else {
        return;
    };
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let config = stand.config("echo,ask", None);
    let extra = [std::ffi::OsStr::new("--mcp-config"), config.as_os_str()];
    let mut a = crate::team_e2e::serve_with(&pg.url, &mock, &extra);
    let id = session(&a.url);
    let frames = ask(&a.url, &mock, &id, "ask on a");
    let mut seen = Vec::new();
    // B starts while A's attempt waits: A's question is not B's to close.
    let b = crate::team_e2e::serve_with(&pg.url, &mock, &extra);
    assert!(resolutions(&log(&b.url, &id)).is_empty());
    let start = Arc::new(Barrier::new(2));
    let racers: Vec<_> = [(a.url.clone(), "allow"), (b.url.clone(), "deny")]
        .into_iter()
        .map(|(url, decision)| {
            let (id, start) = (id.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                (decision, answer(&url, &id, "call_0", decision))
            })
        })
        .collect();
    let answers: Vec<(&str, (u16, Value))> =
        racers.into_iter().map(|h| h.join().unwrap()).collect();
    let won: Vec<&str> = answers
        .iter()
        .filter(|(_, (s, _))| *s == 200)
        .map(|(d, _)| *d)
        .collect();
    assert_eq!(won.len(), 1, "{answers:#?}");
    let lost = answers.iter().find(|(_, (s, _))| *s != 200).unwrap();
    assert_eq!(lost.1.0, 409, "{answers:#?}");
    assert_eq!(lost.1.1["decision"], won[0], "{answers:#?}");
    until(&frames, "end", &mut seen);
    let resolved = resolutions(&log(&b.url, &id)).len();
    assert_eq!(resolved, 1);
    // A is killed while its next question waits; B, running all along, leaves it (it
    // recovers only at its start), and the next server to start closes it.
    let _frames = ask(&a.url, &mock, &id, "ask again");
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let c = crate::team_e2e::serve_with(&pg.url, &mock, &extra);
    let events = log(&c.url, &id);
    let last = resolutions(&events).pop().cloned().unwrap();
    assert_eq!(
        (&last["decision"], &last["by"]),
        (&json!("deny"), &json!("restart"))
    );
    assert_eq!(resolutions(&events).len(), 2);
    drop(b);
}

/// An in-process `brain chat` starts an engine too: it closes what a kill left waiting.
#[test]
fn an_in_process_chat_closes_a_question_a_killed_server_left_waiting() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let config = stand.config("echo,ask", None);
    let id = killed_while_asking(&db, &mock, &config);
    let out = run_brain_on(&db, &["chat", "--provider-url", &mock.url], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = brain::session::Store::open(&db.path(), Default::default()).unwrap();
    let resolved: Vec<Value> = store
        .events(id.parse().unwrap(), 0, None)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "permission_resolved")
        .map(|e| serde_json::from_str(&e.payload).unwrap())
        .collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["by"], "restart");
}

/// Review finding 4: when the log cannot take the decision (here another process holds the
/// write lock past the busy timeout), no later answer may be told that decision stands.
#[test]
fn a_decision_the_log_could_not_take_is_not_told_to_later_answers() {
    let mock = MockLlm::start(&[]);
    let stand = Stand::new();
    let db = TempDb::new();
    let b = serve(&db, &mock, &stand.config("echo,ask", None), &[]);
    let id = session(&b.url);
    let frames = ask(&b.url, &mock, &id, "ask me");
    let blocker = rusqlite::Connection::open(db.path()).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    assert_eq!(answer(&b.url, &id, "call_0", "allow").0, 200);
    // While the append waits out the 5 s busy timeout, the decision is being written and
    // later answers are told it stands; once the append has failed they must not be. The
    // lock is held past that (the attempt's end then waits on it too).
    let held_until = std::time::Instant::now() + std::time::Duration::from_secs(9);
    let mut later = Vec::new();
    let freed = loop {
        let (status, body) = answer(&b.url, &id, "call_0", "deny");
        later.push((status, body));
        if status != 409 {
            break true;
        }
        if std::time::Instant::now() > held_until {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    blocker.execute_batch("COMMIT").unwrap();
    let mut seen = Vec::new();
    let end = until(&frames, "end", &mut seen);
    let events = log(&b.url, &id);
    let recorded: Vec<Value> = resolutions(&events)
        .iter()
        .map(|r| r["decision"].clone())
        .collect();
    assert!(freed, "a failed decision still stood: {later:?}");
    let (status, body) = later.last().unwrap();
    assert_eq!(
        (*status, &body["error"]),
        (404, &json!("no_pending_permission"))
    );
    assert!(recorded.is_empty(), "{recorded:?}");
    assert_ne!(end["status"], "completed", "{seen:#?}");
}
