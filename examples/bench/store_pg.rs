//! The store on PostgreSQL next to SQLite on the same machine (issue 21, SPEC §16):
//! appends with 1 and 8 writers (one session each), search on the `store` corpus, the
//! session list, a transcript page and a context build of a long session. Each measure runs
//! alternately on both stores and reports medians; the builders are `store`'s,
//! `transcript`'s and `projection`'s.
//!
//! ```sh
//! BRAIN_PG_TEST_FSYNC=on BRAIN_PG_TEST_PORT=55440 BRAIN_PG_TEST_DIR=/tmp/brain-pg-bench \
//!   bash .ci/postgres-up
//! cargo run --release --example bench -- store --db postgres://postgres@127.0.0.1:55440/postgres 4000 1000000
//! ```
//!
//! Each store gets a fresh database (SQLite: a temporary file; PostgreSQL: a database created
//! in the server the URL names, dropped at the end). Appends run SQLite at `--sync full`;
//! PostgreSQL's durability is the server's (fsync and synchronous_commit as it runs).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::testdb::{self, TestDb};
use brain::session::events::UserMessage;
use brain::session::store::{ListQuery, SearchOrder, SearchQuery, Syntax};
use brain::session::{Payload, SessionId, Store, StoreOptions, SyncMode};
use brain::tokens::Estimator;

use crate::store::{MESSAGE, QUERIES, Run, build_corpus, drive, percentile};
use crate::support::Res;
use crate::{projection, transcript};

const ROUNDS: usize = 3;
const RUNS: usize = 30;
/// Sessions beyond the corpus's 200, one message each, so the list has a deep page.
const LIST_SESSIONS: usize = 5_000;
const LIST_PAGE: u32 = 50;
/// The deep page starts after this many sessions.
const DEEP_AT: usize = 5_000;

/// A fresh database of either kind; the PostgreSQL one is dropped with it.
enum Db {
    Sqlite(tempfile::TempDir),
    Pg(TestDb),
}

impl Db {
    fn sqlite() -> Res<Db> {
        Ok(Db::Sqlite(tempfile::tempdir()?))
    }

    fn pg(admin_url: &str) -> Res<Db> {
        Ok(Db::Pg(testdb::create(admin_url)?))
    }

    fn open(&self, sync: SyncMode) -> Res<Store> {
        let options = StoreOptions {
            sync,
            ..StoreOptions::default()
        };
        Ok(match self {
            Db::Sqlite(dir) => Store::open(&dir.path().join("bench.db"), options)?,
            Db::Pg(db) => Store::open(Path::new(&db.url), options)?,
        })
    }
}

pub fn run(admin_url: &str, appends: usize, corpus: usize) -> Res<()> {
    println!("# store on PostgreSQL next to SQLite ({admin_url})\n");
    println!(
        "{appends} appends per run, median of {ROUNDS} alternating rounds; SQLite --sync full\n"
    );
    println!("| writers | store | appends/s | p50 ms | p99 ms | max ms | PostgreSQL / SQLite |");
    println!("|---|---|---|---|---|---|---|");
    for writers in [1, 8] {
        bench_appends(admin_url, writers, appends)?;
    }
    println!();
    reads(admin_url, corpus)
}

