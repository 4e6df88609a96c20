//! I1 and I5 against real process death: a child process appends in a loop and is killed
//! with SIGKILL at random moments; after each kill the database must open, pass SQLite's
//! integrity check, keep gapless seqs, hold no half-written event, and keep every event
//! the child saw committed.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use brain::session::{Decoded, Payload, SessionId, Store, StoreOptions};

use crate::support::assert_gapless;

const CHILD_DB_VAR: &str = "BRAIN_TEST_CRASH_CHILD_DB";
const KILLS: usize = 24;
const KILLS_DURING_CHECKPOINTS: usize = 5;
const SESSIONS: usize = 3;
const WRITER_THREADS: usize = 3;

/// A message body whose integrity can be checked from the text alone:
/// `<len>:<seed>:` then `len` bytes derived from the seed.
fn checked_text(seed: u64, len: usize) -> String {
    let body: String = (0..len)
        .map(|i| (b'a' + ((seed as usize + i * 7) % 26) as u8) as char)
        .collect();
    format!("{len}:{seed}:{body}")
}

fn text_is_whole(text: &str) -> bool {
    let mut parts = text.splitn(3, ':');
    let (Some(len), Some(seed), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    match (len.parse::<usize>(), seed.parse::<u64>()) {
        (Ok(len), Ok(seed)) => checked_text(seed, len) == text && body.len() == len,
        _ => false,
    }
}

/// The child half: started by the test below with the database path in the environment.
/// Appends forever, printing `committed <session> <seq>` after each commit returns.
#[test]
#[ignore = "the child process of sigkill_at_random_moments_loses_nothing_committed"]
fn crash_child_appends_until_killed() {
    let Some(path) = std::env::var_os(CHILD_DB_VAR) else {
        return;
    };
    let store = Store::open(Path::new(&path), StoreOptions::default()).unwrap();
    let mut ids = store.session_ids().unwrap();
    while ids.len() < SESSIONS {
        ids.push(store.create_session(None, "sys".into()).unwrap().id);
    }
    // Several writer threads, so kills also land while a group commit is collecting.
    let store = std::sync::Arc::new(store);
    let writers: Vec<_> = (0..WRITER_THREADS)
        .map(|t| {
            let (store, ids) = (std::sync::Arc::clone(&store), ids.clone());
            std::thread::spawn(move || append_forever(&store, &ids, seed_now() + t as u64))
        })
        .collect();
    for w in writers {
        let _ = w.join();
    }
}

fn append_forever(store: &Store, ids: &[SessionId], seed: u64) {
    let stdout = std::io::stdout();
    let mut rng = seed | 1;
    loop {
        rng = next(rng);
        let id = ids[(rng % SESSIONS as u64) as usize];
        // Sizes up to ~24 KiB so some events span several pages and a kill can land
        // mid-write.
        let len = (rng >> 8) as usize % 24_000;
        let payload = Payload::UserMessage(brain::session::events::UserMessage {
            text: checked_text(rng >> 20, len),
        });
        let event = store.append(id, &payload).unwrap();
        let mut out = stdout.lock();
        writeln!(out, "committed {id} {}", event.seq).unwrap();
        out.flush().unwrap();
    }
}

fn seed_now() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    nanos | 1
}

/// xorshift64: enough randomness for kill timings, no extra crate.
fn next(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

#[test]
fn sigkill_at_random_moments_loses_nothing_committed() {
    kill_rounds(KILLS, 50, 400);
}

/// Kills that land after the first background checkpoint is due, some during one.
#[test]
fn sigkill_while_checkpoints_run_loses_nothing_committed() {
    let first = brain::session::store::sqlite::maintenance::CHECKPOINT_INTERVAL.as_millis() as u64;
    kill_rounds(KILLS_DURING_CHECKPOINTS, first + 100, 1_500);
}

/// `kills` rounds of: start the child, let it append for `min_ms` plus up to `spread_ms`,
/// SIGKILL it, check the database.
fn kill_rounds(kills: usize, min_ms: u64, spread_ms: u64) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let mut rng = seed_now();
    eprintln!("crash test seed {rng}");
    let mut committed: HashMap<SessionId, u64> = HashMap::new();
    for round in 0..kills {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash::crash_child_appends_until_killed",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DB_VAR, &db)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| {
                    let mut w = l.strip_prefix("committed ")?.split(' ');
                    Some((
                        w.next()?.parse::<SessionId>().ok()?,
                        w.next()?.parse::<u64>().ok()?,
                    ))
                })
                .collect::<Vec<_>>()
        });
        rng = next(rng);
        thread::sleep(Duration::from_millis(min_ms + rng % spread_ms));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        for (id, seq) in reader.join().unwrap() {
            let e = committed.entry(id).or_default();
            *e = (*e).max(seq);
        }
        check_database(&db, &committed, round);
    }
    let total: u64 = committed.values().sum();
    eprintln!("crash test: {kills} kills, {total} events acknowledged");
    assert!(
        total > kills as u64,
        "the child barely wrote ({total} events)"
    );
}

fn check_database(db: &Path, committed: &HashMap<SessionId, u64>, round: usize) {
    let raw = rusqlite::Connection::open(db).unwrap();
    let integrity: String = raw
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok", "round {round}");
    raw.execute(
        "INSERT INTO session_search (session_search) VALUES ('integrity-check')",
        [],
    )
    .unwrap_or_else(|e| panic!("round {round}: search index damaged: {e}"));
    drop(raw);

    let store = Store::open(db, StoreOptions::default()).unwrap();
    for id in store.session_ids().unwrap() {
        let events = store.events(id, 0, None).unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_gapless(&seqs);
        let newest = seqs.last().copied().unwrap_or(0);
        let acknowledged = committed.get(&id).copied().unwrap_or(0);
        assert!(
            newest >= acknowledged,
            "round {round}: {id} lost committed events ({newest} < {acknowledged})"
        );
        for e in &events[1..] {
            match e.decode() {
                Decoded::Known(Payload::UserMessage(m)) => assert!(
                    text_is_whole(&m.text),
                    "round {round}: half-written event {id} #{}",
                    e.seq
                ),
                other => panic!("round {round}: unexpected event {other:?}"),
            }
        }
    }
}

#[test]
fn checked_text_detects_damage() {
    let t = checked_text(42, 100);
    assert!(text_is_whole(&t));
    assert!(!text_is_whole(&t[..t.len() - 1]));
    assert!(!text_is_whole(&t.replace('a', "b")));
    assert!(!text_is_whole(""));
}
