//! Store benchmark: append throughput and latency through brain's store next to the same
//! statements issued straight through rusqlite, and search latency on a generated corpus.
//!
//! ```sh
//! cargo run --release --example bench -- store              # defaults
//! cargo run --release --example bench -- store 2000 1000000  # appends per run, corpus size
//! ```
//!
//! Appends: 1 and 4 writer threads, `synchronous` FULL and NORMAL. Each configuration runs
//! brain and direct alternately, three rounds, and reports the median round. Direct is one
//! rusqlite connection behind a mutex, the same pragmas, schema and statements brain
//! issues per append (BEGIN IMMEDIATE, session check, insert with seq, cache update,
//! COMMIT). Targets (issue 3): brain ≥ 0.9× direct; max latency with 4 writers ≤ 50 ms.
//!
//! Search: a corpus of user and assistant messages (Zipf-like filler plus planted words:
//! one in 10 events, two in ~5% each, one in 10 rows), queried by rare word, 2-word AND
//! and common word.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use brain::session::store::{SearchOrder, SearchQuery, Syntax};
use brain::session::{Payload, SessionId, Store, StoreOptions, SyncMode};
use rusqlite::{Connection, TransactionBehavior, params};

const SESSIONS: usize = 16;
const ROUNDS: usize = 3;
pub const MESSAGE: &str = "How do I keep a sourdough starter alive over a long weekend away? \
    I feed it once a day with equal parts flour and water, and it smells fine.";

pub fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let db = args
        .iter()
        .position(|a| a == "--db")
        .and_then(|i| args.get(i + 1));
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let appends = numbers.first().copied().unwrap_or(2_000);
    let corpus = numbers.get(1).copied().unwrap_or(100_000).max(100_000);
    if let Some(url) = db {
        return crate::store_pg::run(url, appends, corpus);
    }
    println!("# brain store benchmark: {appends} appends per run, median of {ROUNDS} rounds\n");
    println!("| sync | writers | impl | appends/s | p50 ms | p99 ms | max ms | brain/direct |");
    println!("|---|---|---|---|---|---|---|---|");
    for sync in [SyncMode::Full, SyncMode::Normal] {
        for writers in [1, 4] {
            bench_appends(sync, writers, appends)?;
        }
    }
    println!();
    bench_search(corpus)?;
    Ok(())
}

/// Latencies of one run and its wall time.
pub struct Run {
    pub latencies: Vec<Duration>,
    pub wall: Duration,
}

