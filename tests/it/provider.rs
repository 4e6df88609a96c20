//! The provider client against `examples/mock_llm` running as a real process: streams,
//! usage, every fault as its typed error, listings and windows, cache accounting.

use std::time::{Duration, Instant};

use brain::provider::client::api_key_from_env;
use brain::provider::{
    ChatRequest, ChatRole, Provider, ProviderConfig, ProviderError, StreamEvent,
};
use brain::session::events::Usage;
use serde_json::json;

use crate::support::MockLlm;

fn provider(mock: &MockLlm) -> Provider {
    let mut cfg = ProviderConfig::new(&mock.url);
    cfg.first_token_timeout = Duration::from_secs(5);
    cfg.idle_timeout = Duration::from_secs(5);
    Provider::new(cfg)
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        system: "You are a test.".into(),
        messages: vec![(ChatRole::User, text.into())],
        max_tokens: None,
        temperature: None,
        tools: vec![],
        tool_choice_none: false,
        steps: vec![],
    }
}

/// Everything a stream gave: text, reasoning, usage, finish reason, and its error.
#[derive(Debug, Default)]
struct Collected {
    text: String,
    reasoning: String,
    usage: Option<Usage>,
    finish: Option<String>,
    error: Option<ProviderError>,
    text_events: usize,
}

fn collect(stream: impl Iterator<Item = Result<StreamEvent, ProviderError>>) -> Collected {
    let mut c = Collected::default();
    for ev in stream {
        match ev {
            Ok(StreamEvent::Text(t)) => {
                c.text.push_str(&t);
                c.text_events += 1;
            }
            Ok(StreamEvent::Reasoning(r)) => c.reasoning.push_str(&r),
            Ok(StreamEvent::Usage(u)) => c.usage = Some(u),
            Ok(StreamEvent::Finish(f)) => c.finish = Some(f),
            Ok(StreamEvent::ToolCalls(_)) => {}
            Err(e) => {
                assert!(c.error.is_none(), "one error ends a stream");
                c.error = Some(e);
            }
        }
    }
    c
}

#[test]
fn a_normal_stream_gives_text_usage_and_finish_reason() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!({"text": "The quick brown fox.", "chunks": 4}));
    let c = collect(p.stream_chat(&ask("hello")));
    assert_eq!(c.error, None);
    assert_eq!(c.text, "The quick brown fox.");
    assert_eq!(c.text_events, 4);
    assert_eq!(c.finish.as_deref(), Some("stop"));
    let u = c.usage.expect("usage");
    assert_eq!(u.output_tokens, 4);
    assert_eq!(
        u.input_tokens + u.cache_read_tokens,
        9,
        "<|system|> 4 words <|end|> <|user|> hello <|end|>"
    );
    let sent = &mock.requests()[0];
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"]["include_usage"], true);
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "You are a test."})
    );
}

#[test]
fn cached_prefix_shows_as_cache_reads_and_input_excludes_them() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    let first = collect(p.stream_chat(&ask("one two three"))).usage.unwrap();
    assert_eq!(first.cache_read_tokens, 0);
    let mut follow_up = ask("one two three");
    follow_up
        .messages
        .push((ChatRole::Assistant, "four".into()));
    follow_up.messages.push((ChatRole::User, "five six".into()));
    let second = collect(p.stream_chat(&follow_up)).usage.unwrap();
    // The whole first prompt is the head of the second, so all of it counts as cached.
    assert_eq!(second.cache_read_tokens, first.input_tokens);
    assert_eq!(
        second.input_tokens, 7,
        "<|assistant|> four <|end|> <|user|> five six <|end|>"
    );
}

#[test]
fn reasoning_fields_and_think_blocks_become_reasoning() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!([
        {"reasoning": "let me think", "text": "answer one"},
        {"reasoning": "inner thoughts", "think": true, "text": "answer two", "chunks": 7},
        {"reasoning": "only thinking", "text": ""},
    ]));
    let a = collect(p.stream_chat(&ask("q")));
    assert_eq!(
        (a.reasoning.as_str(), a.text.as_str()),
        ("let me think", "answer one")
    );
    let b = collect(p.stream_chat(&ask("q")));
    assert_eq!(
        (b.reasoning.as_str(), b.text.as_str()),
        ("inner thoughts", "answer two")
    );
    let c = collect(p.stream_chat(&ask("q")));
    assert_eq!(
        (c.reasoning.as_str(), c.text.as_str(), c.error),
        ("only thinking", "", None)
    );
    assert_eq!(c.finish.as_deref(), Some("stop"));
}

