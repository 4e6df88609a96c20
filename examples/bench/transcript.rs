//! A transcript page (SPEC §7, 500 items) of a 100k-event session, newest and oldest page:
//! the page read (a window back from `before_seq` plus what its items need) against the
//! whole log projected and sliced, as the route did before. Turns are a user message, two
//! checkpoints and an answer; every tenth attempt is cut after its checkpoints.
//!
//! `cargo run --release --example bench -- transcript`

use std::time::{Duration, Instant};

use brain::session::events::{AssistantTurn, PendingState, UserMessage};
use brain::session::projection::ui_transcript;
use brain::session::{Payload, SessionId, Store, StoreOptions, SyncMode};

const EVENTS: u64 = 100_000;
pub const LIMIT: usize = 500;
const RUNS: usize = 30;

pub fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(
        &dir.path().join("bench.db"),
        StoreOptions {
            sync: SyncMode::Normal,
            ..StoreOptions::default()
        },
    )?;
    let id = session(&store)?;
    let oldest_before = oldest_before(&store, id)?;
    println!(
        "| page (500 items, 100k-event session) | whole log, sliced: median ms | page read: median ms |"
    );
    println!("|---|---|---|");
    for (name, before) in [("newest", i64::MAX as u64), ("oldest", oldest_before)] {
        let whole = median(|| {
            let items = ui_transcript(&store.events(id, 0, None)?, None);
            let older: Vec<_> = items.into_iter().filter(|i| i.seq < before).collect();
            let start = older.len().saturating_sub(LIMIT);
            Ok(older[start..].to_vec())
        })?;
        let page = median(|| Ok(store.transcript_page(id, before, LIMIT, None)?.items))?;
        println!("| {name} | {whole:.2} | {page:.2} |");
    }
    Ok(())
}

/// Where the oldest page ends: the first 500 items come before this seq.
pub fn oldest_before(store: &Store, id: SessionId) -> Result<u64, Box<dyn std::error::Error>> {
    let all = ui_transcript(&store.events(id, 0, None)?, None);
    Ok(all.get(LIMIT).map_or(u64::MAX, |i| i.seq))
}

type Items = Vec<brain::session::projection::Item>;

/// Median of `RUNS` timed runs, after one warm-up; every run must give a full page.
fn median(
    mut f: impl FnMut() -> Result<Items, Box<dyn std::error::Error>>,
) -> Result<f64, Box<dyn std::error::Error>> {
    let mut times: Vec<Duration> = Vec::new();
    for i in 0..=RUNS {
        let t = Instant::now();
        let items = f()?;
        let elapsed = t.elapsed();
        assert_eq!(items.len(), LIMIT);
        if i > 0 {
            times.push(elapsed);
        }
    }
    times.sort_unstable();
    Ok(times[times.len() / 2].as_secs_f64() * 1000.0)
}

pub fn session(store: &Store) -> Result<SessionId, Box<dyn std::error::Error>> {
    let id = store
        .create_session(None, "You are a helpful assistant.".into())?
        .id;
    let body = "the quick brown fox jumps over the lazy dog while the cat sleeps ".repeat(6);
    let mut seq = 1;
    let mut n = 0u64;
    while seq < EVENTS {
        store.write(|w| {
            for _ in 0..250 {
                n += 1;
                let turn = w
                    .append(
                        id,
                        &Payload::UserMessage(UserMessage {
                            text: format!("{n}: {body}"),
                        }),
                    )?
                    .seq;
                for part in 0..2 {
                    w.append(
                        id,
                        &Payload::PendingState(PendingState {
                            turn,
                            attempt: 1,
                            text: format!("part {part} of {n} "),
                            reasoning: None,
                            ended: None,
                            step: None,
                        }),
                    )?;
                }
                seq = if n % 10 == 0 {
                    turn + 2
                } else {
                    w.append(
                        id,
                        &Payload::AssistantTurn(AssistantTurn {
                            turn,
                            attempt: 1,
                            text: format!("{n}: {body}"),
                            reasoning: None,
                            provider: "bench".into(),
                            model: "bench".into(),
                            finish_reason: Some("stop".into()),
                            usage: Default::default(),
                            duration_ms: 1,
                            ledger_id: None,
                            steps: 1,
                        }),
                    )?
                    .seq
                };
            }
            Ok(())
        })?;
    }
    Ok(id)
}
