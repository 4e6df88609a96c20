//! The writer off the slow path (issue 19): append latency under a steady load with
//! concurrent readers, WAL checkpoints on the committing writer (SQLite's auto-checkpoint,
//! the behaviour before) next to the store's background checkpoints; and the longest hold
//! of the writer while a 100k-event session is deleted, in one transaction (before) and in
//! purge batches (after, with a sweep of batch sizes).
//!
//! ```sh
//! cargo run --release --example bench -- writer [appends|delete] [APPENDS] [SESSION_EVENTS]
//! ```

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use brain::session::store::sqlite::purge::PURGE_BATCH_EVENTS;
use brain::session::store::{Checkpoints, ListQuery};
use brain::session::{Payload, SessionId, Store, StoreOptions, SyncMode};

use crate::support::{median, ms, words};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const ROUNDS: usize = 3;
const WRITERS: usize = 2;
const READERS: usize = 2;
const SESSIONS: usize = 16;
/// Words per appended message (~a chat message).
const MESSAGE_WORDS: usize = 60;
/// The steady append load, all writers together: below what `synchronous=FULL` sustains
/// on this machine, so latency is the commit's own cost, not a queue.
const RATE_PER_SECOND: u64 = 100;
/// How often each reader reads (a transcript page and the session list).
const READ_EVERY: Duration = Duration::from_millis(5);

pub fn run(args: &[String]) -> Res<()> {
    let part = args.first().map_or("all", String::as_str);
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if matches!(part, "all" | "appends") {
        appends(numbers.first().copied().unwrap_or(2_000))?;
    }
    if matches!(part, "all" | "delete") {
        delete_holds(
            numbers
                .get(1)
                .or(numbers.first())
                .copied()
                .unwrap_or(100_000),
        )?;
    }
    Ok(())
}

fn appends(appends: usize) -> Res<()> {
    println!(
        "# writer benchmark: {appends} appends per run at a steady {RATE_PER_SECOND}/s \
         ({WRITERS} writers), {READERS} readers each reading every {} ms, {ROUNDS} \
         alternating rounds\n",
        READ_EVERY.as_millis()
    );
    println!(
        "| sync | checkpoints | round | p50 ms | p99 ms | max ms | longest checkpoint hold ms |"
    );
    println!("|---|---|---|---|---|---|---|");
    for sync in [SyncMode::Normal, SyncMode::Full] {
        for round in 1..=ROUNDS {
            for mode in [Checkpoints::OnCommit, Checkpoints::Background] {
                appends_under_load(sync, mode, appends, round)?;
            }
        }
    }
    println!();
    Ok(())
}

fn open(path: &Path, sync: SyncMode, checkpoints: Checkpoints) -> Res<Store> {
    Ok(Store::open(
        path,
        StoreOptions {
            sync,
            checkpoints,
            ..StoreOptions::default()
        },
    )?)
}

fn user(text: String) -> Payload {
    Payload::UserMessage(brain::session::events::UserMessage { text })
}

