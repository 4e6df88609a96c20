//! `GET /v1/sessions/{id}` of a real server while an answer streams (SPEC §4): the running
//! attempt's checkpoints are one `streaming` item, and the same attempt is an `assistant`
//! item once it completes.

use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// `brain serve` on a free port; SIGKILLed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(db: &TempDb, provider: &str) -> Server {
        let (child, url) = spawn_serve(&mut serve_command(db, provider));
        Server { child, url }
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .new_agent()
    }

    fn get(&self, path: &str) -> Value {
        let body = Server::agent()
            .get(&format!("{}{path}", self.url))
            .call()
            .expect("GET")
            .into_body()
            .read_to_string()
            .expect("body");
        serde_json::from_str(&body).expect("json")
    }

    fn post(&self, path: &str, body: Value) -> Value {
        let body = Server::agent()
            .post(&format!("{}{path}", self.url))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .expect("POST")
            .into_body()
            .read_to_string()
            .expect("body");
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The items' kinds, leaving out the automatic title: it is written in the background
/// after the first answer, so whether it is there yet depends on timing.
fn kinds(transcript: &Value) -> Vec<String> {
    transcript["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["kind"].as_str().unwrap_or_default().to_owned())
        .filter(|k| k != "title")
        .collect()
}

/// A slow answer (100 words over ~10 s) streaming in a new session, once its first
/// checkpoint is written (after 2 s): the session, the words, the checkpoint's seq, and
/// the client's thread, which returns the stream's body.
struct Streaming {
    id: String,
    words: String,
    first_checkpoint: Value,
    client: std::thread::JoinHandle<Result<String, ureq::Error>>,
}

fn slow_answer_with_a_checkpoint(server: &Server, mock: &MockLlm) -> Streaming {
    let id = server.post("/v1/sessions", json!({}))["id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let words: String = (0..100).map(|i| format!("word{i} ")).collect();
    mock.script(json!({"kind": "stream", "text": words, "delay_ms": 100}));
    let url = format!("{}/v1/sessions/{id}/messages", server.url);
    let client = std::thread::spawn(move || {
        Server::agent()
            .post(&url)
            .header("Content-Type", "application/json")
            .send(json!({"message": "write a lot"}).to_string())
            .and_then(|r| r.into_body().read_to_string())
    });
    let until = Instant::now() + Duration::from_secs(30);
    let first_checkpoint = loop {
        let events = server.get(&format!("/v1/sessions/{id}/events"));
        let seq = events["events"]
            .as_array()
            .and_then(|es| es.iter().find(|e| e["kind"] == "pending_state"))
            .map(|e| e["seq"].clone());
        if let Some(seq) = seq {
            break seq;
        }
        assert!(Instant::now() < until, "no checkpoint was written");
        std::thread::sleep(Duration::from_millis(50));
    };
    Streaming {
        id,
        words,
        first_checkpoint,
        client,
    }
}

#[test]
fn a_running_answer_is_streaming_not_interrupted_and_then_the_answer() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let server = Server::start(&db, &mock.url);
    let Streaming {
        id,
        words,
        first_checkpoint,
        client,
    } = slow_answer_with_a_checkpoint(&server, &mock);

    let during = server.get(&format!("/v1/sessions/{id}"));
    assert_eq!(
        during["session"]["turn_active"], true,
        "the answer still streams"
    );
    assert_eq!(kinds(&during), ["user", "streaming"], "{during:#}");
    let streaming = &during["items"][1];
    assert_eq!(
        streaming["seq"], first_checkpoint,
        "at its first checkpoint"
    );
    assert_eq!(
        (&streaming["turn"], &streaming["attempt"]),
        (&json!(2), &json!(1))
    );
    let so_far = streaming["text"].as_str().expect("text");
    assert!(
        !so_far.is_empty() && words.starts_with(so_far),
        "{so_far:?}"
    );

    let body = client.join().expect("client").expect("stream");
    assert!(body.contains(r#""status":"completed""#), "{body}");
    let after = server.get(&format!("/v1/sessions/{id}"));
    assert_eq!(after["session"]["turn_active"], false);
    assert_eq!(kinds(&after), ["user", "assistant"], "{after:#}");
    let answer = &after["items"][1];
    assert_eq!(
        (&answer["turn"], &answer["attempt"]),
        (&json!(2), &json!(1))
    );
    assert_eq!(answer["text"], words);
}

/// Every interrupted answer says why it ended (SPEC §4, issue 16): stopped by the user, or
/// cut by the provider; the code sits in the last checkpoint, which may carry no text.
/// (A process killed mid-answer says nothing: see the SIGKILL test in `server.rs`.)
#[test]
fn interrupted_answers_say_whether_they_were_stopped_or_cut() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let server = Server::start(&db, &mock.url);
    // Stopped once a checkpoint holds some text.
    let Streaming { id, client, .. } = slow_answer_with_a_checkpoint(&server, &mock);
    server.post(&format!("/v1/sessions/{id}/stop"), json!({}));
    let body = client.join().expect("client").expect("stream");
    assert!(body.contains(r#""status":"interrupted""#), "{body}");

    // Cut by the provider after two chunks.
    mock.script(
        json!({"kind": "stream", "text": "alpha beta gamma delta", "chunks": 4, "cut_after": 3}),
    );
    // (the mock cuts the connection before its fourth frame: three pieces of text arrived)
    let url = format!("{}/v1/sessions/{id}/messages", server.url);
    let body = Server::agent()
        .post(&url)
        .header("Content-Type", "application/json")
        .send(json!({"message": "again"}).to_string())
        .and_then(|r| r.into_body().read_to_string())
        .expect("stream");
    assert!(body.contains(r#""status":"interrupted""#), "{body}");

    let transcript = server.get(&format!("/v1/sessions/{id}"));
    assert_eq!(
        kinds(&transcript),
        ["user", "interrupted", "user", "interrupted"],
        "{transcript:#}"
    );
    let ended = |i: usize| transcript["items"][i]["ended"]["code"].clone();
    assert_eq!(
        (ended(1), ended(3)),
        (json!("stopped"), json!("provider_cut"))
    );
    let cut = &transcript["items"][3];
    let partial = cut["text"].as_str().unwrap_or_default();
    assert!(
        !partial.is_empty() && partial.len() < 22 && "alpha beta gamma delta".starts_with(partial),
        "{cut:#}"
    );
    assert!(
        cut["ended"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{cut:#}"
    );
}