#[test]
fn http_errors_keep_their_body_and_say_if_retrying_may_help() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!([
        {"status": 500, "text": "the model crashed"},
        {"status": 400, "text": "exceed_context_size_error"},
        {"status": 429, "text": "slow down"},
    ]));
    let expect = |status: u16, needle: &str, retryable: bool| {
        let e = collect(p.stream_chat(&ask("q"))).error.expect("an error");
        match &e {
            ProviderError::Http { status: s, body } => {
                assert_eq!(*s, status);
                assert!(body.contains(needle), "{body}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(e.retryable(), retryable);
        assert_eq!(e.code(), "provider_http_error");
    };
    expect(500, "the model crashed", true);
    expect(400, "exceed_context_size_error", false);
    expect(429, "slow down", true);
}

#[test]
fn a_stream_cut_before_its_end_is_cut_after_the_text_it_gave() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!({"text": "one two three four", "cut_after": 2}));
    let c = collect(p.stream_chat(&ask("q")));
    assert_eq!(c.text, "one two ");
    assert!(
        matches!(c.error, Some(ProviderError::Cut(_))),
        "{:?}",
        c.error
    );
    assert!(c.error.unwrap().retryable());
}

#[test]
fn garbage_frames_are_malformed() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!({"text": "one two three", "garbage_after": 1}));
    let c = collect(p.stream_chat(&ask("q")));
    assert_eq!(c.text, "one ");
    let e = c.error.expect("malformed");
    assert!(matches!(e, ProviderError::Malformed(_)), "{e:?}");
    assert!(!e.retryable());
}

fn with_timeouts(mock: &MockLlm, first: u64, idle: u64) -> Provider {
    let mut cfg = ProviderConfig::new(&mock.url);
    cfg.first_token_timeout = Duration::from_millis(first);
    cfg.idle_timeout = Duration::from_millis(idle);
    Provider::new(cfg)
}

#[test]
fn a_provider_that_hangs_hits_the_first_token_timeout() {
    let mock = MockLlm::start(&[]);
    let p = with_timeouts(&mock, 400, 5_000);
    for step in [
        json!({"hang": true}),
        json!({"hang_before_headers": true}),
        json!({"first_delay_ms": 3000}),
    ] {
        mock.script(step.clone());
        let started = Instant::now();
        let c = collect(p.stream_chat(&ask("q")));
        assert_eq!(
            c.error,
            Some(ProviderError::FirstTokenTimeout(Duration::from_millis(400))),
            "{step}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "gave up on time: {step}"
        );
    }
}

#[test]
fn a_stream_that_stalls_after_text_hits_the_idle_timeout() {
    let mock = MockLlm::start(&[]);
    // A slow first token is fine under a long first-token timeout; a stall later is not.
    let p = with_timeouts(&mock, 5_000, 1_000);
    mock.script(json!({"text": "a b c", "first_delay_ms": 600, "delay_ms": 100}));
    let ok = collect(p.stream_chat(&ask("q")));
    assert_eq!((ok.text.as_str(), ok.error), ("a b c", None));
    mock.script(json!({"text": "a b c", "delay_ms": 3000}));
    let c = collect(p.stream_chat(&ask("q")));
    assert_eq!(c.text, "a ");
    assert_eq!(
        c.error,
        Some(ProviderError::IdleTimeout(Duration::from_millis(1_000)))
    );
}

#[test]
fn cancel_stops_a_hanging_stream_promptly() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!({"hang": true}));
    let mut stream = p.stream_chat(&ask("q"));
    let cancel = stream.cancel_handle();
    let started = Instant::now();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        cancel.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    assert_eq!(stream.next(), Some(Err(ProviderError::Cancelled)));
    assert_eq!(stream.next(), None);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_refused_connection_is_unreachable_and_retryable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = Provider::new(ProviderConfig::new(&format!("http://127.0.0.1:{port}/v1")));
    let c = collect(p.stream_chat(&ask("q")));
    let e = c.error.expect("error");
    assert!(matches!(e, ProviderError::Unreachable(_)), "{e:?}");
    assert!(e.retryable());
    assert_eq!(e.code(), "provider_unreachable");
    assert!(matches!(p.models(), Err(ProviderError::Unreachable(_))));
    assert!(matches!(
        p.complete(&ask("q"), Duration::from_secs(2)),
        Err(ProviderError::Unreachable(_))
    ));
}