fn appends_under_load(sync: SyncMode, mode: Checkpoints, appends: usize, round: usize) -> Res<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(open(&dir.path().join("bench.db"), sync, mode)?);
    let ids: Vec<SessionId> = (0..SESSIONS)
        .map(|_| store.create_session(None, String::new()).map(|s| s.id))
        .collect::<Result<_, _>>()?;
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (store, stop, ids) = (Arc::clone(&store), Arc::clone(&stop), ids.clone());
            thread::spawn(move || {
                let mut i = r;
                while !stop.load(Ordering::Relaxed) {
                    thread::sleep(READ_EVERY);
                    let id = ids[i % ids.len()];
                    let _ = store.transcript_page(id, u64::MAX, 100, None);
                    let _ = store.list_sessions(&ListQuery {
                        limit: 50,
                        ..ListQuery::default()
                    });
                    i += 1;
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, ids) = (Arc::clone(&store), ids.clone());
            thread::spawn(move || {
                let every = Duration::from_micros(1_000_000 * WRITERS as u64 / RATE_PER_SECOND);
                let start = Instant::now();
                (0..appends / WRITERS)
                    .map(|i| {
                        // Paced from the start, so one slow append does not slow the load.
                        if let Some(wait) = (every * i as u32).checked_sub(start.elapsed()) {
                            thread::sleep(wait);
                        }
                        let n = w * 1_000_003 + i;
                        let payload = user(words(MESSAGE_WORDS, n));
                        let t = Instant::now();
                        let _ = store.append(ids[n % ids.len()], &payload);
                        t.elapsed()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = writers
        .into_iter()
        .flat_map(|h| h.join().unwrap_or_default())
        .collect();
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.join();
    }
    if mode == Checkpoints::Background {
        // The idle TRUNCATE is the one checkpoint step that holds the lane in a steady
        // load below WAL_RESTART_FRAMES: let it run, so its hold is in the last column.
        let mut wal = dir.path().join("bench.db").into_os_string();
        wal.push("-wal");
        let until = Instant::now() + Duration::from_secs(30);
        while std::fs::metadata(&wal).map_or(0, |m| m.len()) > 0 && Instant::now() < until {
            thread::sleep(Duration::from_millis(50));
        }
    }
    let p50 = median(&mut latencies);
    let p99 = latencies[latencies.len() * 99 / 100];
    let max = latencies.last().copied().unwrap_or_default();
    println!(
        "| {sync:?} | {} | {round} | {:.2} | {:.2} | {:.2} | {} |",
        match mode {
            Checkpoints::OnCommit => "on the committing writer (before)",
            Checkpoints::Background => "background thread (after)",
        },
        ms(p50),
        ms(p99),
        ms(max),
        match mode {
            Checkpoints::OnCommit => "(inside commits: see max)".to_string(),
            Checkpoints::Background => format!("{:.2}", ms(store.longest_checkpoint_hold())),
        }
    );
    Ok(())
}

/// A session of `events` events (user messages and answers of ~60 words), written in
/// large transactions.
fn long_session(store: &Store, events: usize) -> Res<SessionId> {
    let id = store.create_session(Some("long".into()), String::new())?.id;
    let mut written = 1;
    while written < events {
        let chunk = (events - written).min(10_000);
        store.write(|w| {
            for i in 0..chunk {
                let n = written + i;
                let text = words(MESSAGE_WORDS, n);
                let p = if n % 2 == 1 {
                    user(text)
                } else {
                    Payload::AssistantTurn(brain::session::events::AssistantTurn {
                        turn: n as u64 - 1,
                        attempt: 1,
                        text,
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
                w.append(id, &p)?;
            }
            Ok(())
        })?;
        written += chunk;
    }
    Ok(id)
}

fn delete_holds(events: usize) -> Res<()> {
    println!("Delete of a {events}-event session: the longest single hold of the writer.\n");
    println!("| purge | transactions | longest hold ms | whole purge s |");
    println!("|---|---|---|---|");
    // Built once (closed, so the file is whole), copied for each measure.
    let built = tempfile::tempdir()?;
    let source = built.path().join("bench.db");
    let id = {
        let store = open(&source, SyncMode::Full, Checkpoints::Background)?;
        long_session(&store, events)?
    };
    let one_transaction = i64::MAX;
    for batch in [one_transaction, 250, 500, PURGE_BATCH_EVENTS, 2_000, 5_000] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("bench.db");
        std::fs::copy(&source, &path)?;
        let store = open(&path, SyncMode::Full, Checkpoints::Background)?;
        // The bench drives the purge itself, to time each batch.
        store.stop_maintenance();
        store.delete_session(id)?;
        let started = Instant::now();
        let longest = store.purge_pending(batch)?;
        let whole = started.elapsed();
        let (label, transactions) = if batch == one_transaction {
            ("one transaction (before)".to_string(), 1)
        } else {
            let after = if batch == PURGE_BATCH_EVENTS {
                " (after: PURGE_BATCH_EVENTS)"
            } else {
                ""
            };
            (
                format!("batches of {batch}{after}"),
                events.div_ceil(batch as usize),
            )
        };
        println!(
            "| {label} | {transactions} | {:.1} | {:.2} |",
            ms(longest),
            whole.as_secs_f64()
        );
    }
    Ok(())
}
