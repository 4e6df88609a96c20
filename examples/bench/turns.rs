//! Turns through brain against `mock_llm`: the first-token overhead of brain's HTTP path
//! next to the provider's own, and what a long conversation costs in prompt tokens next to a
//! naive sliding window.

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brain::api::{self, ApiConfig};
use brain::chat::engine::{Engine, EngineSettings};
use brain::provider::{ChatRequest, ChatRole, Provider, ProviderConfig, StreamEvent};
use brain::session::projection::llm_context;
use brain::session::{Store, StoreOptions, SyncMode};
use brain::tokens::Estimator;
use serde_json::json;

use super::support::{Res, median, mock, ms, script, words};

fn engine(dir: &std::path::Path, url: &str, sync: SyncMode) -> Res<(Arc<Store>, Engine)> {
    let store = Arc::new(Store::open(
        &dir.join("bench.db"),
        StoreOptions {
            sync,
            ..StoreOptions::default()
        },
    )?);
    let settings = EngineSettings {
        distill: false,
        ..EngineSettings::default()
    };
    let engine = Engine::new(
        Arc::clone(&store),
        Arc::new(Provider::new(ProviderConfig::new(url))),
        settings,
    );
    Ok((store, engine))
}

/// Time to the first streamed chunk through brain's HTTP API (a real server on
/// 127.0.0.1, `--sync normal` and `full`) next to straight from the provider, the mock
/// waiting 50 ms before its first token.
pub fn first_token(args: &[String]) -> Res<()> {
    let turns: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(25);
    let m = mock(&[])?;
    let step = json!({"kind": "stream", "text": "hello there, friend", "first_delay_ms": 50});
    let direct = Provider::new(ProviderConfig::new(&m.url));
    println!("| path | median first chunk ms | vs direct |");
    println!("|---|---|---|");
    let mut direct_times = Vec::new();
    let mut brain_times: Vec<(SyncMode, Vec<Duration>)> =
        vec![(SyncMode::Normal, vec![]), (SyncMode::Full, vec![])];
    let dirs = [tempfile::tempdir()?, tempfile::tempdir()?];
    let mut servers = Vec::new();
    for ((sync, _), dir) in brain_times.iter().zip(&dirs) {
        let (store, engine) = engine(dir.path(), &m.url, *sync)?;
        let id = store
            .create_session(Some("bench".into()), "You are brief.".into())?
            .id;
        let config = ApiConfig {
            listen: "127.0.0.1:0".parse()?,
            token: None,
            allowed_hosts: vec![],
            max_body_bytes: 1 << 20,
            max_import_bytes: api::import::DEFAULT_MAX_IMPORT_BYTES,
            request_timeout: api::DEFAULT_REQUEST_TIMEOUT,
            idle_timeout: api::KEEP_ALIVE_IDLE_TIMEOUT,
            max_connections: api::DEFAULT_MAX_CONNECTIONS,
            system_prompt: String::new(),
        };
        servers.push((api::start(config, engine)?, id));
    }
    // Interleave the three paths turn by turn so noise hits them alike.
    for i in 0..turns {
        for ((_, times), (server, id)) in brain_times.iter_mut().zip(&servers) {
            script(&m, &step)?;
            let url = format!("{}/v1/sessions/{id}/messages", server.url());
            let started = Instant::now();
            let resp = ureq::post(&url)
                .header("Content-Type", "application/json")
                .send(json!({"message": format!("question {i}")}).to_string())?;
            let mut first = None;
            for line in BufReader::new(resp.into_body().into_reader()).lines() {
                let line = line?;
                if first.is_none() && line.contains("\"type\":\"chunk\"") {
                    first = Some(started.elapsed());
                }
            }
            times.push(first.ok_or("no chunk")?);
        }
        script(&m, &step)?;
        let req = ChatRequest {
            model: "mock-model".into(),
            system: "You are brief.".into(),
            messages: vec![(ChatRole::User, format!("question {i}"))],
            max_tokens: None,
            temperature: None,
            tools: vec![],
            tool_choice_none: false,
            steps: vec![],
        };
        let started = Instant::now();
        let mut first = None;
        for ev in direct.stream_chat(&req) {
            if first.is_none() && matches!(ev?, StreamEvent::Text(_)) {
                first = Some(started.elapsed());
            }
        }
        direct_times.push(first.ok_or("no text")?);
    }
    let d = median(&mut direct_times);
    println!("| provider directly | {:.1} | 1.00 |", ms(d));
    for (sync, times) in &mut brain_times {
        let b = median(times);
        println!(
            "| brain, --sync {} | {:.1} | {:.3} |",
            format!("{sync:?}").to_lowercase(),
            ms(b),
            b.as_secs_f64() / d.as_secs_f64()
        );
    }
    for (server, _) in servers {
        server.stop();
    }
    Ok(())
}

