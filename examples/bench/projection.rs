//! Per-turn projection cost against log length: read what the LLM context needs from the
//! store, project it, and estimate its tokens, for a session of 100k events with a
//! compaction near the end and for sessions of 1k events. Only the events after the
//! newest compaction's boundary are read, so the long session should cost about what a
//! short one does (issue 4's target: ≤ 1.5×).
//!
//! `cargo run --release --example bench -- projection`

use std::time::{Duration, Instant};

use brain::session::events::{AssistantTurn, CompactionApplied, UserMessage};
use brain::session::projection::llm_context;
use brain::session::{Payload, SessionId, Store, StoreOptions, SyncMode};
use brain::tokens::Estimator;

const TAIL_EVENTS: u64 = 100;
const RUNS: usize = 50;

pub fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(
        &dir.path().join("bench.db"),
        StoreOptions {
            sync: SyncMode::Normal,
            ..StoreOptions::default()
        },
    )?;
    let long = session(&store, 100_000, true)?;
    let short = session(&store, 1_000, true)?;
    let short_plain = session(&store, 1_000, false)?;
    let estimator = Estimator::new();
    println!("| session | events read | median ms | p90 ms |");
    println!("|---|---|---|---|");
    let mut medians = Vec::new();
    for (name, id) in [
        ("100k events, compaction near the end", long),
        ("1k events, compaction near the end", short),
        ("1k events, no compaction", short_plain),
    ] {
        let (read, times) = per_turn(&store, &estimator, id)?;
        let median = ms(times[times.len() / 2]);
        println!(
            "| {name} | {read} | {median:.3} | {:.3} |",
            ms(times[times.len() * 9 / 10])
        );
        medians.push(median);
    }
    println!(
        "\n100k / 1k (both compacted): {:.2}x   100k compacted / 1k uncompacted: {:.2}x",
        medians[0] / medians[1],
        medians[0] / medians[2]
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One turn's projection work, timed `RUNS` times (after one warm-up run, as a server
/// would have its token cache warm from the previous turn).
fn per_turn(
    store: &Store,
    estimator: &Estimator,
    id: SessionId,
) -> Result<(usize, Vec<Duration>), Box<dyn std::error::Error>> {
    let mut read = 0;
    let mut times = Vec::new();
    for i in 0..=RUNS {
        let t = Instant::now();
        let events = context_once(store, estimator, id)?;
        let elapsed = t.elapsed();
        read = events;
        if i > 0 {
            times.push(elapsed);
        }
    }
    times.sort_unstable();
    Ok((read, times))
}

/// One turn's context work: read, project, estimate; returns the events read.
pub fn context_once(
    store: &Store,
    estimator: &Estimator,
    id: SessionId,
) -> Result<usize, Box<dyn std::error::Error>> {
    let events = store.events_for_context(id)?;
    let tokens = estimator.context(&llm_context(&events));
    assert!(tokens.total > 0);
    Ok(events.len())
}

/// A session of `events` events: user/assistant pairs of ~60 words, and optionally a
/// compaction that leaves the last `TAIL_EVENTS` live.
pub fn session(
    store: &Store,
    events: u64,
    compacted: bool,
) -> Result<SessionId, Box<dyn std::error::Error>> {
    let id = store
        .create_session(None, "You are a helpful assistant.".into())?
        .id;
    let body = "the quick brown fox jumps over the lazy dog while the cat sleeps ".repeat(6);
    let mut seq = 1;
    while seq < events {
        store.write(|w| {
            for _ in 0..1_000 {
                if seq >= events {
                    break;
                }
                let boundary = events.saturating_sub(TAIL_EVENTS);
                let p = if compacted && seq == boundary {
                    Payload::CompactionApplied(CompactionApplied {
                        summary: body.clone(),
                        replaces_through_seq: boundary - 1,
                        tokens_before: 100_000,
                        tokens_after: 100,
                        model: "bench".into(),
                        method: brain::session::events::method::LLM.into(),
                    })
                } else if seq % 2 == 1 {
                    Payload::UserMessage(UserMessage {
                        text: format!("{seq}: {body}"),
                    })
                } else {
                    Payload::AssistantTurn(AssistantTurn {
                        turn: seq,
                        attempt: 1,
                        text: format!("{seq}: {body}"),
                        reasoning: None,
                        provider: "bench".into(),
                        model: "bench".into(),
                        finish_reason: Some("stop".into()),
                        usage: Default::default(),
                        duration_ms: 1,
                        ledger_id: None,
                        steps: 1,
                    })
                };
                seq = w.append(id, &p)?.seq;
            }
            Ok(())
        })?;
    }
    Ok(id)
}