impl Run {
    pub fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

pub fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn bench_appends(
    sync: SyncMode,
    writers: usize,
    appends: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut brain_runs = Vec::new();
    let mut direct_runs = Vec::new();
    for _ in 0..ROUNDS {
        brain_runs.push(run_brain(sync, writers, appends)?);
        direct_runs.push(run_direct(sync, writers, appends)?);
    }
    let median = |runs: &mut Vec<Run>| -> Run {
        runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
        runs.swap_remove(runs.len() / 2)
    };
    let brain = median(&mut brain_runs);
    let direct = median(&mut direct_runs);
    let ratio = brain.rate() / direct.rate();
    for (name, run) in [("brain", &brain), ("direct", &direct)] {
        let mut l = run.latencies.clone();
        l.sort_unstable();
        println!(
            "| {sync:?} | {writers} | {name} | {:.0} | {:.3} | {:.3} | {:.3} | {} |",
            run.rate(),
            percentile(&l, 0.5),
            percentile(&l, 0.99),
            percentile(&l, 1.0),
            if name == "brain" {
                format!("{ratio:.2}")
            } else {
                String::new()
            },
        );
    }
    Ok(())
}

/// Runs `appends` calls of `op(writer, call)` spread over `writers` threads, timing each.
pub fn drive<F>(writers: usize, appends: usize, op: F) -> Run
where
    F: Fn(usize, usize) + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let op = Arc::clone(&op);
            thread::spawn(move || {
                (0..appends / writers)
                    .map(|i| {
                        let t = Instant::now();
                        op(w, i);
                        t.elapsed()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let latencies = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap_or_default())
        .collect();
    Run {
        latencies,
        wall: start.elapsed(),
    }
}

fn fresh_store(dir: &Path, sync: SyncMode) -> Result<Store, Box<dyn std::error::Error>> {
    Ok(Store::open(
        &dir.join("bench.db"),
        StoreOptions {
            sync,
            ..StoreOptions::default()
        },
    )?)
}

fn run_brain(
    sync: SyncMode,
    writers: usize,
    appends: usize,
) -> Result<Run, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(fresh_store(dir.path(), sync)?);
    let ids: Vec<SessionId> = (0..SESSIONS)
        .map(|_| store.create_session(None, String::new()).map(|s| s.id))
        .collect::<Result<_, _>>()?;
    let payload = Payload::UserMessage(brain::session::events::UserMessage {
        text: MESSAGE.into(),
    });
    let s = Arc::clone(&store);
    Ok(drive(writers, appends, move |w, i| {
        if let Err(e) = s.append(ids[(w * 7919 + i) % SESSIONS], &payload) {
            eprintln!("append failed: {e}");
        }
    }))
}

fn run_direct(
    sync: SyncMode,
    writers: usize,
    appends: usize,
) -> Result<Run, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = fresh_store(dir.path(), sync)?; // the same schema, migrated
    let ids: Vec<String> = (0..SESSIONS)
        .map(|_| {
            store
                .create_session(None, String::new())
                .map(|s| s.id.to_string())
        })
        .collect::<Result<_, _>>()?;
    drop(store);
    let conn = Connection::open(dir.path().join("bench.db"))?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.pragma_update(
        None,
        "synchronous",
        if sync == SyncMode::Full {
            "FULL"
        } else {
            "NORMAL"
        },
    )?;
    let conn = Arc::new(Mutex::new(conn));
    let payload = serde_json::json!({ "text": MESSAGE }).to_string();
    let run = drive(writers, appends, move |w, i| {
        let mut c = conn.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = direct_append(&mut c, &ids[(w * 7919 + i) % SESSIONS], &payload) {
            eprintln!("direct append failed: {e}");
        }
    });
    drop(dir);
    Ok(run)
}

fn direct_append(conn: &mut Connection, id: &str, payload: &str) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = brain::clock::Clock::system().now_string();
    let exists: bool = tx
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)")?
        .query_row([id], |r| r.get(0))?;
    if exists {
        tx.prepare_cached(
            "INSERT INTO session_events (session_n, seq, id, kind, payload, created_at)
             SELECT s.n,
                 (SELECT COALESCE(MAX(seq), 0) + 1 FROM session_events WHERE session_n = s.n),
                 (SELECT COALESCE(MAX(id), 0) + 1 FROM session_events),
                 'user_message', ?2, ?3
             FROM sessions s WHERE s.id = ?1
             RETURNING seq",
        )?
        .query_row(params![id, payload, now], |r| r.get::<_, i64>(0))?;
        tx.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?
            .execute(params![id, now])?;
    }
    tx.commit()
}

/// A deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Filler vocabulary: pronounceable made-up words, drawn log-uniformly (Zipf-like).
fn filler_word(rng: &mut Rng) -> String {
    const SYL: [&str; 16] = [
        "ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "ve", "zu", "ba", "de", "fo", "gi", "ha",
        "ju",
    ];
    let rank = (4000f64.powf(rng.below(1_000_000) as f64 / 1_000_000.0)) as u64;
    let mut w = String::new();
    let mut r = rank + 17;
    while r > 0 {
        w.push_str(SYL[(r % 16) as usize]);
        r /= 16;
    }
    w
}

/// The search queries: a rare word, two words of ~5% each, a word in 10% of events.
pub const QUERIES: [(&str, &str); 3] = [
    ("rare word (10 events)", "zyzzyva"),
    ("2-word AND (~5% each)", "harbour lantern"),
    ("common word (10%)", "common"),
];

