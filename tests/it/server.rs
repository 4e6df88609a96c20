//! `brain serve` as a real process on 127.0.0.1: the API surface, hostile requests,
//! streaming, security, and real process deaths (SIGKILL, SIGTERM).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use brain::clock::Clock;
use brain::session::{Store, StoreOptions};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::support::*;

/// The brain binary serving `db`; SIGKILLed on drop unless it already exited.
pub struct Brain {
    pub child: Child,
    pub url: String,
    pub addr: String,
}

impl Brain {
    pub fn start(db: &TempDb, provider: &str, extra: &[&str]) -> Brain {
        let mut cmd = serve_command(db, provider);
        cmd.args(["--stream-idle-timeout", "5"]).args(extra);
        Brain::spawn(&mut cmd)
    }

    /// Any command that starts a server (its banner gives the URL).
    pub fn spawn(cmd: &mut Command) -> Brain {
        let (child, url) = spawn_serve(cmd);
        let addr = url.trim_start_matches("http://").to_owned();
        Brain { child, url, addr }
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    pub fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([sig, &self.pid()])
            .status()
            .unwrap();
    }
}

impl Drop for Brain {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .new_agent()
}

/// One JSON call: its status and body (Null when there is none).
pub fn call(b: &Brain, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let url = format!("{}{path}", b.url);
    let a = agent();
    let resp = match (method, body) {
        ("GET", _) => a.get(&url).call(),
        ("DELETE", _) => a.delete(&url).call(),
        (m, Some(body)) => {
            let r = match m {
                "PATCH" => a.patch(&url),
                _ => a.post(&url),
            };
            r.header("Content-Type", "application/json")
                .send(body.to_string())
        }
        (_, None) => a.post(&url).send_empty(),
    }
    .unwrap();
    let status = resp.status().as_u16();
    let text = resp.into_body().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// An SSE call: its status, `X-Session-Id`, and the frames' JSON.
pub fn stream(b: &Brain, path: &str, body: Value) -> (u16, Option<String>, Vec<Value>) {
    let resp = agent()
        .post(&format!("{}{path}", b.url))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap();
    read_frames(resp)
}

pub fn read_frames(resp: ureq::http::Response<ureq::Body>) -> (u16, Option<String>, Vec<Value>) {
    let status = resp.status().as_u16();
    let sid = resp
        .headers()
        .get("X-Session-Id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = resp.into_body().read_to_string().unwrap_or_default();
    let frames = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    (status, sid, frames)
}

pub fn new_session(b: &Brain) -> String {
    let (status, s) = call(b, "POST", "/v1/sessions", Some(json!({"title": "t"})));
    assert_eq!(status, 201, "{s}");
    s["id"].as_str().unwrap().to_owned()
}

/// Sends raw bytes; returns the status line's code and the body.
pub fn raw(b: &Brain, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(&b.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (code, body)
}

pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_api_surface() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    // Sessions sharing one updated_at, written before the server starts.
    let tied: Vec<String> = {
        let store = Store::open(
            &db.path(),
            StoreOptions {
                clock: Clock::manual(Timestamp::UNIX_EPOCH),
                ..StoreOptions::default()
            },
        )
        .unwrap();
        (0..5)
            .map(|_| {
                store
                    .create_session(Some("tied".into()), String::new())
                    .unwrap()
                    .id
                    .to_string()
            })
            .collect()
    };
    let b = Brain::start(&db, &mock.url, &[]);
    let (status, health) = call(&b, "GET", "/health", None);
    assert_eq!(
        (status, health["status"].as_str(), health["db"].as_str()),
        (200, Some("ok"), Some("ok"))
    );

    // Create: an empty object, and with title and system.
    let (status, plain) = call(&b, "POST", "/v1/sessions", Some(json!({})));
    assert_eq!(status, 201);
    assert_eq!(plain["title"], Value::Null);
    assert_eq!(plain["turn_active"], false);
    let (_, named) = call(
        &b,
        "POST",
        "/v1/sessions",
        Some(json!({"title": "Named", "system": "Be terse."})),
    );
    let id = named["id"].as_str().unwrap().to_owned();

    // Cursor paging with ties: every session once, in order.
    let mut seen = Vec::new();
    let mut path = "/v1/sessions?limit=2".to_owned();
    loop {
        let (status, page) = call(&b, "GET", &path, None);
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_owned()),
        );
        match page["next"].as_object() {
            Some(n) => {
                path = format!(
                    "/v1/sessions?limit=2&before={}&before_id={}",
                    n["before"].as_str().unwrap(),
                    n["before_id"].as_str().unwrap()
                )
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), 7);
    let mut tied_desc = tied.clone();
    tied_desc.sort();
    tied_desc.reverse();
    assert_eq!(
        &seen[2..],
        &tied_desc[..],
        "ties come back once each, by id descending"
    );

    // A conversation, then the transcript paged, events, context, search, usage.
    for q in [
        "first question about otters",
        "second question",
        "third question",
    ] {
        let (status, sid, frames) = stream(
            &b,
            &format!("/v1/sessions/{id}/messages"),
            json!({"message": q}),
        );
        assert_eq!(status, 200);
        assert_eq!(sid.as_deref(), Some(id.as_str()));
        assert_eq!(frames[0]["type"], "turn");
        assert_eq!(frames.last().unwrap()["type"], "end");
        assert_eq!(frames.last().unwrap()["status"], "completed");
    }
    let (_, page) = call(&b, "GET", &format!("/v1/sessions/{id}?limit=4"), None);
    let items = page["items"].as_array().unwrap();
    assert_eq!((items.len(), page["more"].as_bool()), (4, Some(true)));
    let oldest = items[0]["seq"].as_u64().unwrap();
    let (_, older) = call(
        &b,
        "GET",
        &format!("/v1/sessions/{id}?limit=4&before_seq={oldest}"),
        None,
    );
    assert_eq!(
        (
            older["items"].as_array().unwrap().len(),
            older["more"].as_bool()
        ),
        (2, Some(false))
    );
    let (_, events) = call(
        &b,
        "GET",
        &format!("/v1/sessions/{id}/events?after_seq=1&limit=2"),
        None,
    );
    let events = events["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["seq"], 2);
    assert_eq!(events[0]["payload"]["text"], "first question about otters");
    let (_, ctx) = call(&b, "GET", &format!("/v1/sessions/{id}/context"), None);
    assert_eq!(ctx["system"], "Be terse.");
    assert_eq!(ctx["messages"].as_array().unwrap().len(), 6);
    assert_eq!(
        (ctx["window"].as_u64(), ctx["trigger_tokens"].as_u64()),
        (Some(4096), Some(2457))
    );
    assert!(ctx["tokens"].as_u64().unwrap() > 0);
    assert_eq!(ctx["model"], "mock-model");
    let (_, hits) = call(&b, "GET", "/v1/search?q=otters", None);
    assert_eq!(hits["hits"][0]["session_id"], id);
    let hit = &hits["hits"][0];
    assert_eq!(
        (&hit["kind"], &hit["label"]),
        (&json!("user_message"), &json!("message"))
    );
    let snippet: Vec<char> = hit["snippet"].as_str().unwrap().chars().collect();
    let (from, to) = (
        hit["highlights"][0][0].as_u64().unwrap() as usize,
        hit["highlights"][0][1].as_u64().unwrap() as usize,
    );
    assert_eq!(snippet[from..to].iter().collect::<String>(), "otters");
    let (status, recent) = call(&b, "GET", "/v1/search?q=otters&order=recent", None);
    assert_eq!(status, 200);
    let recent = recent["hits"].as_array().unwrap();
    assert_eq!(recent.len(), hits["hits"].as_array().unwrap().len());
    let times: Vec<&str> = recent
        .iter()
        .map(|h| h["created_at"].as_str().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    let (_, usage) = call(&b, "GET", &format!("/v1/usage?session_id={id}"), None);
    assert_eq!(usage["by_purpose"]["chat"]["calls"], 3);
    let (_, all_usage) = call(&b, "GET", "/v1/usage", None);
    assert_eq!(all_usage["calls"], 3);
    let (_, models) = call(&b, "GET", "/v1/models", None);
    assert_eq!(models["chat_model"], "mock-model");
    assert_eq!(models["provider"]["status"], "ok");
    assert_eq!(
        models["models"][0],
        json!({"id": "mock-model", "window": 4096, "window_source": "llama.cpp meta.n_ctx",
            "paused": [], "tools": true})
    );

    // Rename and archive; archived filtering; delete.
    let (status, renamed) = call(
        &b,
        "PATCH",
        &format!("/v1/sessions/{id}"),
        Some(json!({"title": "Otters", "archived": true})),
    );
    assert_eq!(
        (
            status,
            renamed["title"].as_str(),
            renamed["archived"].as_bool()
        ),
        (200, Some("Otters"), Some(true))
    );
    let ids = |q: &str| -> Vec<String> {
        let (_, p) = call(&b, "GET", &format!("/v1/sessions?{q}"), None);
        p["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!ids("archived=exclude").contains(&id));
    assert_eq!(ids("archived=only"), vec![id.clone()]);
    assert!(ids("archived=include").contains(&id));
    assert_eq!(
        ids("query=otters"),
        vec![id.clone()],
        "a query includes archived sessions"
    );
    assert_eq!(
        call(&b, "DELETE", &format!("/v1/sessions/{id}"), None).0,
        204
    );
    assert_eq!(
        call(&b, "GET", &format!("/v1/sessions/{id}"), None).1["error"],
        "not_found"
    );
    let (_, after) = call(&b, "GET", "/v1/usage", None);
    assert_eq!(after["calls"], 3, "ledger rows outlive their session");
}

#[test]
fn health_is_degraded_but_200_when_the_provider_is_down() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let db = TempDb::new();
    let b = Brain::start(&db, &format!("http://127.0.0.1:{port}/v1"), &[]);
    let (status, h) = call(&b, "GET", "/health", None);
    assert_eq!(
        (status, h["status"].as_str(), h["provider"].as_str()),
        (200, Some("degraded"), Some("unreachable"))
    );
    let id = new_session(&b);
    let (status, _, frames) = stream(
        &b,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "hi"}),
    );
    assert_eq!(status, 200);
    let end = frames.last().unwrap();
    assert_eq!(
        (end["type"].as_str(), end["status"].as_str()),
        (Some("end"), Some("failed"))
    );
    let provider = format!("http://127.0.0.1:{port}/v1");
    let error = frames
        .iter()
        .find(|f| f["type"] == "error" && f["code"] == "provider_unreachable")
        .unwrap();
    // The message names where brain looked and how to change it.
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&provider) && message.contains("--provider-url"),
        "{message}"
    );
    let (_, transcript) = call(&b, "GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(transcript["items"][1]["message"], message);
    // The page learns the same from /v1/models, for its first-run banner.
    let (_, models) = call(&b, "GET", "/v1/models", None);
    assert_eq!(
        models["provider"],
        json!({"url": provider, "status": "unreachable"})
    );
}

#[test]
fn forty_hostile_requests_get_the_specs_codes_and_the_server_stays_healthy() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(
        &db,
        &mock.url,
        &["--max-body-bytes", "4096", "--max-message-bytes", "2048"],
    );
    let id = new_session(&b);
    let host = format!("Host: {}\r\n", b.addr);
    let req = |head: &str, body: &str| -> Vec<u8> {
        format!(
            "{head}\r\n{host}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let json_post = |path: &str, body: &str| -> Vec<u8> {
        format!(
            "POST {path} HTTP/1.1\r\n{host}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let s = format!("/v1/sessions/{id}");
    let huge = "x".repeat(5000);
    let long_message = json!({"message": "y".repeat(3000)}).to_string();
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (json_post("/v1/sessions", "{"), 400, "bad_request"),
        (json_post("/v1/sessions", "[1,2]"), 400, "bad_request"),
        (json_post("/v1/sessions", "\"str\""), 400, "bad_request"),
        (
            json_post("/v1/sessions", "{\"title\": 5}"),
            400,
            "bad_request",
        ),
        (
            json_post("/v1/sessions", "{\"title\": \"\"}"),
            400,
            "bad_request",
        ),
        (
            json_post("/v1/sessions", "{\"system\": []}"),
            400,
            "bad_request",
        ),
        (
            json_post(
                "/v1/sessions",
                &format!("{{\"title\": \"{}\"}}", "t".repeat(300)),
            ),
            400,
            "bad_request",
        ),
        (json_post("/v1/sessions", &huge), 413, "too_large"),
        (
            json_post(&format!("{s}/messages"), &long_message),
            413,
            "too_large",
        ),
        (
            json_post(&format!("{s}/messages"), "{}"),
            400,
            "bad_request",
        ),
        (
            json_post(&format!("{s}/messages"), "{\"message\": 42}"),
            400,
            "bad_request",
        ),
        (
            json_post(&format!("{s}/messages"), "{\"message\": \"   \"}"),
            400,
            "bad_request",
        ),
        (
            json_post(
                &format!("{s}/messages"),
                "{\"message\": \"hi\", \"model\": 7}",
            ),
            400,
            "bad_request",
        ),
        (
            json_post(&format!("{s}/messages"), "{\"message\": \"hi\"} trailing"),
            400,
            "bad_request",
        ),
        (
            req(
                "POST /v1/sessions HTTP/1.1\r\nContent-Type: text/plain",
                "{}",
            ),
            415,
            "unsupported_media_type",
        ),
        (
            req(
                "POST /v1/sessions HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded",
                "a=1",
            ),
            415,
            "unsupported_media_type",
        ),
        (
            req("POST /v1/sessions HTTP/1.1", "{}"),
            415,
            "unsupported_media_type",
        ),
        (
            req(
                &format!("PATCH {s} HTTP/1.1\r\nContent-Type: application/json"),
                "{}",
            ),
            400,
            "bad_request",
        ),
        (
            req(
                &format!("PATCH {s} HTTP/1.1\r\nContent-Type: application/json"),
                "{\"archived\": \"yes\"}",
            ),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/sessions/not-a-uuid HTTP/1.1", ""),
            404,
            "not_found",
        ),
        (
            req(
                "GET /v1/sessions/00000000-0000-0000-0000-000000000000 HTTP/1.1",
                "",
            ),
            404,
            "not_found",
        ),
        (
            req("GET /v1/sessions/..%2f..%2fetc%2fpasswd HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("DELETE /v1/sessions/123 HTTP/1.1", ""),
            404,
            "not_found",
        ),
        (
            req("GET /v1/sessions?before=2026-01-01T00:00:00Z HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req(&format!("GET /v1/sessions?before_id={id} HTTP/1.1"), ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/sessions?before=yesterday&before_id=x HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/sessions?limit=0 HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/sessions?limit=201 HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/sessions?limit=abc HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/sessions?limit=1&limit=2 HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/sessions?archived=maybe HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req(&format!("GET {s}?limit=1001 HTTP/1.1"), ""),
            400,
            "bad_request",
        ),
        (
            req(&format!("GET {s}/events?limit=0 HTTP/1.1"), ""),
            400,
            "bad_request",
        ),
        (
            req(
                &format!("GET {s}/events?after_seq=9223372036854775808 HTTP/1.1"),
                "",
            ),
            400,
            "bad_request",
        ),
        (
            req(
                &format!("GET {s}?before_seq=18446744073709551615 HTTP/1.1"),
                "",
            ),
            400,
            "bad_request",
        ),
        (req("GET /v1/search HTTP/1.1", ""), 400, "bad_query"),
        (
            req("GET /v1/search?q=%20%20 HTTP/1.1", ""),
            400,
            "bad_query",
        ),
        (
            req("GET /v1/search?q=NEAR(&syntax=fts HTTP/1.1", ""),
            400,
            "bad_query",
        ),
        (
            req("GET /v1/search?q=a&syntax=regex HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/search?q=a&limit=101 HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/search?q=a&order=oldest HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/search?q=a&stem=1 HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (
            req("GET /v1/usage?session_id=nope HTTP/1.1", ""),
            400,
            "bad_request",
        ),
        (req("GET /v1/nothing HTTP/1.1", ""), 404, "not_found"),
        (req("GET /etc/passwd HTTP/1.1", ""), 404, "not_found"),
        (
            req("PUT /v1/sessions HTTP/1.1", ""),
            405,
            "method_not_allowed",
        ),
        (
            req("DELETE /v1/sessions HTTP/1.1", ""),
            405,
            "method_not_allowed",
        ),
        (
            req(&format!("PUT {s} HTTP/1.1"), ""),
            405,
            "method_not_allowed",
        ),
        (
            req(&format!("GET {s}/stop HTTP/1.1"), ""),
            405,
            "method_not_allowed",
        ),
        (
            req(&format!("POST {s}/stop HTTP/1.1"), ""),
            404,
            "no_active_turn",
        ),
        (
            req(&format!("GET {s}/live HTTP/1.1"), ""),
            404,
            "no_active_turn",
        ),
        (
            req(&format!("POST {s}/retry HTTP/1.1"), ""),
            409,
            "nothing_to_retry",
        ),
        (
            req("GET /health HTTP/1.1\r\nHost: evil.example", ""),
            400,
            "bad_request",
        ),
        (
            b"GET /health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_vec(),
            403,
            "forbidden_host",
        ),
    ];
    assert!(cases.len() >= 40, "{}", cases.len());
    for (request, status, code) in &cases {
        let (got, body) = raw(&b, request);
        let shown = String::from_utf8_lossy(&request[..request.len().min(120)]).into_owned();
        assert_eq!(got, *status, "{shown}: {body}");
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("{shown}: not JSON: {body}"));
        assert_eq!(v["error"], *code, "{shown}");
        assert!(
            v["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{shown}"
        );
    }

    // A slow-loris client holds a connection with half its headers; others are served.
    let mut loris = TcpStream::connect(&b.addr).unwrap();
    loris.write_all(b"GET /health HTTP/1.1\r\nHost: ").unwrap();
    // A client that vanishes mid-body.
    let mut vanishing = TcpStream::connect(&b.addr).unwrap();
    vanishing
        .write_all(format!("POST /v1/sessions HTTP/1.1\r\n{host}Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"title\":").as_bytes())
        .unwrap();
    drop(vanishing);
    let (status, h) = call(&b, "GET", "/health", None);
    assert_eq!(
        (status, h["status"].as_str()),
        (200, Some("ok")),
        "healthy after all that"
    );
    drop(loris);
    let (_, list) = call(&b, "GET", "/v1/sessions", None);
    assert_eq!(
        list["sessions"].as_array().unwrap().len(),
        1,
        "nothing hostile created a session"
    );
}

#[test]
fn streaming_live_stop_retry_and_one_turn_at_a_time() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    let id = new_session(&b);
    mock.script(json!({"kind": "stream", "text": "one two three four five six", "delay_ms": 150}));
    let url = b.url.clone();
    let path = format!("/v1/sessions/{id}/messages");
    let first = std::thread::spawn(move || {
        let resp = agent()
            .post(&format!("{url}{path}"))
            .header("Content-Type", "application/json")
            .send(json!({"message": "count"}).to_string())
            .unwrap();
        read_frames(resp)
    });
    wait_for("the turn to start", || {
        call(&b, "GET", &format!("/v1/sessions/{id}"), None).1["session"]["turn_active"] == true
    });
    let (status, busy) = call(
        &b,
        "POST",
        &format!("/v1/sessions/{id}/messages"),
        Some(json!({"message": "again"})),
    );
    assert_eq!(
        (status, busy["error"].as_str()),
        (409, Some("turn_in_flight"))
    );
    assert_eq!(
        call(&b, "DELETE", &format!("/v1/sessions/{id}"), None).0,
        409
    );
    let live = agent()
        .get(&format!("{}/v1/sessions/{id}/live", b.url))
        .call()
        .unwrap();
    let (status, _, replay) = read_frames(live);
    let (_, _, original) = first.join().unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        replay, original,
        "/live replays the attempt from its start to its end"
    );
    let types: Vec<&str> = original
        .iter()
        .map(|f| f["type"].as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"turn"));
    assert_eq!(types.last(), Some(&"end"));
    assert_eq!(types.iter().filter(|t| **t == "end").count(), 1);

    // /stop ends a hanging attempt.
    mock.script(json!({"kind": "stream", "hang": true}));
    let url = b.url.clone();
    let path = format!("/v1/sessions/{id}/messages");
    let hanging = std::thread::spawn(move || {
        let resp = agent()
            .post(&format!("{url}{path}"))
            .header("Content-Type", "application/json")
            .send(json!({"message": "hang"}).to_string())
            .unwrap();
        read_frames(resp)
    });
    wait_for("the hanging turn", || {
        call(&b, "GET", &format!("/v1/sessions/{id}"), None).1["session"]["turn_active"] == true
    });
    let (status, _) = call(&b, "POST", &format!("/v1/sessions/{id}/stop"), None);
    assert_eq!(status, 202);
    let (_, _, frames) = hanging.join().unwrap();
    let end = frames.last().unwrap();
    assert_eq!(
        (end["type"].as_str(), end["status"].as_str()),
        (Some("end"), Some("failed"))
    );

    // /retry starts a new attempt of the same turn.
    let (status, _, frames) = stream(&b, &format!("/v1/sessions/{id}/retry"), json!({}));
    assert_eq!(status, 200);
    assert_eq!(frames[0]["attempt"], 2);
    assert_eq!(frames.last().unwrap()["status"], "completed");
}

pub fn slow_answer() -> Value {
    let words: Vec<String> = (0..60).map(|i| format!("word{i} ")).collect();
    json!({"kind": "stream", "text": words.concat(), "chunks": 60, "delay_ms": 100})
}

/// Starts a slow turn and waits until at least one checkpoint is in the database.
fn slow_turn_with_a_checkpoint(
    b: &Brain,
    mock: &MockLlm,
    db: &TempDb,
    id: &str,
) -> std::thread::JoinHandle<()> {
    mock.script(slow_answer());
    let url = format!("{}/v1/sessions/{id}/messages", b.url);
    let client = std::thread::spawn(move || {
        let _ = agent()
            .post(&url)
            .header("Content-Type", "application/json")
            .send(json!({"message": "write a lot"}).to_string())
            .map(|r| r.into_body().read_to_string());
    });
    wait_for("a checkpoint", || {
        db.raw()
            .query_row(
                "SELECT COUNT(*) FROM session_events WHERE kind = 'pending_state'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0)
            > 0
    });
    client
}

#[test]
fn sigkill_during_a_stream_keeps_the_message_and_the_partial_and_the_next_turn_sees_it() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let mut b = Brain::start(&db, &mock.url, &[]);
    let id = new_session(&b);
    let client = slow_turn_with_a_checkpoint(&b, &mock, &db, &id);
    b.child.kill().unwrap(); // SIGKILL
    b.child.wait().unwrap();
    let _ = client.join();
    let integrity: String = db
        .raw()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let b = Brain::start(&db, &mock.url, &[]); // the stale lock file does not stop it
    let (_, events) = call(&b, "GET", &format!("/v1/sessions/{id}/events"), None);
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds[1], "user_message");
    assert!(
        kinds[2..].iter().all(|k| *k == "pending_state") && kinds.len() > 2,
        "{kinds:?}"
    );
    // Nothing said why it ended: the transcript's `ended` is null (the UI: "brain stopped").
    let (_, transcript) = call(&b, "GET", &format!("/v1/sessions/{id}"), None);
    let partial = &transcript["items"][1];
    assert_eq!(partial["kind"], "interrupted");
    assert!(
        partial.get("ended").is_some_and(Value::is_null),
        "{partial}"
    );
    let (_, _, frames) = stream(
        &b,
        &format!("/v1/sessions/{id}/messages"),
        json!({"message": "go on"}),
    );
    assert_eq!(frames.last().unwrap()["status"], "completed");
    let sent = mock
        .requests()
        .into_iter()
        .rfind(|r| r["stream"] == true)
        .unwrap();
    let messages = sent["messages"].as_array().unwrap();
    let partial = messages[messages.len() - 2]["content"].as_str().unwrap();
    assert!(
        partial.starts_with("word0 ")
            && partial.ends_with("[this response was interrupted mid-stream; continue from it]"),
        "{partial}"
    );
    assert_eq!(messages.last().unwrap()["content"], "go on");
}

#[test]
fn sigterm_during_a_stream_exits_within_10_s_and_keeps_the_partial() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let mut b = Brain::start(&db, &mock.url, &[]);
    let id = new_session(&b);
    let client = slow_turn_with_a_checkpoint(&b, &mock, &db, &id);
    let started = Instant::now();
    b.signal("-TERM");
    let status = b.child.wait().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(status.success(), "{status:?}");
    let _ = client.join();
    assert!(!brain_lock(&db).exists(), "the lock file is removed");
    let store = Store::open(&db.path(), StoreOptions::default()).unwrap();
    let sid = id.parse().unwrap();
    let kinds: Vec<String> = store
        .events(sid, 1, None)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("user_message"));
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("pending_state"),
        "{kinds:?}"
    );
    let last = store.events(sid, 1, None).unwrap().pop().unwrap();
    let payload: Value = serde_json::from_str(&last.payload).unwrap();
    assert_eq!(payload["ended"]["code"], "shutdown", "{payload}");
}