fn bench_appends(admin_url: &str, writers: usize, appends: usize) -> Res<()> {
    let (mut lite, mut pg) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        lite.push(appends_run(&Db::sqlite()?, writers, appends)?);
        pg.push(appends_run(&Db::pg(admin_url)?, writers, appends)?);
    }
    let median = |runs: &mut Vec<Run>| -> Run {
        runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
        runs.swap_remove(runs.len() / 2)
    };
    let (lite, pg) = (median(&mut lite), median(&mut pg));
    for (name, run) in [("SQLite", &lite), ("PostgreSQL", &pg)] {
        let mut l = run.latencies.clone();
        l.sort_unstable();
        println!(
            "| {writers} | {name} | {:.0} | {:.3} | {:.3} | {:.3} | {} |",
            run.rate(),
            percentile(&l, 0.5),
            percentile(&l, 0.99),
            percentile(&l, 1.0),
            if name == "PostgreSQL" {
                format!("{:.2}", pg.rate() / lite.rate())
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// `appends` appends from `writers` threads, each writing its own session.
fn appends_run(db: &Db, writers: usize, appends: usize) -> Res<Run> {
    let store = Arc::new(db.open(SyncMode::Full)?);
    let ids: Vec<SessionId> = (0..writers)
        .map(|_| store.create_session(None, String::new()).map(|s| s.id))
        .collect::<Result<_, _>>()?;
    let payload = Payload::UserMessage(UserMessage {
        text: MESSAGE.into(),
    });
    let s = Arc::clone(&store);
    Ok(drive(writers, appends, move |w, _| {
        if let Err(e) = s.append(ids[w], &payload) {
            eprintln!("append failed: {e}");
        }
    }))
}

/// What the reads run on: the search corpus, the list's extra sessions, a 100k-event
/// session for transcript pages and one with a compaction near its end for the context.
struct Loaded {
    store: Store,
    transcript: SessionId,
    oldest_before: u64,
    context: SessionId,
}

fn load(db: &Db, corpus: usize) -> Res<Loaded> {
    // Loading is not what is measured: SQLite loads at NORMAL (the store's own path).
    let store = db.open(SyncMode::Normal)?;
    let t = Instant::now();
    build_corpus(&store, corpus)?;
    let built = t.elapsed();
    for start in (0..LIST_SESSIONS).step_by(1_000) {
        store.write(|w| {
            for n in start..(start + 1_000).min(LIST_SESSIONS) {
                let id = w
                    .create_session(Some(format!("list {n}")), String::new())?
                    .id;
                w.append(
                    id,
                    &Payload::UserMessage(UserMessage {
                        text: MESSAGE.into(),
                    }),
                )?;
            }
            Ok(())
        })?;
    }
    let transcript = transcript::session(&store)?;
    let oldest_before = transcript::oldest_before(&store, transcript)?;
    let context = projection::session(&store, 100_000, true)?;
    if let Db::Pg(db) = db {
        // What autovacuum does a while after a load: statistics for the planner, hint bits
        // and the visibility map set. Without it the reads measure that work instead.
        let mut c = postgres::Client::connect(&db.url, postgres::NoTls)?;
        c.batch_execute("VACUUM ANALYZE")?;
    }
    println!(
        "loaded {}: corpus of {corpus} events in {:.1} s, everything in {:.1} s",
        match db {
            Db::Sqlite(_) => "SQLite",
            Db::Pg(_) => "PostgreSQL",
        },
        built.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    Ok(Loaded {
        store,
        transcript,
        oldest_before,
        context,
    })
}

/// Medians of `RUNS` runs of `f` on each store, alternating (after one warm-up each).
fn side(lite: &Loaded, pg: &Loaded, mut f: impl FnMut(&Loaded) -> Res<()>) -> Res<(f64, f64)> {
    let (mut a, mut b): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    f(lite)?;
    f(pg)?;
    for _ in 0..RUNS {
        for (l, v) in [(lite, &mut a), (pg, &mut b)] {
            let t = Instant::now();
            f(l)?;
            v.push(t.elapsed());
        }
    }
    a.sort_unstable();
    b.sort_unstable();
    Ok((percentile(&a, 0.5), percentile(&b, 0.5)))
}

fn row(name: &str, (lite, pg): (f64, f64)) {
    println!("| {name} | {lite:.2} | {pg:.2} | {:.2} |", pg / lite);
}

fn reads(admin_url: &str, corpus: usize) -> Res<()> {
    let (lite_db, pg_db) = (Db::sqlite()?, Db::pg(admin_url)?);
    let lite = load(&lite_db, corpus)?;
    let pg = load(&pg_db, corpus)?;
    println!("\n| read (median of {RUNS}) | SQLite ms | PostgreSQL ms | PostgreSQL / SQLite |");
    println!("|---|---|---|---|");
    for (name, text) in QUERIES {
        for (order, label) in [
            (SearchOrder::Relevance, "best first"),
            (SearchOrder::Recent, "newest first"),
        ] {
            let q = SearchQuery {
                text: text.into(),
                syntax: Syntax::Plain,
                limit: 20,
                offset: 0,
                order,
                stem: false,
            };
            let hits = (lite.store.search(&q)?.len(), pg.store.search(&q)?.len());
            let times = side(&lite, &pg, |l| {
                l.store.search(&q)?;
                Ok(())
            })?;
            row(
                &format!("search {name}, {label} (hits {} / {})", hits.0, hits.1),
                times,
            );
        }
    }
    let first = ListQuery {
        before: None,
        limit: LIST_PAGE,
        archived: None,
        query: None,
    };
    row(
        "list, first page of 50",
        side(&lite, &pg, |l| {
            l.store.list_sessions(&first)?;
            Ok(())
        })?,
    );
    let deep = |l: &Loaded| -> Res<ListQuery> {
        let mut q = first.clone();
        for _ in 0..DEEP_AT / LIST_PAGE as usize {
            q.before = l.store.list_sessions(&q)?.next;
        }
        Ok(q)
    };
    let (deep_lite, deep_pg) = (deep(&lite)?, deep(&pg)?);
    row(
        &format!("list, a page after {DEEP_AT} sessions"),
        side(&lite, &pg, |l| {
            let q = if std::ptr::eq(l, &lite) {
                &deep_lite
            } else {
                &deep_pg
            };
            l.store.list_sessions(q)?;
            Ok(())
        })?,
    );
    for (name, oldest) in [("newest", false), ("oldest", true)] {
        row(
            &format!(
                "transcript page of {} items, {name} (100k-event session)",
                transcript::LIMIT
            ),
            side(&lite, &pg, |l| {
                let before = if oldest {
                    l.oldest_before
                } else {
                    i64::MAX as u64
                };
                l.store
                    .transcript_page(l.transcript, before, transcript::LIMIT, None)?;
                Ok(())
            })?,
        );
    }
    let estimator = Estimator::new();
    row(
        "context build (100k events, compaction near the end)",
        side(&lite, &pg, |l| {
            projection::context_once(&l.store, &estimator, l.context).map(drop)
        })?,
    );
    Ok(())
}
