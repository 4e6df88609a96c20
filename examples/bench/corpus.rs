//! A reusable corpus at the scale of years of daily use (issue 19): N sessions, M events,
//! written through brain's own writer (`Writer::import_session`: the same rows, cache rows,
//! FTS rows and indexes an append writes, with the generated timestamps kept), in big
//! `--sync normal` transactions. Deterministic (seeded). Built once under `target/` with
//! its parameters beside it (`<db>.params.json`); a later run with the same parameters
//! reuses it.
//!
//! ```sh
//! cargo run --release --example bench -- corpus --sessions 100000 --events 10000000 \
//!     --out target/bench-corpus/10m.db
//! ```
//!
//! What it holds:
//! - Sessions of long-tailed length (log-normal, median ~50 events) whose starts spread
//!   over three years, plus one session of [`LONG_SESSION_EVENTS`] events.
//! - Turns: a user message; sometimes tool calls (`tool_execution`, a preview of the
//!   result) and, rarely, a permission question and its answer; the answer streamed in
//!   `pending_state` checkpoints (one per ~30 words, as brain checkpoints every 2 s) and
//!   then its `assistant_turn` with usage; 3% of attempts interrupted (checkpoints only),
//!   1% failed (`turn_failed`); turn memory after 30% of answers; an automatic
//!   `session_titled` after the first turn; a `compaction_applied` every ~80 events; 5% of
//!   sessions archived.
//! - Text: words drawn from a Zipf vocabulary (s = 1, 50,000 made-up words), lengths
//!   log-normal (a few words to a few KB, long-tailed).
//! - Planted words the benchmarks query ([`QUERY_WORDS`]): `common` in 10% of user
//!   messages, answers and summaries, `harbour` and `lantern` in 5% each, `zyzzyva` in
//!   one of ~800,000 (checkpoints carry their answer's words).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use brain::session::events::{
    AssistantTurn, CompactionApplied, Event, PendingState, PermissionRequested, PermissionResolved,
    ResultDigest, SessionArchived, SessionStarted, SessionTitled, TitledBy, ToolExecution,
    TurnFailed, TurnMemory, Usage, UserMessage,
};
use brain::session::{Payload, SessionId, Store, StoreOptions, SyncMode};
use serde::{Deserialize, Serialize};

use crate::support::Res;

/// The long agent session's length.
pub const LONG_SESSION_EVENTS: u64 = 100_000;
/// Bumped whenever the generator's output changes, so an old corpus is not reused.
const GENERATOR_VERSION: u32 = 1;
/// Events per write transaction.
const BATCH_EVENTS: usize = 50_000;
/// A compaction after this many events since the previous one.
const COMPACTION_EVERY_EVENTS: usize = 80;
/// Vocabulary size of the Zipf filler.
const VOCABULARY: usize = 50_000;
/// The words the search benchmarks ask for. At 10M events: `zyzzyva` 5 events, `harbour`
/// and `lantern` together 8,281, `common` 337,280 (3.4% of events), `halo` (the Zipf
/// vocabulary's 15th word, not planted) 917,398 (9.2%).
pub const QUERY_WORDS: [(&str, &str); 4] = [
    ("rare word", "zyzzyva"),
    ("two words", "harbour lantern"),
    ("a planted word in 3% of events", "common"),
    ("a word in 9% of events", "halo"),
];
/// First session's start: three years of history before the last.
const START_MICROS: i64 = 1_701_388_800_000_000; // 2023-12-01T00:00:00Z
const SPAN_MICROS: i64 = 3 * 365 * 24 * 3600 * 1_000_000;

/// What a corpus was built from; a corpus is reused only when these match.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    pub generator: u32,
    pub sessions: u64,
    pub events: u64,
    pub seed: u64,
    /// Filled in by the build (not compared).
    #[serde(default)]
    pub long_session: String,
    #[serde(default)]
    pub schema_at_build: i64,
    #[serde(default)]
    pub build_seconds: f64,
}

