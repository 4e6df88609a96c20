//! What the server says about its provider, and that a hung provider cannot starve it
//! (I10): `/health` answers from what the last provider call or probe saw, within a short
//! budget, and the model listing is fetched once at a time, outside any lock, with failures
//! remembered briefly. Against `brain serve` as a real process and `mock_llm`'s faults.

use std::process::Child;
use std::time::{Duration, Instant};

use brain::provider::{
    ChatRequest, ChatRole, Provider, ProviderConfig, ProviderError, StreamEvent,
};
use serde_json::{Value, json};

use crate::support::{MockLlm, TempDb, serve_command, spawn_serve};

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        system: String::new(),
        messages: vec![(ChatRole::User, text.into())],
        max_tokens: None,
        temperature: None,
        tools: vec![],
        tool_choice_none: false,
        steps: vec![],
    }
}

/// A stream's text, or its error.
fn chat(p: &Provider, text: &str) -> Result<String, ProviderError> {
    let mut out = String::new();
    for ev in p.stream_chat(&ask(text)) {
        if let StreamEvent::Text(t) = ev? {
            out.push_str(&t);
        }
    }
    Ok(out)
}

/// `brain serve` on a free port with `provider` as its provider; killed on drop.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(db: &TempDb, provider: &str) -> Serve {
        let (child, url) = spawn_serve(&mut serve_command(db, provider));
        Serve { child, url }
    }

    /// A GET with a client deadline well past what the test allows, so a slow answer shows
    /// as a slow answer rather than a transport error.
    fn get(&self, path: &str) -> (u16, Value, Duration) {
        let started = Instant::now();
        let resp = agent()
            .get(&format!("{}{path}", self.url))
            .call()
            .unwrap_or_else(|e| panic!("GET {path} after {:?}: {e}", started.elapsed()));
        let status = resp.status().as_u16();
        let text = resp.into_body().read_to_string().unwrap_or_default();
        let took = started.elapsed();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::Null),
            took,
        )
    }

    fn health(&self) -> Value {
        let (status, h, _) = self.get("/health");
        assert_eq!(status, 200, "{h}");
        h
    }

    /// One turn in a new session; the SSE body's frames.
    fn turn(&self, message: &str) -> Vec<Value> {
        let a = agent();
        let resp = a
            .post(&format!("{}/v1/sessions", self.url))
            .header("Content-Type", "application/json")
            .send("{}")
            .expect("create session");
        let session: Value =
            serde_json::from_str(&resp.into_body().read_to_string().expect("body")).expect("json");
        let id = session["id"].as_str().expect("session id");
        let resp = a
            .post(&format!("{}/v1/sessions/{id}/messages", self.url))
            .header("Content-Type", "application/json")
            .send(json!({ "message": message }).to_string())
            .expect("send");
        let text = resp.into_body().read_to_string().unwrap_or_default();
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .new_agent()
}

/// Polls `f` until it holds, for at most `deadline`.
fn wait_for(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + deadline;
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SPEC I10: `/health` within a second. A deadline with slack, not a benchmark.
const HEALTH_DEADLINE: Duration = Duration::from_secs(1);

#[test]
fn a_hanging_model_listing_starves_neither_health_nor_other_requests() {
    let mock = MockLlm::start(&[]);
    mock.models_mode("hang");
    let db = TempDb::new();
    let serve = Serve::start(&db, &mock.url);
    std::thread::scope(|s| {
        let healths: Vec<_> = (0..10).map(|_| s.spawn(|| serve.get("/health"))).collect();
        let sessions = s.spawn(|| serve.get("/v1/sessions"));
        for h in healths {
            let (status, body, took) = h.join().expect("health thread");
            assert_eq!(status, 200);
            assert!(took < HEALTH_DEADLINE, "/health took {took:?}");
            assert_eq!(
                (
                    &body["status"],
                    &body["provider"],
                    &body["db"],
                    &body["tools"]
                ),
                (
                    &json!("degraded"),
                    &json!("unreachable"),
                    &json!("ok"),
                    &json!("off")
                ),
                "nothing has answered yet: {body}"
            );
            assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
        }
        let (status, _, took) = sessions.join().expect("sessions thread");
        assert_eq!(status, 200);
        assert!(took < HEALTH_DEADLINE, "GET /v1/sessions took {took:?}");
    });
    // The listing itself: a bounded wait, then what is known (nothing yet).
    let (status, models, took) = serve.get("/v1/models");
    assert_eq!((status, &models["models"]), (200, &json!([])), "{models}");
    assert!(
        took < Duration::from_secs(5),
        "GET /v1/models took {took:?}"
    );
    assert!(
        mock.stats()["models_calls"].as_u64().unwrap_or(0) <= 2,
        "one listing in flight at a time: {}",
        mock.stats()
    );
}

#[test]
fn health_reports_the_provider_going_down_and_coming_back() {
    let mock = MockLlm::start(&[]);
    let port = mock.port().to_string();
    let db = TempDb::new();
    let serve = Serve::start(&db, &mock.url);
    assert_eq!(serve.health()["provider"], "ok");
    assert_eq!(serve.get("/v1/models").1["chat_model"], "mock-model");

    drop(mock);
    let frames = serve.turn("hello?");
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "error" && f["code"] == "provider_unreachable"),
        "{frames:?}"
    );
    let h = serve.health();
    assert_eq!(
        (&h["status"], &h["provider"]),
        (&json!("degraded"), &json!("unreachable")),
        "the next /health after a failed chat: {h}"
    );
    // The listing is still known while the provider is away.
    assert_eq!(serve.get("/v1/models").1["chat_model"], "mock-model");

    let mock = MockLlm::start(&["--port", &port]);
    wait_for(
        "/health to see the provider back",
        Duration::from_secs(30),
        || serve.health()["provider"] == "ok",
    );
    assert_eq!(serve.health()["status"], "ok");
    let frames = serve.turn("and now?");
    assert_eq!(
        frames.last().map(|f| &f["status"]),
        Some(&json!("completed"))
    );

    // Down again, and no turn to notice: a probe does, well before the listing expires.
    drop(mock);
    wait_for(
        "a probe to see the provider gone",
        Duration::from_secs(15),
        || serve.health()["provider"] == "unreachable",
    );
}