#[test]
fn non_streaming_completions_for_background_work() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.script(json!([
        {"text": "A short summary.", "reasoning": "thinking", "think": true, "finish_reason": "length"},
        {"status": 503, "text": "busy"},
    ]));
    let c = p
        .complete(&ask("summarise"), Duration::from_secs(5))
        .unwrap();
    assert_eq!(c.text, "A short summary.");
    assert_eq!(c.reasoning, "thinking");
    assert_eq!(c.finish_reason.as_deref(), Some("length"));
    assert_eq!(c.usage.output_tokens, 4);
    assert_eq!(mock.requests()[0]["stream"], false);
    let e = p
        .complete(&ask("again"), Duration::from_secs(5))
        .unwrap_err();
    assert!(
        matches!(e, ProviderError::Http { status: 503, .. }),
        "{e:?}"
    );
    mock.script(json!({"headers_delay_ms": 2000, "text": "late"}));
    let e = p
        .complete(&ask("slow"), Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(e, ProviderError::Timeout(_)), "{e:?}");
}

#[test]
fn the_listing_gives_each_servers_window_cached_and_failures_remembered_briefly() {
    let mock = MockLlm::start(&["--n-ctx", "6144", "--models-fail", "1"]);
    let mut cfg = ProviderConfig::new(&mock.url);
    cfg.models_failure_ttl = Duration::from_millis(300);
    let p = Provider::new(cfg);
    for _ in 0..3 {
        assert!(matches!(
            p.models(),
            Err(ProviderError::Http { status: 500, .. })
        ));
    }
    assert_eq!(
        mock.stats()["models_calls"],
        1,
        "a failure is remembered, not asked again at once"
    );
    let until = Instant::now() + Duration::from_secs(10);
    let models = loop {
        match p.models() {
            Ok(m) => break m,
            Err(e) => assert!(Instant::now() < until, "still failing: {e:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let windows: Vec<(&str, Option<u64>)> =
        models.iter().map(|m| (m.id.as_str(), m.window)).collect();
    assert_eq!(
        windows,
        vec![
            ("mock-model", Some(6144)),
            ("mock-vllm", Some(8192)),
            ("mock-router", Some(128000)),
            ("mock-studio", Some(2048)),
            ("mock-plain", None)
        ]
    );
    assert_eq!(p.window("mock-model", None).tokens, 6144);
    assert_eq!(
        p.window("mock-model", Some(1000)).tokens,
        1000,
        "--context-window wins"
    );
    assert_eq!(
        p.window("mock-plain", None).tokens,
        4096,
        "no window listed: the default"
    );
    assert_eq!(p.window("not-listed", None).source, "default");
    assert_eq!(
        p.resolve_model(None).unwrap(),
        "mock-model",
        "the first listed"
    );
    assert_eq!(p.resolve_model(Some("mine")).unwrap(), "mine");
    assert_eq!(
        mock.stats()["models_calls"],
        2,
        "one failure, then one listing reused"
    );
}

#[test]
fn the_api_key_is_sent_as_a_bearer_token_from_the_named_variable() {
    assert_eq!(api_key_from_env("BRAIN_TEST_SURELY_UNSET_KEY"), None);
    assert!(api_key_from_env("PATH").is_some());
    let mock = MockLlm::start(&[]);
    let mut cfg = ProviderConfig::new(&mock.url);
    cfg.api_key = Some("sk-test".into());
    let p = Provider::new(cfg);
    let c = collect(p.stream_chat(&ask("q")));
    assert_eq!(c.error, None);
    p.complete(&ask("q"), Duration::from_secs(5)).unwrap();
    for r in mock.requests() {
        assert_eq!(r["_authorization"], "Bearer sk-test");
    }
    let anonymous = provider(&mock);
    collect(anonymous.stream_chat(&ask("q")));
    assert!(
        mock.requests()[2].get("_authorization").is_none(),
        "no key, no header"
    );
}

/// A provider whose bodies never end: each read stops at its named limit with a clear
/// error, and the client stays usable.
#[test]
fn endless_bodies_are_refused_at_their_limits() {
    let mock = MockLlm::start(&[]);
    let p = provider(&mock);
    mock.models_mode("endless");
    let e = p.models().expect_err("an endless listing");
    assert!(
        matches!(&e, ProviderError::Malformed(m) if m.contains("larger than")),
        "{e:?}"
    );

    mock.script(json!({"endless": true, "kind": "complete"}));
    let e = p
        .complete(&ask("summarise"), Duration::from_secs(30))
        .expect_err("an endless completion");
    assert!(
        matches!(&e, ProviderError::Malformed(m) if m.contains("larger than")),
        "{e:?}"
    );

    mock.script(json!({"endless": true, "kind": "stream"}));
    let c = collect(p.stream_chat(&ask("q")));
    let e = c.error.expect("an endless line");
    assert!(
        matches!(&e, ProviderError::Malformed(m) if m.contains("larger than")),
        "{e:?}"
    );
    assert_eq!(c.text, "");

    let ok = collect(p.stream_chat(&ask("still there?")));
    assert_eq!(ok.error, None, "the client is still usable");
}
