//! The provider client against a real llama.cpp server with a real (tiny) model, started by
//! `.ci/llama-up` (which `.ci/run` runs). The model is a base model that talks nonsense:
//! this tests mechanics (streaming, usage, the listed window, prompt-cache reuse), not
//! content.

use std::time::Duration;

use brain::provider::{ChatRequest, ChatRole, Provider, ProviderConfig, StreamEvent};
use brain::session::events::Usage;

use crate::support::{skip_notice, skipped};

/// The server's URL, or `None` after reporting the skip (under CI only when `.ci/run`
/// says why in `BRAIN_TEST_LLAMA_SKIP`: the server could not be installed or started).
fn llama_url(test: &str) -> Option<String> {
    if let Ok(url) = std::env::var("BRAIN_TEST_LLAMA_URL") {
        return Some(url);
    }
    match std::env::var("BRAIN_TEST_LLAMA_SKIP") {
        // An explicit, reasoned skip stands even under CI, and still shows.
        Ok(reason) => skip_notice(test, &format!("{reason} (BRAIN_TEST_LLAMA_SKIP)")),
        Err(_) => skipped(
            test,
            "no llama.cpp server (BRAIN_TEST_LLAMA_URL is unset)",
            "set BRAIN_TEST_LLAMA_URL to the URL `.ci/llama-up` prints",
        ),
    }
    None
}

#[test]
fn a_real_llama_cpp_server_streams_lists_its_window_and_reuses_its_cache() {
    let Some(url) = llama_url(
        "real_llm::a_real_llama_cpp_server_streams_lists_its_window_and_reuses_its_cache",
    ) else {
        return;
    };
    let mut cfg = ProviderConfig::new(&url);
    cfg.first_token_timeout = Duration::from_secs(120);
    cfg.idle_timeout = Duration::from_secs(60);
    let p = Provider::new(cfg);

    let model = p.resolve_model(None).expect("the listing names the model");
    assert_eq!(model, "gemma-3-270m");
    let window = p.window(&model, None);
    assert_eq!(
        (window.tokens, window.source),
        (4096, "llama.cpp meta.n_ctx")
    );

    let question = "Here are some notes about rivers, mountains, forests and the sea. \
        Rivers carry water from the mountains to the sea, and forests grow along their banks. "
        .repeat(6);
    let req = ChatRequest {
        model,
        system: "You are a helpful assistant.".into(),
        messages: vec![(ChatRole::User, question)],
        max_tokens: Some(12),
        temperature: Some(0.0),
        tools: vec![],
        tool_choice_none: false,
        steps: vec![],
    };
    let run = || {
        let (mut text, mut usage, mut finish) = (String::new(), None::<Usage>, None);
        for ev in p.stream_chat(&req) {
            match ev.expect("a clean stream") {
                StreamEvent::Text(t) | StreamEvent::Reasoning(t) => text.push_str(&t),
                StreamEvent::Usage(u) => usage = Some(u),
                StreamEvent::Finish(f) => finish = Some(f),
                StreamEvent::ToolCalls(_) => {}
            }
        }
        (text, usage.expect("usage with include_usage"), finish)
    };
    let (text, first, finish) = run();
    assert!(!text.is_empty());
    assert!(finish.is_some());
    assert!(
        first.output_tokens > 0 && first.output_tokens <= 12,
        "{first:?}"
    );
    let prompt = first.input_tokens + first.cache_read_tokens;
    assert!(prompt > 100, "{first:?}");

    let (_, second, _) = run();
    assert_eq!(second.input_tokens + second.cache_read_tokens, prompt);
    assert!(
        second.cache_read_tokens + 8 >= prompt,
        "the repeated prompt is served from the KV cache: {second:?} after {first:?}"
    );
}

/// Distillation's JSON schema, sent as `response_format`, is a grammar to llama.cpp: even a
/// base model of 270M parameters, which never writes JSON when only asked to, answers
/// JSON that parses.
#[test]
fn a_real_llama_cpp_distillation_with_a_schema_returns_json_that_parses() {
    use brain::chat::post_turn::{DISTILL_PROMPT, MEMORY_MAX_TOKENS, memory_shape, parse_memory};
    let Some(url) =
        llama_url("real_llm::a_real_llama_cpp_distillation_with_a_schema_returns_json_that_parses")
    else {
        return;
    };
    let p = Provider::new(ProviderConfig::new(&url));
    let model = p.resolve_model(None).expect("the listing names the model");
    let req = ChatRequest {
        model,
        system: DISTILL_PROMPT.into(),
        messages: vec![(
            ChatRole::User,
            "User: Which file holds the parser?\n\nAssistant: src/parse.rs; it failed on \
             empty input because of an unchecked index."
                .into(),
        )],
        max_tokens: Some(MEMORY_MAX_TOKENS),
        temperature: Some(0.0),
        tools: vec![],
        tool_choice_none: false,
        steps: vec![],
    };
    let never = std::sync::atomic::AtomicBool::new(false);
    let timeout = Duration::from_secs(120);
    let shaped = p
        .complete_shaped(&req, &memory_shape(), timeout, &never)
        .expect("an answer");
    assert!(
        parse_memory(&shaped.text).is_some(),
        "grammar-constrained JSON parses: {shaped:?}"
    );
    let plain = p
        .complete_shaped(&req, &Default::default(), timeout, &never)
        .expect("an answer");
    if parse_memory(&plain.text).is_some() {
        eprintln!("note: the prompt-only way also gave JSON this time: {plain:?}");
    }
}

