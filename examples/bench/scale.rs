//! Issue 19's table: every user-facing read on the full-size corpus (see `corpus`), and
//! where its bytes go.
//!
//! ```sh
//! cargo build --release --bin brain --examples
//! ./target/release/examples/bench scale [--sessions 100000] [--events 10000000] [--out DB]
//! ./target/release/examples/bench size [--out DB]     # dbstat: bytes per event per object
//! ```
//!
//! `scale` builds the corpus if it is missing (or its parameters differ), opens it with
//! brain's store (which migrates it), and takes medians of [`RUNS`] of each read.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brain::session::cursor::Cursor;
use brain::session::projection::{llm_context, ui_transcript};
use brain::session::store::{ListQuery, SearchOrder, SearchQuery, Syntax};
use brain::session::{SessionId, Store, StoreOptions};
use brain::tokens::Estimator;
use rusqlite::Connection;

use crate::corpus;
use crate::support::{Res, examples_dir, median, mock, ms, spawn};

const RUNS: usize = 30;
const PAGE_ITEMS: usize = 500;
const LIST_LIMIT: u32 = 50;
const DEEP_SESSIONS: usize = 1_000;

struct Args {
    sessions: u64,
    events: u64,
    out: PathBuf,
}

fn args(a: &[String]) -> Res<Args> {
    let mut r = Args {
        sessions: 100_000,
        events: 10_000_000,
        out: PathBuf::from("target/bench-corpus/10m.db"),
    };
    let mut it = a.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--sessions" => r.sessions = value()?.parse()?,
            "--events" => r.events = value()?.parse()?,
            "--out" => r.out = PathBuf::from(value()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(r)
}

/// Median of `RUNS` timed runs after one warm-up.
fn timed<T>(mut f: impl FnMut() -> Res<T>) -> Res<f64> {
    let mut times: Vec<Duration> = Vec::new();
    for i in 0..=RUNS {
        let t = Instant::now();
        f()?;
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    Ok(ms(median(&mut times)))
}

pub fn run(a: &[String]) -> Res<()> {
    let a = args(a)?;
    let params = corpus::ensure(&a.out, a.sessions, a.events, 19)?;
    let long: SessionId = params
        .long_session
        .parse()
        .map_err(|_| "the corpus names no long session")?;
    let opened = Instant::now();
    let store = Store::open(&a.out, StoreOptions::default())?;
    println!(
        "corpus {}: {} sessions, {} events (built in {:.0} s at V{}); opened and migrated in {:.0} ms\n",
        a.out.display(),
        params.sessions,
        params.events,
        params.build_seconds,
        params.schema_at_build,
        ms(opened.elapsed())
    );
    println!("| read | median ms | target |");
    println!("|---|---|---|");
    let first = ListQuery {
        limit: LIST_LIMIT,
        ..ListQuery::default()
    };
    let t = timed(|| Ok(store.list_sessions(&first)?))?;
    println!("| session list, first page (50) | {t:.2} | ≤ 5 |");
    let deep = deep_cursor(&store)?;
    let deep_q = ListQuery {
        before: Some(deep),
        ..first.clone()
    };
    let t = timed(|| Ok(store.list_sessions(&deep_q)?))?;
    println!("| session list, a page {DEEP_SESSIONS} sessions deep | {t:.2} | ≤ 5 |");
    for ((name, text), target) in corpus::QUERY_WORDS.iter().zip([5, 50, 100, 100]) {
        for order in [SearchOrder::Relevance, SearchOrder::Recent] {
            let q = SearchQuery {
                text: (*text).into(),
                syntax: Syntax::Plain,
                limit: 20,
                offset: 0,
                order,
                stem: false,
            };
            let hits = store.search(&q)?.len();
            let t = timed(|| Ok(store.search(&q)?))?;
            println!(
                "| search, {name} (`{text}`), {} ({hits} hits) | {t:.2} | ≤ {target} |",
                if order == SearchOrder::Recent {
                    "newest first"
                } else {
                    "best first"
                }
            );
        }
    }
    // The oldest page ends before the 501st item.
    let head = ui_transcript(&store.events(long, 0, Some(5_000))?, None);
    let oldest_before = head.get(PAGE_ITEMS).map_or(u64::MAX, |i| i.seq);
    for (name, before) in [("newest", i64::MAX as u64), ("oldest", oldest_before)] {
        let t = timed(|| {
            let page = store.transcript_page(long, before, PAGE_ITEMS, None)?;
            if page.items.len() != PAGE_ITEMS {
                return Err(format!("a page of {} items", page.items.len()).into());
            }
            Ok(())
        })?;
        println!("| transcript page (500 items), 100k-event session, {name} | {t:.2} | ≤ 10 |");
    }
    let estimator = Estimator::new();
    let t = timed(|| {
        let events = store.events_for_context(long)?;
        let ctx = llm_context(&events);
        Ok(estimator.context(&ctx))
    })?;
    println!("| LLM context build of that session | {t:.2} | ≤ 2 |");
    drop(store);
    let (first, t) = start_to_listening(&a.out)?;
    println!("| start to listening (`brain serve`, median of 7) | {t:.1} | ≤ 100 |");
    // The first start checks what was filed since the last one (all of history right
    // after V16); the later ones find only what the earlier ones left.
    println!("| of which the first start (`brain serve`) | {first:.1} | |");
    let bytes = file_bytes(&a.out)?;
    println!(
        "| bytes on disk per event ({:.0} MiB / {} events) | {:.0} | ≤ 400 |",
        bytes as f64 / 1048576.0,
        params.events,
        bytes as f64 / params.events as f64
    );
    Ok(())
}

/// The cursor after the first `DEEP_SESSIONS` sessions of the list.
fn deep_cursor(store: &Store) -> Res<Cursor> {
    let mut q = ListQuery {
        limit: 200,
        ..ListQuery::default()
    };
    for _ in 0..DEEP_SESSIONS / 200 {
        q.before = Some(store.list_sessions(&q)?.next.ok_or("fewer sessions")?);
    }
    q.before.ok_or_else(|| "no cursor".into())
}

fn file_bytes(db: &Path) -> Res<u64> {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    Ok(std::fs::metadata(db)?.len() + std::fs::metadata(PathBuf::from(wal)).map_or(0, |m| m.len()))
}

/// The first start's time, and the median of 7 (the first among them).
fn start_to_listening(db: &Path) -> Res<(f64, f64)> {
    let bin = examples_dir()?
        .parent()
        .ok_or("no target dir")?
        .join("brain");
    let m = mock(&[])?;
    let mut starts = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        let p = spawn(
            bin.clone(),
            &[
                "--db",
                db.to_str().ok_or("path")?,
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--provider-url",
                &m.url,
            ],
        )?;
        starts.push(started.elapsed());
        drop(p);
    }
    let first = ms(starts[0]);
    Ok((first, ms(median(&mut starts))))
}

/// Where the bytes go: `dbstat` per table and index, per event.
pub fn size(a: &[String]) -> Res<()> {
    let a = args(a)?;
    let conn = Connection::open_with_flags(&a.out, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let events: f64 = conn.query_row("SELECT count(*) FROM session_events", [], |r| r.get(0))?;
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let (payload, text): (f64, f64) = conn.query_row(
        "SELECT sum(length(payload)), sum(length(search_text)) FROM session_events",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    println!(
        "{} events, page size {page}; payload text {:.0} bytes/event, searchable text {:.0}\n",
        events,
        payload / events,
        text / events
    );
    println!("| object | bytes/event | of which unused | overflow pages |");
    println!("|---|---|---|---|");
    let mut stmt = conn.prepare(
        "SELECT name, sum(pgsize), sum(unused), sum(pagetype = 'overflow')
         FROM dbstat GROUP BY name ORDER BY 2 DESC",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, f64>(1)?,
            r.get::<_, f64>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    let mut total = 0.0;
    for row in rows {
        let (name, bytes, unused, overflow) = row?;
        total += bytes;
        if bytes / events >= 0.05 {
            println!(
                "| {name} | {:.1} | {:.1} | {overflow} |",
                bytes / events,
                unused / events
            );
        }
    }
    println!("| **total** | **{:.1}** | | |", total / events);
    Ok(())
}
