//! brain with a small local model, as issue 15 found it: llama.cpp (`.ci/llama-up`: Gemma 3
//! 270M, one slot) behind the release `brain serve` with `--context-window 1024
//! --max-output-tokens 60`, and 15 ordinary questions in one session. It reports turns
//! completed, the median turn latency next to the median chat call's own latency (what
//! background work and compaction add to a turn), and background output tokens per chat
//! output token, from the ledger.
//!
//! ```sh
//! url=$(bash .ci/llama-up)
//! cargo run --release --example bench -- local "$url" [extra brain serve flags…]
//! ```

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::{Res, examples_dir, median, ms, spawn};

const QUESTIONS: [&str; 15] = [
    "What is a good name for a small black cat?",
    "How long should I boil an egg for a soft yolk?",
    "Give me three ideas for a rainy Sunday afternoon.",
    "What is the capital of Australia?",
    "How do I say thank you in Japanese?",
    "Why is the sky blue?",
    "Suggest a short title for a story about a lighthouse keeper.",
    "What should I pack for a weekend hike?",
    "How many minutes are there in a day?",
    "What is a haiku? Write one about autumn.",
    "How do I keep basil alive on a windowsill?",
    "What is the difference between weather and climate?",
    "Recommend a board game for four players.",
    "How do I make a cup of green tea properly?",
    "Summarise our conversation so far in one sentence.",
];

pub fn run(args: &[String]) -> Res<()> {
    let url = match args.first() {
        Some(u) => u.clone(),
        None => std::env::var("BRAIN_TEST_LLAMA_URL")
            .map_err(|_| "give the llama.cpp URL (start one with: bash .ci/llama-up)")?,
    };
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("local.db");
    let db_arg = db.to_string_lossy().into_owned();
    let mut serve_args = vec![
        "--db",
        &db_arg,
        "--sync",
        "normal",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--provider-url",
        &url,
        "--context-window",
        "1024",
        "--max-output-tokens",
        "60",
        "--temperature",
        "0",
    ];
    serve_args.extend(args.iter().skip(1).map(String::as_str));
    let bin = examples_dir()?
        .parent()
        .ok_or("no target directory")?
        .join("brain");
    let brain = spawn(bin, &serve_args)?;
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .new_agent();
    let session: Value = serde_json::from_str(
        &agent
            .post(&format!("{}/v1/sessions", brain.url))
            .header("Content-Type", "application/json")
            .send("{}")?
            .into_body()
            .read_to_string()?,
    )?;
    let id = session["id"].as_str().ok_or("no session id")?.to_owned();
    let mut turn_times = Vec::new();
    let mut completed = 0;
    let mut failures = Vec::new();
    for q in QUESTIONS {
        let started = Instant::now();
        let resp = agent
            .post(&format!("{}/v1/sessions/{id}/messages", brain.url))
            .header("Content-Type", "application/json")
            .send(json!({ "message": q }).to_string())?;
        let mut end = Value::Null;
        let mut error = Value::Null;
        for line in BufReader::new(resp.into_body().into_reader()).lines() {
            let line = line?;
            let Some(frame) = line.strip_prefix("data: ") else {
                continue;
            };
            let frame: Value = serde_json::from_str(frame)?;
            match frame["type"].as_str() {
                Some("end") => end = frame,
                Some("error") => error = frame,
                _ => {}
            }
        }
        turn_times.push(started.elapsed());
        if end["status"] == "completed" {
            completed += 1;
        } else {
            failures.push(format!("{}: {}", end["status"], error["code"]));
        }
    }
    // Background work still running finishes (or is cut) at shutdown; give it the time a
    // user's next question would have given it.
    std::thread::sleep(Duration::from_secs(2));
    drop(brain);
    report(&db, completed, &mut turn_times, &failures)
}

fn report(
    db: &std::path::Path,
    completed: usize,
    turn_times: &mut [Duration],
    failures: &[String],
) -> Res<()> {
    let conn = rusqlite::Connection::open(db)?;
    let mut chat_times: Vec<Duration> = conn
        .prepare("SELECT latency_ms FROM ledger WHERE purpose = 'chat' AND status = 'ok'")?
        .query_map([], |r| r.get::<_, i64>(0))?
        .filter_map(Result::ok)
        .map(|ms| Duration::from_millis(ms.max(0) as u64))
        .collect();
    let mut by_purpose = conn.prepare(
        "SELECT purpose, COUNT(*), SUM(output_tokens), \
         group_concat(status || COALESCE('/' || error_code, ''), ', ') \
         FROM ledger GROUP BY purpose ORDER BY purpose",
    )?;
    let rows: Vec<(String, i64, i64, String)> = by_purpose
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .filter_map(Result::ok)
        .map(|(p, n, t, statuses): (String, i64, i64, String)| (p, n, t, tally(&statuses)))
        .collect();
    let compactions: Vec<String> = conn
        .prepare("SELECT payload FROM session_events WHERE kind = 'compaction_applied'")?
        .query_map([], |r| r.get::<_, String>(0))?
        .filter_map(Result::ok)
        .map(|p| {
            serde_json::from_str::<Value>(&p)
                .ok()
                .and_then(|v| v["method"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "llm".into())
        })
        .collect();
    let chat_tokens: i64 = rows.iter().filter(|r| r.0 == "chat").map(|r| r.2).sum();
    let background_tokens: i64 = rows.iter().filter(|r| r.0 != "chat").map(|r| r.2).sum();
    let (cached, uncached): (i64, i64) = conn.query_row(
        "SELECT COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(input_tokens), 0) \
         FROM ledger WHERE purpose = 'chat'",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let turn = median(turn_times);
    let chat = median(&mut chat_times);
    println!("| measure | value |");
    println!("|---|---|");
    println!("| turns completed | {completed} / {} |", QUESTIONS.len());
    println!("| median turn latency | {:.0} ms |", ms(turn));
    println!("| median chat call latency | {:.0} ms |", ms(chat));
    println!("| turn / chat call | {:.2} |", ms(turn) / ms(chat).max(1.0));
    println!(
        "| background output tokens per chat output token | {:.2} ({background_tokens} / {chat_tokens}) |",
        background_tokens as f64 / chat_tokens.max(1) as f64
    );
    println!("| compactions | {} {:?} |", compactions.len(), compactions);
    println!(
        "| chat prompt tokens read from the provider's cache | {:.1}% |",
        100.0 * cached as f64 / (cached + uncached).max(1) as f64
    );
    for (purpose, calls, tokens, statuses) in &rows {
        println!("| {purpose} calls | {calls} ({statuses}; {tokens} output tokens) |");
    }
    if !failures.is_empty() {
        println!("\nturns not completed: {failures:?}");
    }
    Ok(())
}

/// "ok, error/x, ok" → "2 ok, 1 error/x".
fn tally(statuses: &str) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for s in statuses.split(", ").filter(|s| !s.is_empty()) {
        *counts.entry(s).or_default() += 1;
    }
    counts
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}