fn brain_lock(db: &TempDb) -> std::path::PathBuf {
    let mut p = db.path().into_os_string();
    p.push(".lock");
    p.into()
}

#[test]
fn security_host_origin_token_and_public_listen() {
    let mock = MockLlm::start(&[]);
    let db = TempDb::new();
    let b = Brain::start(&db, &mock.url, &[]);
    assert!(brain_lock(&db).exists());
    assert!(
        std::fs::read_to_string(brain_lock(&db))
            .unwrap()
            .starts_with(&b.url),
        "the lock holds the URL"
    );
    let post = |origin: Option<&str>, host: &str| -> (u16, String) {
        let origin = origin
            .map(|o| format!("Origin: {o}\r\n"))
            .unwrap_or_default();
        raw(&b, format!("POST /v1/sessions HTTP/1.1\r\nHost: {host}\r\n{origin}Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}").as_bytes())
    };
    let own = b.addr.clone();
    assert_eq!(post(None, &own).0, 201, "no Origin: a program");
    assert_eq!(
        post(Some(&format!("http://{own}")), &own).0,
        201,
        "same origin"
    );
    let (status, body) = post(Some("http://evil.example"), &own);
    assert_eq!(status, 403);
    assert!(body.contains("forbidden_origin"));
    let (status, body) = post(None, "evil.example:80");
    assert_eq!(status, 403);
    assert!(body.contains("forbidden_host"));
    // A second server on the same database is refused while the first holds it.
    let second = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(db.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--provider-url",
            &mock.url,
        ])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains(&b.url),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );

    // A public address without a token is refused at startup.
    let public = Command::new(env!("CARGO_BIN_EXE_brain"))
        .arg("--db")
        .arg(TempDb::new().path())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(public.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&public.stderr).contains("--api-token"));

    // With a token: /v1 needs it; /health does not; any Host is fine.
    let db2 = TempDb::new();
    let t = Brain::start(&db2, &mock.url, &["--api-token", "s3cret"]);
    let get = |auth: &str| {
        raw(
            &t,
            format!(
                "GET /v1/sessions HTTP/1.1\r\nHost: my-box:7420\r\n{auth}Connection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .0
    };
    assert_eq!(get(""), 401);
    assert_eq!(get("Authorization: Bearer wrong\r\n"), 401);
    assert_eq!(get("Authorization: Bearer s3cret\r\n"), 200);
    let (status, _) = raw(
        &t,
        b"GET /health HTTP/1.1\r\nHost: my-box:7420\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200);
    // The icon a browser fetches on its own, without the page's token.
    let (status, icon) = raw(
        &t,
        b"GET /favicon.ico HTTP/1.1\r\nHost: my-box:7420\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200);
    assert!(icon.starts_with("<svg"), "{icon}");
}