#[test]
fn one_listing_fetch_at_a_time_and_nobody_waits_past_their_bound() {
    let mock = MockLlm::start(&[]);
    mock.models_mode("hang");
    let p = Provider::new(ProviderConfig::new(&mock.url));
    let bound = Duration::from_millis(300);
    std::thread::scope(|s| {
        let callers: Vec<_> = (0..10)
            .map(|_| {
                s.spawn(|| {
                    let started = Instant::now();
                    (p.models_within(bound), started.elapsed())
                })
            })
            .collect();
        for c in callers {
            let (result, took) = c.join().expect("caller");
            assert_eq!(result, Err(ProviderError::Timeout(bound)));
            assert!(took < Duration::from_secs(2), "waited {took:?}");
        }
    });
    let started = Instant::now();
    assert!(
        !p.reachable(Duration::from_millis(250)),
        "nothing answered yet"
    );
    assert!(started.elapsed() < HEALTH_DEADLINE);
    // A chat is not held up by the hung listing, and its answer is what health reports.
    assert!(chat(&p, "hi").expect("a chat").starts_with("mock answer"));
    assert!(p.reachable(Duration::from_millis(250)));
    assert_eq!(mock.stats()["models_calls"], 1, "{}", mock.stats());
}

#[test]
fn reachable_is_what_the_last_call_saw() {
    let mock = MockLlm::start(&[]);
    let port = mock.port().to_string();
    let mut cfg = ProviderConfig::new(&mock.url);
    cfg.probe_after = Duration::from_secs(3600);
    let p = Provider::new(cfg);
    let wait = Duration::from_secs(5);
    chat(&p, "hi").expect("a chat");
    assert!(p.reachable(wait));
    drop(mock);
    assert!(p.reachable(wait), "nothing has asked since");
    let e = p
        .complete(&ask("summarise"), Duration::from_secs(5))
        .expect_err("down");
    assert!(matches!(e, ProviderError::Unreachable(_)), "{e:?}");
    assert!(!p.reachable(wait), "the failed call is the latest word");
    let _mock = MockLlm::start(&["--port", &port]);
    assert!(!p.reachable(wait), "no probe within probe_after");
    chat(&p, "back?").expect("a chat");
    assert!(p.reachable(wait));
}

#[test]
fn a_stale_observation_is_probed() {
    let mock = MockLlm::start(&[]);
    let port = mock.port().to_string();
    let mut cfg = ProviderConfig::new(&mock.url);
    cfg.probe_after = Duration::ZERO;
    let p = Provider::new(cfg);
    let wait = Duration::from_secs(5);
    assert!(p.reachable(wait), "a probe answered");
    drop(mock);
    assert!(!p.reachable(wait), "a probe was refused");
    let mock = MockLlm::start(&["--port", &port]);
    assert!(p.reachable(wait), "a probe answered again");
    mock.models_mode("fail");
    assert!(
        !p.reachable(wait),
        "a listing that answers 500 is not a provider that works"
    );
}