fn bench_search(corpus: usize) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = fresh_store(dir.path(), SyncMode::Normal)?;
    let build = Instant::now();
    build_corpus(&store, corpus)?;
    let db_mib = std::fs::metadata(dir.path().join("bench.db"))?.len() as f64 / 1048576.0;
    println!(
        "search corpus: {corpus} events built in {:.1} s ({db_mib:.0} MiB before checkpoint)\n",
        build.elapsed().as_secs_f64()
    );
    println!(
        "| query | hits (limit 20) | before: rank every match, p50 ms | brain best first p50 ms | brain newest first p50 ms | best first max ms |"
    );
    println!("|---|---|---|---|---|---|");
    // "Before" is the statement brain ran until the rank window (bm25 over every match),
    // issued straight through rusqlite on its own connection; brain's two orders go
    // through the store (plain-text → FTS5, snippet parsing, the pool, row mapping).
    let raw = Connection::open(dir.path().join("bench.db"))?;
    for (name, text) in QUERIES {
        let best = SearchQuery {
            text: text.into(),
            syntax: Syntax::Plain,
            limit: 20,
            offset: 0,
            order: SearchOrder::Relevance,
            stem: false,
        };
        let recent = SearchQuery {
            order: SearchOrder::Recent,
            ..best.clone()
        };
        let hits = store.search(&best)?.len();
        let expr = brain::session::search::plain_to_fts(text).ok_or("empty query")?;
        let (mut before, mut ours, mut newest) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..30 {
            let t = Instant::now();
            raw_search(&raw, &expr)?;
            before.push(t.elapsed());
            let t = Instant::now();
            let _ = store.search(&best);
            ours.push(t.elapsed());
            let t = Instant::now();
            let _ = store.search(&recent);
            newest.push(t.elapsed());
        }
        for v in [&mut before, &mut ours, &mut newest] {
            v.sort_unstable();
        }
        println!(
            "| {name} | {hits} | {:.2} | {:.2} | {:.2} | {:.2} |",
            percentile(&before, 0.5),
            percentile(&ours, 0.5),
            percentile(&newest, 0.5),
            percentile(&ours, 1.0)
        );
    }
    Ok(())
}

/// Appends `corpus` generated messages over 200 sessions, in transactions of 2,000 (the
/// same words and seed on every store, so queries hit the same events).
pub fn build_corpus(store: &Store, corpus: usize) -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let sessions: Vec<SessionId> = (0..200)
        .map(|_| {
            store
                .create_session(Some("bench".into()), String::new())
                .map(|s| s.id)
        })
        .collect::<Result<_, _>>()?;
    let batch = 2_000;
    for start in (0..corpus).step_by(batch) {
        store.write(|w| {
            for n in start..(start + batch).min(corpus) {
                let mut words: Vec<String> = (0..25 + rng.below(20))
                    .map(|_| filler_word(&mut rng))
                    .collect();
                if n % 10 == 0 {
                    words.push("common".into());
                }
                if rng.below(20) == 0 {
                    words.push("harbour".into());
                }
                if rng.below(20) == 0 {
                    words.push("lantern".into());
                }
                if n % (corpus / 10) == 7 {
                    words.push("zyzzyva".into());
                }
                let text = words.join(" ");
                let payload = if n % 2 == 0 {
                    Payload::UserMessage(brain::session::events::UserMessage { text })
                } else {
                    Payload::AssistantTurn(brain::session::events::AssistantTurn {
                        turn: n as u64,
                        attempt: 1,
                        text,
                        reasoning: None,
                        provider: "bench".into(),
                        model: "bench".into(),
                        finish_reason: Some("stop".into()),
                        usage: Default::default(),
                        duration_ms: 0,
                        ledger_id: None,
                        steps: 1,
                    })
                };
                w.append(sessions[n % sessions.len()], &payload)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The search statement before the rank window (bm25 over every match), with fixed
/// markers, rows read and dropped.
fn raw_search(conn: &Connection, expr: &str) -> rusqlite::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "SELECT s.id, s.title, e.seq, e.kind, e.created_at,
                snippet(session_search, 0, '[', ']', '…', 16)
         FROM session_search
         JOIN session_events e ON e.id = session_search.rowid
         JOIN sessions s ON s.n = e.session_n
         WHERE session_search MATCH ?1
         ORDER BY session_search.rank, s.id, e.seq
         LIMIT 20 OFFSET 0",
    )?;
    let rows = stmt.query_map([expr], |r| r.get::<_, String>(0))?;
    Ok(rows.count())
}
