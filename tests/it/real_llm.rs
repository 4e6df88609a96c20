//! The provider client against a real llama.cpp server with a real (tiny) model, started by
//! `.ci/llama-up` (which `.ci/run` runs). The model is a base model that talks nonsense:
//! this tests mechanics (streaming, usage, the listed window, prompt-cache reuse), not
//! content.

use std::time::Duration;

use brain::provider::{ChatRequest, ChatRole, Provider, ProviderConfig, StreamEvent};
use brain::session::events::Usage;

fn llama_url() -> Option<String> {
    if let Ok(url) = std::env::var("BRAIN_TEST_LLAMA_URL") {
        return Some(url);
    }
    match std::env::var("BRAIN_TEST_LLAMA_SKIP") {
        Ok(reason) => eprintln!("real LLM test skipped: {reason}"),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("CI must set BRAIN_TEST_LLAMA_URL or BRAIN_TEST_LLAMA_SKIP (see .ci/run)")
        }
        Err(_) => eprintln!(
            "real LLM test skipped: no server (run `.ci/llama-up` and set BRAIN_TEST_LLAMA_URL)"
        ),
    }
    None
}

#[test]
fn a_real_llama_cpp_server_streams_lists_its_window_and_reuses_its_cache() {
    let Some(url) = llama_url() else {
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
    };
    let run = || {
        let (mut text, mut usage, mut finish) = (String::new(), None::<Usage>, None);
        for ev in p.stream_chat(&req) {
            match ev.expect("a clean stream") {
                StreamEvent::Text(t) | StreamEvent::Reasoning(t) => text.push_str(&t),
                StreamEvent::Usage(u) => usage = Some(u),
                StreamEvent::Finish(f) => finish = Some(f),
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