const WINDOW: u64 = 8192;
const USER_WORDS: usize = 40;
const ANSWER_WORDS: usize = 150;

/// A scripted conversation on an 8k window (user ~40 tokens, answers ~150): the share of
/// prompt tokens the provider's prefix cache served, the peak context and the compactions,
/// next to the same conversation sent with a naive sliding window (the oldest messages
/// dropped to fit the same budget).
pub fn cost(args: &[String]) -> Res<()> {
    let turns: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(200);
    let n_ctx = WINDOW.to_string();
    let m = mock(&["--n-ctx", &n_ctx])?;
    let dir = tempfile::tempdir()?;
    let (store, engine) = engine(dir.path(), &m.url, SyncMode::Normal)?;
    let id = store
        .create_session(Some("cost".into()), "You are a helpful assistant.".into())?
        .id;
    let estimator = Estimator::new();
    let mut peak = 0;
    for i in 0..turns {
        script(
            &m,
            &json!({"kind": "stream", "text": words(ANSWER_WORDS, i)}),
        )?;
        let sub = engine.send(id, &words(USER_WORDS, i + 1000), None)?;
        sub.for_each(drop);
        peak = peak.max(
            estimator
                .context(&llm_context(&store.events_for_context(id)?))
                .total,
        );
    }
    engine.shutdown(Duration::from_secs(30));
    let chat = store
        .usage(Some(id))?
        .by_purpose
        .get("chat")
        .copied()
        .unwrap_or_default();
    let compactions = store
        .events(id, 0, None)?
        .iter()
        .filter(|e| e.kind == "compaction_applied")
        .count();
    let brain_reuse =
        chat.cache_read_tokens as f64 / (chat.cache_read_tokens + chat.input_tokens).max(1) as f64;

    let (naive_reuse, naive_peak) = naive(turns, &estimator)?;
    println!(
        "| {turns} turns, window {WINDOW} | prompt tokens from cache | peak context (tokens) | compactions |"
    );
    println!("|---|---|---|---|");
    println!(
        "| brain | {:.1}% | {peak} | {compactions} |",
        100.0 * brain_reuse
    );
    println!(
        "| naive sliding window | {:.1}% | {naive_peak} | 0 |",
        100.0 * naive_reuse
    );
    println!(
        "\nreuse ratio brain / naive: {:.1}x",
        brain_reuse / naive_reuse.max(1e-9)
    );
    Ok(())
}

/// The same conversation straight to a fresh mock, keeping only the newest messages that
/// fit brain's compaction trigger (0.6 × window).
fn naive(turns: usize, estimator: &Estimator) -> Res<(f64, u64)> {
    let n_ctx = WINDOW.to_string();
    let m = mock(&["--n-ctx", &n_ctx])?;
    let provider = Provider::new(ProviderConfig::new(&m.url));
    let system = "You are a helpful assistant.".to_owned();
    let budget = (WINDOW as f64 * 0.6) as u64;
    let mut history: Vec<(ChatRole, String)> = Vec::new();
    let (mut cached, mut input, mut peak) = (0u64, 0u64, 0u64);
    for i in 0..turns {
        history.push((ChatRole::User, words(USER_WORDS, i + 1000)));
        let cost = |h: &[(ChatRole, String)]| {
            estimator.message(&system) + h.iter().map(|(_, c)| estimator.message(c)).sum::<u64>()
        };
        let mut start = 0;
        while cost(&history[start..]) > budget && start + 1 < history.len() {
            start += 1;
        }
        peak = peak.max(cost(&history[start..]));
        script(
            &m,
            &json!({"kind": "stream", "text": words(ANSWER_WORDS, i)}),
        )?;
        let req = ChatRequest {
            model: "mock-model".into(),
            system: system.clone(),
            messages: history[start..].to_vec(),
            max_tokens: None,
            temperature: None,
            tools: vec![],
            tool_choice_none: false,
            steps: vec![],
        };
        let mut answer = String::new();
        for ev in provider.stream_chat(&req) {
            match ev? {
                StreamEvent::Text(t) => answer.push_str(&t),
                StreamEvent::Usage(u) => {
                    cached += u.cache_read_tokens;
                    input += u.input_tokens;
                }
                _ => {}
            }
        }
        history.push((ChatRole::Assistant, answer));
    }
    Ok((cached as f64 / (cached + input).max(1) as f64, peak))
}