impl Params {
    fn same_corpus(&self, other: &Params) -> bool {
        (self.generator, self.sessions, self.events, self.seed)
            == (other.generator, other.sessions, other.events, other.seed)
    }
}

pub fn run(args: &[String]) -> Res<()> {
    let mut sessions = 100_000u64;
    let mut events = 10_000_000u64;
    let mut seed = 19u64;
    let mut out = PathBuf::from("target/bench-corpus/10m.db");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--sessions" => sessions = value()?.parse()?,
            "--events" => events = value()?.parse()?,
            "--seed" => seed = value()?.parse()?,
            "--out" => out = PathBuf::from(value()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let params = ensure(&out, sessions, events, seed)?;
    let bytes = std::fs::metadata(&out)?.len();
    println!(
        "corpus {}: {} sessions, {} events, built in {:.0} s at schema V{}, {:.0} MiB, {:.0} bytes/event; long session {}",
        out.display(),
        params.sessions,
        params.events,
        params.build_seconds,
        params.schema_at_build,
        bytes as f64 / 1048576.0,
        bytes as f64 / params.events as f64,
        params.long_session
    );
    Ok(())
}

fn params_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".params.json");
    PathBuf::from(p)
}

/// The corpus at `out`, built unless one with the same parameters is there.
pub fn ensure(out: &Path, sessions: u64, events: u64, seed: u64) -> Res<Params> {
    let wanted = Params {
        generator: GENERATOR_VERSION,
        sessions,
        events,
        seed,
        long_session: String::new(),
        schema_at_build: 0,
        build_seconds: 0.0,
    };
    if let Ok(text) = std::fs::read_to_string(params_path(out))
        && let Ok(found) = serde_json::from_str::<Params>(&text)
        && found.same_corpus(&wanted)
        && out.is_file()
    {
        eprintln!("reusing {} (same parameters)", out.display());
        return Ok(found);
    }
    if events < LONG_SESSION_EVENTS + sessions * 2 {
        return Err(format!(
            "{events} events cannot fill {sessions} sessions and a {LONG_SESSION_EVENTS}-event one"
        )
        .into());
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    for suffix in ["", "-wal", "-shm", ".params.json"] {
        let mut p = out.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    let started = Instant::now();
    let long_session = build(out, &wanted)?;
    let store = Store::open(out, StoreOptions::default())?;
    let params = Params {
        long_session: long_session.to_string(),
        schema_at_build: brain::session::store::sqlite::schema::latest_version(),
        build_seconds: started.elapsed().as_secs_f64(),
        ..wanted
    };
    drop(store);
    std::fs::write(params_path(out), serde_json::to_string_pretty(&params)?)?;
    Ok(params)
}

/// Generates on one thread, writes on this one.
fn build(out: &Path, p: &Params) -> Res<SessionId> {
    let store = Store::open(
        out,
        StoreOptions {
            sync: SyncMode::Normal,
            ..StoreOptions::default()
        },
    )?;
    let lengths = session_lengths(p);
    let long_index = lengths.len() / 2;
    let long_id = session_id(p.seed, long_index, start_of(long_index, lengths.len()));
    let (tx, rx) = mpsc::sync_channel::<Vec<(SessionId, Vec<Event>)>>(4);
    let seed = p.seed;
    let producer = std::thread::spawn(move || {
        let mut g = Gen::new(seed);
        let total = lengths.len();
        let mut batch = Vec::new();
        let mut in_batch = 0;
        for (i, &len) in lengths.iter().enumerate() {
            let events = g.session(i, total, len);
            in_batch += events.len();
            batch.push((session_id(seed, i, start_of(i, total)), events));
            if in_batch >= BATCH_EVENTS {
                if tx.send(std::mem::take(&mut batch)).is_err() {
                    return;
                }
                in_batch = 0;
            }
        }
        let _ = tx.send(batch);
    });
    let mut written = 0u64;
    let t = Instant::now();
    for batch in rx {
        store.write(|w| {
            for (id, events) in &batch {
                w.import_session(*id, events)?;
            }
            Ok(())
        })?;
        let before = written;
        written += batch.iter().map(|(_, e)| e.len() as u64).sum::<u64>();
        if written / 1_000_000 != before / 1_000_000 {
            eprintln!(
                "{written} events, {:.0} s, {:.0} events/s",
                t.elapsed().as_secs_f64(),
                written as f64 / t.elapsed().as_secs_f64()
            );
        }
    }
    producer
        .join()
        .map_err(|_| "the generator thread panicked")?;
    if written != p.events {
        return Err(format!("wrote {written} events, expected {}", p.events).into());
    }
    Ok(long_id)
}

/// Each session's event count: one long session, the rest log-normal, summing exactly.
fn session_lengths(p: &Params) -> Vec<u64> {
    let mut rng = Rng(p.seed ^ 0x5EED_1E46);
    let n = p.sessions as usize;
    let weights: Vec<f64> = (0..n).map(|_| (rng.normal() * 1.1).exp()).collect();
    let sum: f64 = weights.iter().sum();
    let rest = p.events - LONG_SESSION_EVENTS - p.sessions * 2;
    let mut lengths: Vec<u64> = weights
        .iter()
        .map(|w| 2 + (w / sum * rest as f64) as u64)
        .collect();
    lengths[n / 2] = LONG_SESSION_EVENTS;
    let mut total: u64 = lengths.iter().sum();
    let mut i = 0;
    while total < p.events {
        if i % n != n / 2 {
            lengths[i % n] += 1;
            total += 1;
        }
        i += 1;
    }
    lengths
}

fn start_of(i: usize, total: usize) -> i64 {
    START_MICROS + (SPAN_MICROS as f64 * i as f64 / total as f64) as i64
}

/// A uuid v7 from the session's start and the seed: ids sort by creation, as brain's do.
fn session_id(seed: u64, i: usize, start_micros: i64) -> SessionId {
    let mut rng = Rng(seed.wrapping_mul(31).wrapping_add(i as u64 + 1) | 1);
    let mut random = [0u8; 10];
    for b in &mut random {
        *b = rng.next() as u8;
    }
    let uuid = uuid::Builder::from_unix_timestamp_millis((start_micros / 1000) as u64, &random)
        .into_uuid();
    uuid.hyphenated()
        .to_string()
        .parse()
        .unwrap_or_else(|_| SessionId::generate())
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

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u = self.unit().max(1e-12);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// A log-normal count with this median, clamped.
    fn lognormal(&mut self, median: f64, sigma: f64, max: usize) -> usize {
        ((median * (self.normal() * sigma).exp()) as usize).clamp(1, max)
    }
}

/// The text and event generator.
struct Gen {
    rng: Rng,
    vocabulary: Vec<String>,
    /// Cumulative Zipf weights over `vocabulary`.
    cumulative: Vec<f64>,
    text_events: u64,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        const SYL: [&str; 24] = [
            "ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "ve", "zu", "ba", "de", "fo", "gi",
            "ha", "ju", "mar", "ten", "dis", "con", "ber", "sel", "tra", "por",
        ];
        let vocabulary = (0..VOCABULARY)
            .map(|rank| {
                let mut w = String::new();
                let mut r = rank + 24;
                while r > 0 {
                    w.push_str(SYL[r % 24]);
                    r /= 24;
                }
                w
            })
            .collect();
        let mut acc = 0.0;
        let cumulative = (1..=VOCABULARY)
            .map(|r| {
                acc += 1.0 / r as f64;
                acc
            })
            .collect();
        Gen {
            rng: Rng(seed | 1),
            vocabulary,
            cumulative,
            text_events: 0,
        }
    }

    fn word(&mut self) -> &str {
        let total = self.cumulative[VOCABULARY - 1];
        let x = self.rng.unit() * total;
        let i = self.cumulative.partition_point(|&c| c < x);
        &self.vocabulary[i.min(VOCABULARY - 1)]
    }

    /// `n` words of filler, with sentence breaks.
    fn words(&mut self, n: usize) -> String {
        let mut s = String::with_capacity(n * 7);
        for i in 0..n {
            if i > 0 {
                s.push_str(if self.rng.below(12) == 0 { ". " } else { " " });
            }
            let w = self.word().to_owned();
            s.push_str(&w);
        }
        s
    }

    /// Text of a searchable event, with the planted query words.
    fn text(&mut self, median_words: f64, max_words: usize) -> String {
        let n = self.rng.lognormal(median_words, 1.0, max_words);
        let mut t = self.words(n);
        self.plant(&mut t);
        t
    }

    fn plant(&mut self, t: &mut String) {
        self.text_events += 1;
        if self.rng.chance(0.10) {
            t.push_str(" common");
        }
        if self.rng.chance(0.05) {
            t.push_str(" harbour");
        }
        if self.rng.chance(0.05) {
            t.push_str(" lantern");
        }
        // Ten events, spread over the corpus (the 10M build has ~8M text-bearing events).
        if self.text_events % 797_003 == 500 {
            t.push_str(" zyzzyva");
        }
    }

    /// One session's events, exactly `len` of them.
    fn session(&mut self, index: usize, total: usize, len: u64) -> Vec<Event> {
        let long = len == LONG_SESSION_EVENTS;
        let mut now = start_of(index, total) + self.rng.below(3_600_000_000) as i64;
        let mut out: Vec<Event> = Vec::with_capacity(len as usize);
        let system = match self.rng.below(5) {
            0 => String::new(),
            1 => "You are a helpful assistant.".to_owned(),
            _ => {
                let n = 8 + self.rng.below(30) as usize;
                format!("You are {}.", self.words(n))
            }
        };
        let push = |out: &mut Vec<Event>, now: &mut i64, rng: &mut Rng, p: Payload| {
            // Seconds apart within a turn, minutes to days between some turns.
            *now += 1_000_000 + rng.below(20_000_000) as i64;
            if rng.chance(0.02) && !long {
                *now += rng.below(86_400_000_000) as i64;
            }
            out.push(Event {
                seq: out.len() as u64 + 1,
                kind: p.kind().to_owned(),
                payload: p.to_json(),
                created_at: brain::clock::format_timestamp(
                    jiff::Timestamp::from_microsecond(*now).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
                ),
            });
        };
        let p = Payload::SessionStarted(SessionStarted {
            title: None,
            system,
            forked_from: None,
            imported_from: None,
        });
        push(&mut out, &mut now, &mut self.rng, p);
        let mut last_compaction = 0usize;
        let mut call = 0u64;
        while (out.len() as u64) < len {
            let turn = out.len() as u64 + 1;
            let text = self.text(14.0, 900);
            let p = Payload::UserMessage(UserMessage { text });
            push(&mut out, &mut now, &mut self.rng, p);
            let mut steps = 1;
            if self.rng.chance(0.15) {
                if self.rng.chance(0.1) {
                    call += 1;
                    let call_id = format!("call_{call}");
                    let p = Payload::PermissionRequested(PermissionRequested {
                        turn,
                        attempt: 1,
                        call_id: call_id.clone(),
                        name: "fs__write_file".into(),
                        args: format!("{{\"path\":\"/tmp/{}.txt\"}}", self.words(1)),
                    });
                    push(&mut out, &mut now, &mut self.rng, p);
                    let p = Payload::PermissionResolved(PermissionResolved {
                        turn: Some(turn),
                        attempt: Some(1),
                        call_id,
                        decision: "allow".into(),
                        by: "user".into(),
                        remember: false,
                        answer_id: None,
                    });
                    push(&mut out, &mut now, &mut self.rng, p);
                }
                for step in 1..=1 + self.rng.below(3) as u32 {
                    call += 1;
                    steps += 1;
                    let n = self.rng.lognormal(60.0, 1.0, 600);
                    let preview = self.words(n);
                    let p = Payload::ToolExecution(ToolExecution {
                        turn,
                        attempt: 1,
                        step,
                        call_id: format!("call_{call}"),
                        name: "fs__read_file".into(),
                        server: "fs".into(),
                        args: format!("{{\"path\":\"/home/me/{}.md\"}}", self.words(1)),
                        status: "ok".into(),
                        result_digest: ResultDigest {
                            bytes: preview.len() as u64 * 3,
                            sha256: format!(
                                "{:016x}{:016x}{:016x}{:016x}",
                                self.rng.next(),
                                self.rng.next(),
                                self.rng.next(),
                                self.rng.next()
                            ),
                            preview,
                        },
                        error: None,
                        duration_ms: self.rng.below(400),
                    });
                    push(&mut out, &mut now, &mut self.rng, p);
                }
            }
            // The answer, streamed: a checkpoint per ~30 words (brain checkpoints every 2 s).
            let answer = self.text(70.0, 1200);
            let words: Vec<&str> = answer.split(' ').collect();
            let chunks = words.len() / 30;
            let fate = self.rng.unit();
            let interrupted = fate < 0.03;
            for c in 0..chunks {
                let part = words[c * 30..(c + 1) * 30].join(" ") + " ";
                let p = Payload::PendingState(PendingState {
                    turn,
                    attempt: 1,
                    text: part,
                    reasoning: None,
                    ended: None,
                    step: None,
                });
                push(&mut out, &mut now, &mut self.rng, p);
            }
            if interrupted {
                // The partial is what was checkpointed.
            } else if fate < 0.04 {
                let p = Payload::TurnFailed(TurnFailed {
                    turn,
                    attempt: 1,
                    code: "provider_error".into(),
                    message: "the provider answered 502".into(),
                    reasoning: None,
                });
                push(&mut out, &mut now, &mut self.rng, p);
            } else {
                let output = words.len() as u64 * 4 / 3;
                let input = 200 + (out.len() - last_compaction) as u64 * 150;
                let p = Payload::AssistantTurn(AssistantTurn {
                    turn,
                    attempt: 1,
                    text: answer.clone(),
                    reasoning: None,
                    provider: "local".into(),
                    model: "gemma-3-12b".into(),
                    finish_reason: Some("stop".into()),
                    usage: Usage {
                        input_tokens: input / 10,
                        output_tokens: output,
                        cache_read_tokens: input - input / 10,
                        cache_write_tokens: 0,
                    },
                    duration_ms: 500 + output * 40,
                    ledger_id: Some(self.rng.below(1 << 40) as i64),
                    steps,
                });
                push(&mut out, &mut now, &mut self.rng, p);
                if self.rng.chance(0.3) {
                    let p = Payload::TurnMemory(TurnMemory {
                        turn,
                        attempt: 1,
                        files_changed: vec![],
                        failures: vec![],
                        key_findings: vec![self.words(10)],
                    });
                    push(&mut out, &mut now, &mut self.rng, p);
                }
            }
            if turn == 2 {
                let n = 3 + self.rng.below(4) as usize;
                let title = self.words(n);
                let p = Payload::SessionTitled(SessionTitled {
                    title,
                    by: TitledBy::Auto,
                });
                push(&mut out, &mut now, &mut self.rng, p);
            }
            if out.len() - last_compaction >= COMPACTION_EVERY_EVENTS {
                let summary = self.text(150.0, 600);
                let through = out.len() as u64;
                let p = Payload::CompactionApplied(CompactionApplied {
                    summary,
                    replaces_through_seq: through,
                    tokens_before: 6000,
                    tokens_after: 400,
                    model: "gemma-3-12b".into(),
                    method: "llm".into(),
                });
                push(&mut out, &mut now, &mut self.rng, p);
                last_compaction = out.len();
            }
        }
        out.truncate(len as usize);
        if !long && self.rng.chance(0.05) && out.len() > 2 {
            out.pop();
            let p = Payload::SessionArchived(SessionArchived { archived: true });
            push(&mut out, &mut now, &mut self.rng, p);
        }
        out
    }
}