/// A skip shows in a plain `cargo test` (not only with `--nocapture`), and under CI a
/// missing server is a failure.
#[test]
fn without_a_server_the_skip_is_visible_and_ci_fails() {
    const TEST: &str =
        "real_llm::a_real_llama_cpp_server_streams_lists_its_window_and_reuses_its_cache";
    let unset = [
        ("BRAIN_TEST_LLAMA_URL", None),
        ("BRAIN_TEST_LLAMA_SKIP", None),
    ];
    let (ok, out) = crate::support::run_this_test(TEST, &[&unset[..], &[("CI", None)]].concat());
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("SKIPPED {TEST}")) && out.contains("BRAIN_TEST_LLAMA_URL"),
        "{out}"
    );
    let (ok, out) =
        crate::support::run_this_test(TEST, &[&unset[..], &[("CI", Some("1"))]].concat());
    assert!(!ok, "a missing server fails under CI: {out}");
}

/// Issue 15's conversation on a real local model: llama.cpp with one slot and a 1024-token
/// window, 20 turns with background work on. Every turn completes (a weak summariser cannot
/// end the conversation), at least one compaction is applied, and the chat request right
/// after a compaction still reads part of its prompt from llama.cpp's cache.
#[test]
fn twenty_turns_on_a_real_small_model_and_a_small_window_all_complete() {
    use std::sync::Arc;

    use brain::chat::engine::{Engine, EngineSettings};
    use brain::chat::frames::{EndStatus, Frame};

    let Some(url) =
        llama_url("real_llm::twenty_turns_on_a_real_small_model_and_a_small_window_all_complete")
    else {
        return;
    };
    let db = crate::support::TempDb::new();
    let store = Arc::new(db.open());
    let mut cfg = ProviderConfig::new(&url);
    cfg.first_token_timeout = Duration::from_secs(120);
    cfg.idle_timeout = Duration::from_secs(60);
    let settings = EngineSettings {
        context_window: Some(1024),
        max_output_tokens: Some(60),
        temperature: Some(0.0),
        ..EngineSettings::default()
    };
    let engine = Engine::new(Arc::clone(&store), Arc::new(Provider::new(cfg)), settings);
    let id = store
        .create_session(None, "You are a helpful assistant.".into())
        .expect("session")
        .id;
    for i in 0..20 {
        let frames: Vec<Frame> = engine
            .send(
                id,
                &format!("Question {i}: tell me one fact about the number {i}."),
                None,
            )
            .expect("send")
            .collect();
        match frames.last() {
            Some(Frame::End { status, .. }) => {
                assert_eq!(*status, EndStatus::Completed, "turn {i}: {frames:?}")
            }
            other => panic!("turn {i} did not end: {other:?}"),
        }
    }
    engine.shutdown(Duration::from_secs(10));
    // Underneath: the log's compactions and the ledger's chat calls, in order.
    let raw = db.raw();
    let compaction_seqs: Vec<i64> = raw
        .prepare("SELECT seq FROM session_events WHERE kind = 'compaction_applied' ORDER BY seq")
        .and_then(|mut q| q.query_map([], |r| r.get(0))?.collect())
        .expect("compactions");
    assert!(!compaction_seqs.is_empty(), "at least one compaction");
    let first_compaction_at: String = raw
        .query_row(
            "SELECT created_at FROM session_events WHERE kind = 'compaction_applied' ORDER BY seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("its time");
    let (cached, input): (i64, i64) = raw
        .query_row(
            "SELECT cache_read_tokens, input_tokens FROM ledger WHERE purpose = 'chat' \
             AND status = 'ok' AND created_at > ?1 ORDER BY id LIMIT 1",
            [&first_compaction_at],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("a chat call after the compaction");
    assert!(
        cached > 0,
        "the request after a compaction still hits the prompt cache ({cached} cached, {input} not)"
    );
}
