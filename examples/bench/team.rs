//! Team mode under load (SPEC §16): 64 sessions × 10 turns, every session's turns one after
//! another and the sessions all at once, through two release `brain serve` processes on one
//! PostgreSQL (the sessions split across them, as a load balancer would), next to one
//! server on the same PostgreSQL and one on a SQLite file. The provider is `mock_llm` (its default answer, no delay), so
//! the figures are brain's own cost per turn: the writes of a turn (user message, answer,
//! ledger, post-turn memory and title), claims and streaming.
//!
//! ```sh
//! cargo build --release --bin brain --example mock_llm --example bench
//! cargo run --release --example bench -- team postgres://USER@HOST:PORT/postgres
//! ```
//!
//! The URL names a server where the user may create databases: the run creates
//! `brain_bench_team` there (dropped first if it exists, and at the end).

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::{Proc, Res, examples_dir, mock, ms, spawn, words};
use crate::testdb::with_database;

/// Sessions driven at once, and turns per session.
const SESSIONS: usize = 64;
const TURNS: usize = 10;
/// Words in each user message.
const MESSAGE_WORDS: usize = 20;
/// The database the run creates on the PostgreSQL server it is given.
const DATABASE: &str = "brain_bench_team";
/// How long one turn may take before the run fails.
const TURN_TIMEOUT: Duration = Duration::from_secs(120);

struct Figures {
    turns_per_s: f64,
    p50: Duration,
    p99: Duration,
}

pub fn run(args: &[String]) -> Res<()> {
    let admin_url = args
        .first()
        .ok_or("give a PostgreSQL URL (a server where you may create databases)")?;
    let provider = mock(&[])?;
    let dir = tempfile::tempdir()?;
    let sqlite = dir.path().join("team.db");
    let sqlite = sqlite.to_str().ok_or("a temp path that is not UTF-8")?;
    let one = serve(sqlite, &provider)?;
    let alone = drive(&[&one])?;
    drop(one);

    let mut admin = postgres::Client::connect(admin_url, postgres::NoTls)?;
    let fsync: String = admin.query_one("SHOW fsync", &[])?.try_get(0)?;
    let url = with_database(admin_url, DATABASE);
    let mut on_postgres = |servers: usize| -> Res<Figures> {
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE}"))?;
        admin.batch_execute(&format!("CREATE DATABASE {DATABASE}"))?;
        let running = (0..servers)
            .map(|_| serve(&url, &provider))
            .collect::<Res<Vec<Proc>>>()?;
        let figures = drive(&running.iter().collect::<Vec<_>>())?;
        drop(running);
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE}"))?;
        Ok(figures)
    };
    let single = on_postgres(1)?;
    let team = on_postgres(2)?;

    println!(
        "| {SESSIONS} sessions × {TURNS} turns, all sessions at once | turns/s | p50 turn | p99 turn |"
    );
    println!("|---|---|---|---|");
    for (name, f) in [
        ("one server, SQLite (--sync full)".to_owned(), alone),
        (format!("one server, PostgreSQL (fsync {fsync})"), single),
        (format!("two servers, one PostgreSQL (fsync {fsync})"), team),
    ] {
        println!(
            "| {name} | {:.0} | {:.1} ms | {:.1} ms |",
            f.turns_per_s,
            ms(f.p50),
            ms(f.p99)
        );
    }
    Ok(())
}

/// The release `brain serve` on `db`, with its defaults (post-turn work on).
fn serve(db: &str, provider: &Proc) -> Res<Proc> {
    let bin = examples_dir()?
        .parent()
        .ok_or("no target dir")?
        .join("brain");
    spawn(
        bin,
        &[
            "--db",
            db,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--provider-url",
            &provider.url,
        ],
    )
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(TURN_TIMEOUT))
        .build()
        .new_agent()
}

/// Creates the sessions (session i on server i mod n) and runs every session's turns on a
/// thread of its own: throughput over the whole run, and each turn's latency from its
/// request to its `end` frame.
fn drive(servers: &[&Proc]) -> Res<Figures> {
    let mut sessions = Vec::new();
    for i in 0..SESSIONS {
        let server = servers[i % servers.len()].url.clone();
        let resp = agent()
            .post(&format!("{server}/v1/sessions"))
            .header("Content-Type", "application/json")
            .send("{}")?;
        let created: Value = serde_json::from_str(&resp.into_body().read_to_string()?)?;
        let id = created["id"].as_str().ok_or("no session id")?.to_owned();
        sessions.push((server, id));
    }
    let started = Instant::now();
    let threads: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(i, (server, id))| {
            thread::spawn(move || -> Result<Vec<Duration>, String> {
                let agent = agent();
                let url = format!("{server}/v1/sessions/{id}/messages");
                let mut times = Vec::with_capacity(TURNS);
                for t in 0..TURNS {
                    let body = json!({"message": words(MESSAGE_WORDS, i * TURNS + t)});
                    let sent = Instant::now();
                    let resp = agent
                        .post(&url)
                        .header("Content-Type", "application/json")
                        .send(body.to_string())
                        .map_err(|e| e.to_string())?;
                    let status = resp.status().as_u16();
                    let text = resp
                        .into_body()
                        .read_to_string()
                        .map_err(|e| e.to_string())?;
                    if status != 200 || !text.contains(r#""status":"completed""#) {
                        return Err(format!("turn {t} of {id}: {status} {text}"));
                    }
                    times.push(sent.elapsed());
                }
                Ok(times)
            })
        })
        .collect();
    let mut times = Vec::with_capacity(SESSIONS * TURNS);
    for t in threads {
        times.extend(t.join().map_err(|_| "a client thread panicked")??);
    }
    let elapsed = started.elapsed();
    times.sort_unstable();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    Ok(Figures {
        turns_per_s: times.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    })
}
