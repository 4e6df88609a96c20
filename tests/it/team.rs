//! Several servers on one database (SPEC §16), at the engine: two engines share one log
//! (a SQLite file, so a test can move its clock) and coordinate through a real
//! PostgreSQL: I7 across them, `/stop` and `/live` through the one that does not run the
//! attempt, a server that dies, and connections lost under a running server (an outage:
//! `pg_terminate_backend` from an admin connection). The same with real processes on one
//! PostgreSQL is in `team_e2e`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::testdb::{self, TestDb};
use brain::chat::consent::Answer;
use brain::chat::engine::{Engine, EngineError, EngineSettings};
use brain::chat::frames::{EndStatus, Frame, Next, Subscription};
use brain::provider::{Provider, ProviderConfig};
use brain::session::store::pg::coord::{PgCoordinator, lock_key};
use brain::session::{SessionId, Store};
use brain::tools::Tools;
use serde_json::json;

use crate::engine::{end, frames, quiet, wait_until};
use crate::support::*;

/// Two servers: one log, one PostgreSQL to coordinate through.
pub(crate) struct Team {
    _db: TempDb,
    pub(crate) pg: TestDb,
    pub(crate) store: Arc<Store>,
    pub(crate) a: Engine,
    pub(crate) b: Engine,
    /// A's coordinator (to cut its listener off).
    coord_a: Arc<PgCoordinator>,
}

pub(crate) fn team(test: &str, mock: &MockLlm) -> Option<Team> {
    team_with(test, mock, |log| log)
}

/// [`team`] with server A writing to the log through `a_store` (the log, maybe wrapped).
pub(crate) fn team_with(
    test: &str,
    mock: &MockLlm,
    a_store: impl FnOnce(Arc<Store>) -> Arc<Store>,
) -> Option<Team> {
    let pg = testdb::fresh(test)?;
    let db = TempDb::new();
    // A clock the tests move (for LIVE_RETENTION).
    let store = Arc::new(db.open_with(brain::clock::Clock::manual(jiff::Timestamp::now())));
    let server = |store: Arc<Store>| {
        let mut cfg = ProviderConfig::new(&mock.url);
        cfg.first_token_timeout = Duration::from_secs(5);
        let settings = EngineSettings {
            checkpoint_interval: Duration::from_millis(200),
            ..quiet()
        };
        let coord = Arc::new(PgCoordinator::from_url(&pg.url).expect("the test PostgreSQL"));
        let engine = Engine::coordinated(
            store,
            Arc::new(Provider::new(cfg)),
            settings,
            Arc::new(Tools::off()),
            Arc::clone(&coord) as _,
        );
        (engine, coord)
    };
    let (a, coord_a) = server(a_store(Arc::clone(&store)));
    let (b, _) = server(Arc::clone(&store));
    Some(Team {
        _db: db,
        pg,
        store,
        a,
        b,
        coord_a,
    })
}

pub(crate) fn admin(t: &Team) -> postgres::Client {
    postgres::Client::connect(&t.pg.url, postgres::NoTls).unwrap()
}

/// The backend holding the session's lock, if one does.
pub(crate) fn holder(admin: &mut postgres::Client, id: SessionId) -> Option<i32> {
    admin
        .query_opt(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted
               AND ((classid::bigint << 32) | objid::bigint) = $1",
            &[&lock_key(id)],
        )
        .unwrap()
        .map(|r| r.get(0))
}

pub(crate) fn terminate(admin: &mut postgres::Client, pid: i32) {
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
}

fn turn_in_flight<T>(r: Result<T, EngineError>) -> bool {
    matches!(r, Err(EngineError::TurnInFlight))
}

/// The session's events of `turn`, as (seq, kind, payload).
fn events_of(t: &Team, id: SessionId, turn: u64) -> Vec<(u64, String, serde_json::Value)> {
    t.store
        .events(id, 0, None)
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.kind, serde_json::from_str(&e.payload).unwrap()))
        .filter(|(_, _, p): &(_, _, serde_json::Value)| p["turn"] == turn)
        .collect()
}

/// While it lives, the test database takes no new connections (an outage as the
/// servers' reconnects see it; their open connections go on).
struct Refusing {
    server: postgres::Client,
    name: String,
}

impl Refusing {
    fn start(t: &Team) -> Refusing {
        let name: String = admin(t)
            .query_one("SELECT current_database()", &[])
            .unwrap()
            .get(0);
        // From another database: a database cannot refuse its own connections' peers.
        let url = std::env::var("BRAIN_TEST_PG_URL").unwrap();
        let mut server = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        server
            .batch_execute(&format!(
                "ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS false"
            ))
            .unwrap();
        Refusing { server, name }
    }
}

impl Drop for Refusing {
    fn drop(&mut self) {
        let allow = format!("ALTER DATABASE \"{}\" ALLOW_CONNECTIONS true", self.name);
        if let Err(e) = self.server.batch_execute(&allow) {
            eprintln!("could not allow connections again: {e}");
        }
    }
}

pub(crate) fn session(t: &Team) -> SessionId {
    t.store
        .create_session(Some("test".into()), "You are a test.".into())
        .unwrap()
        .id
}

/// Frames until the first chunk (the attempt is streaming).
pub(crate) fn until_text(sub: &mut Subscription) -> Vec<Frame> {
    let mut seen = Vec::new();
    loop {
        match sub.next_frame(Duration::from_secs(20)) {
            Next::Frame(f) => {
                let chunk = matches!(f, Frame::Chunk { .. });
                seen.push(f);
                if chunk {
                    return seen;
                }
            }
            other => panic!("no text: {other:?} after {seen:?}"),
        }
    }
}

/// A slow answer of `text` (one chunk every `delay_ms`) started on server A in a new
/// session, read until its first text: the session, A's stream and the frames so far.
fn slow_turn_on_a(
    t: &Team,
    mock: &MockLlm,
    text: &str,
    delay_ms: u64,
) -> (SessionId, Subscription, Vec<Frame>) {
    let id = session(t);
    mock.script(json!({"kind": "stream", "text": text, "delay_ms": delay_ms}));
    let mut on_a = t.a.send(id, "talk slowly", None).unwrap();
    let seen = until_text(&mut on_a);
    (id, on_a, seen)
}

/// `w0 w1 … w{n-1}`: an answer long enough to be cut while it streams.
pub(crate) fn numbered_words(n: usize) -> String {
    (0..n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn text(frames: &[Frame]) -> String {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Chunk { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn another_server_refuses_a_second_turn_stops_the_running_one_and_follows_it() {
    let mock = MockLlm::start(&[]);
    let Some(t) = team("another_server_refuses_a_second_turn", &mock) else {
        return;
    };
    let (id, idle) = (session(&t), session(&t));
    mock.script(json!({"kind": "stream", "text": "a b c d e f g h i j k l", "delay_ms": 150}));
    let mut on_a = t.a.send(id, "talk slowly", None).unwrap();
    let mut seen = until_text(&mut on_a);
    let turn_in_flight = |r: Result<_, EngineError>| matches!(r, Err(EngineError::TurnInFlight));
    assert!(turn_in_flight(t.b.send(id, "me too", None).map(|_| ())));
    assert!(turn_in_flight(t.b.retry(id, None).map(|_| ())));
    assert!(turn_in_flight(t.b.delete(id)));
    assert!(turn_in_flight(t.b.compact(id).map(|_| ())));
    assert!(t.b.turn_active(id));
    assert_eq!(t.b.turns_active(&[id, idle]), HashSet::from([id]));
    // Following from B while A answers: it starts once A's first checkpoint is written.
    let followed = t.b.live(id).unwrap();
    wait_until("a checkpoint", || {
        t.store
            .events(id, 0, None)
            .unwrap()
            .iter()
            .any(|e| e.kind == "pending_state")
    });
    let Frame::Turn { turn, .. } = seen[0] else {
        panic!("{seen:?}")
    };
    // The transcript on B shows A's checkpoints as the answer so far, not a cut-off one.
    assert_eq!(t.b.active_attempt(id), Some((turn, 1)));
    let no_question = Answer {
        allow: true,
        remember: false,
    };
    assert!(matches!(
        t.b.answer_permission(id, "c1", no_question),
        Err(EngineError::NoPendingPermission)
    ));
    // A fork on B leaves A's running attempt out, as a fork on A would.
    let fork = t.b.fork(id, None).unwrap();
    let copied = t.store.events(fork.id, 0, None).unwrap();
    assert!(
        copied.iter().all(|e| e.kind != "pending_state"),
        "{copied:?}"
    );
    t.b.stop(id).unwrap();
    seen.extend(on_a);
    let (status, seq) = end(&seen);
    assert_eq!(status, EndStatus::Interrupted);
    let f = frames(followed);
    assert!(matches!(&f[0], Frame::Turn { attempt: 1, .. }), "{f:?}");
    assert_eq!(end(&f), (EndStatus::Interrupted, seq));
    assert_eq!(text(&f), text(&seen), "the follower got the same text");
    // Free at once, from either server.
    assert!(!t.b.turn_active(id));
    assert!(matches!(t.b.stop(id), Err(EngineError::NoActiveTurn)));
    // Within LIVE_RETENTION, `/live` on B replays the attempt that ran on A; after, 404.
    let replayed = frames(t.b.live(id).unwrap());
    assert_eq!(end(&replayed), (EndStatus::Interrupted, seq));
    assert_eq!(text(&replayed), text(&seen));
    t.store.clock().advance(jiff::SignedDuration::from_secs(31));
    assert!(matches!(t.b.live(id), Err(EngineError::NoActiveTurn)));
    mock.script(json!({"kind": "stream", "text": "from b"}));
    let f = frames(t.b.send(id, "now you", None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Completed);
}

#[test]
fn a_follower_on_another_server_gets_a_completed_answer_to_its_end() {
    let mock = MockLlm::start(&[]);
    let Some(t) = team("a_follower_gets_a_completed_answer", &mock) else {
        return;
    };
    let id = session(&t);
    mock.script(json!({"kind": "stream", "text": "one two three four five six", "delay_ms": 100}));
    let mut on_a = t.a.send(id, "count", None).unwrap();
    let mut seen = until_text(&mut on_a);
    let followed = t.b.live(id).unwrap();
    seen.extend(on_a);
    let f = frames(followed);
    assert_eq!(end(&f), end(&seen));
    assert_eq!(end(&f).0, EndStatus::Completed);
    assert_eq!(text(&f), "one two three four five six");
    let Some(Frame::End { model, .. }) = f.last() else {
        unreachable!()
    };
    assert!(!model.is_empty(), "a completed end names its model");
}

#[test]
fn after_an_outage_a_send_gets_fresh_connections_for_the_ones_that_died_unseen() {
    let mock = MockLlm::start(&[]);
    let Some(t) = team("after_an_outage_a_send_gets_fresh_connections", &mock) else {
        return;
    };
    let id = session(&t);
    mock.script(json!({"kind": "stream", "text": "before"}));
    assert_eq!(
        end(&frames(t.a.send(id, "one", None).unwrap())).0,
        EndStatus::Completed
    );
    // Every backend ends (a database restart): A's idle connections look open to it.
    let mut admin = admin(&t);
    let others = "SELECT pid FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()";
    let pids: Vec<i32> = admin
        .query(others, &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for pid in &pids {
        terminate(&mut admin, *pid);
    }
    // (The listeners reconnect at once: only the old backends must be gone.)
    wait_until("the old backends gone", || {
        let now = admin.query(others, &[]).unwrap();
        now.iter().all(|r| !pids.contains(&r.get(0)))
    });
    mock.script(json!({"kind": "stream", "text": "after"}));
    let f = frames(t.a.send(id, "two", None).expect("a send after the outage"));
    assert_eq!(end(&f).0, EndStatus::Completed);
}

#[test]
fn an_attempt_whose_lock_connection_dies_takes_the_lock_again_and_goes_on() {
    let mock = MockLlm::start(&[]);
    let Some(t) = team("an_attempt_whose_lock_connection_dies", &mock) else {
        return;
    };
    let words = "a b c d e f g h i j k l m n";
    let (id, on_a, mut seen) = slow_turn_on_a(&t, &mock, words, 150);
    let mut admin = admin(&t);
    let pid = holder(&mut admin, id).expect("A holds the session");
    terminate(&mut admin, pid);
    wait_until("the lock taken again", || {
        holder(&mut admin, id).is_some_and(|p| p != pid)
    });
    assert!(turn_in_flight(t.b.send(id, "me too", None)));
    seen.extend(frames(on_a));
    assert_eq!(end(&seen).0, EndStatus::Completed, "{seen:?}");
    assert_eq!(text(&seen), words);
}

#[test]
fn an_attempt_whose_lock_another_server_took_meanwhile_ends_keeping_what_it_saved() {
    let mock = MockLlm::start(&[]);
    let Some(t) = team("an_attempt_whose_lock_another_took", &mock) else {
        return;
    };
    let words = numbered_words(60);
    let (id, on_a, mut seen) = slow_turn_on_a(&t, &mock, &words, 100);
    let Frame::Turn { turn, .. } = seen[0] else {
        panic!("{seen:?}")
    };
    let mut admin = admin(&t);
    let pid = holder(&mut admin, id).expect("A holds the session");
    // Another server waits for the lock: it gets it the moment A's connection ends, before
    // A can notice.
    let url = t.pg.url.clone();
    let key = lock_key(id);
    let other = std::thread::spawn(move || {
        let mut other = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        other
            .execute("SELECT pg_advisory_lock($1)", &[&key])
            .unwrap();
        other
    });
    wait_until("the other server waiting", || {
        let waiting = "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
        !admin.query(waiting, &[]).unwrap().is_empty()
    });
    terminate(&mut admin, pid);
    let mut other = other.join().unwrap();
    seen.extend(frames(on_a));
    let (status, seq) = end(&seen);
    assert_eq!(status, EndStatus::Interrupted, "{seen:?}");
    assert_eq!(seq, None, "it wrote nothing once the session was another's");
    assert!(text(&seen).len() < words.len(), "it went on to the end");
    assert!(seen.iter().any(|f| matches!(
        f,
        Frame::Error { message, .. } if message.contains("another server")
    )));
    // What its checkpoints saved stays, and nothing after: no closing checkpoint.
    let a_events = events_of(&t, id, turn);
    let partial = saved_text(&a_events);
    assert!(text(&seen).starts_with(&partial), "{partial:?}");
    assert!(a_events.iter().all(|(_, _, p)| p["ended"].is_null()));
    // The other server's session: nobody else gets in; once it lets go, B's turn runs and
    // A's attempt wrote nothing more.
    assert!(turn_in_flight(t.b.send(id, "me too", None)));
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .unwrap();
    mock.script(json!({"kind": "stream", "text": "from b"}));
    assert_eq!(
        end(&frames(t.b.send(id, "now b", None).unwrap())).0,
        EndStatus::Completed
    );
    assert_eq!(events_of(&t, id, turn).len(), a_events.len());
}

/// The text of the attempt's checkpoints, in order.
fn saved_text(events: &[(u64, String, serde_json::Value)]) -> String {
    events
        .iter()
        .filter(|(_, kind, _)| kind == "pending_state")
        .map(|(_, _, p)| p["text"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_attempt_whose_lock_was_free_again_after_another_servers_turn_writes_nothing_more() {
    let mock = MockLlm::start(&[]);
    let Some(t) = team("an_attempt_whose_lock_was_free_again", &mock) else {
        return;
    };
    let words = numbered_words(100);
    let (id, on_a, mut seen) = slow_turn_on_a(&t, &mock, &words, 100);
    let Frame::Turn { turn, .. } = seen[0] else {
        panic!("{seen:?}")
    };
    wait_until("A's first checkpoint", || {
        !saved_text(&events_of(&t, id, turn)).is_empty()
    });
    // A's lock connection dies; B claims the free session before A checks its lock (A
    // may take it again first: its connection is cut again until B gets in).
    mock.script(json!({"kind": "stream", "text": "from b"}));
    let mut admin = admin(&t);
    let mut on_b = None;
    wait_until("B's turn started", || {
        if let Some(pid) = holder(&mut admin, id) {
            terminate(&mut admin, pid);
        }
        match t.b.send(id, "now b", None) {
            Ok(sub) => on_b = Some(sub),
            Err(e) => assert!(matches!(e, EngineError::TurnInFlight), "{e:?}"),
        }
        on_b.is_some()
    });
    // B answers and lets go: the lock is free again when A next checks it.
    let on_b = frames(on_b.unwrap());
    assert_eq!(end(&on_b).0, EndStatus::Completed, "{on_b:?}");
    seen.extend(frames(on_a));
    let (status, seq) = end(&seen);
    assert_eq!(status, EndStatus::Interrupted, "{seen:?}");
    assert_eq!(seq, None, "it wrote nothing once the session was another's");
    assert!(text(&seen).len() < words.len(), "it went on");
    nothing_of_a_after_bs_turn(&t, id, turn, &seen);
}

/// The log: A's message and earlier checkpoints (what A's stream showed), then B's turn
/// ("now b", answered "from b"), and nothing of A's attempt `turn` after B's message.
pub(crate) fn nothing_of_a_after_bs_turn(t: &Team, id: SessionId, turn: u64, seen: &[Frame]) {
    let log = t.store.events(id, 0, None).unwrap();
    let b_message = log
        .iter()
        .find(|e| e.kind == "user_message" && e.payload.contains("now b"))
        .map(|e| e.seq)
        .expect("B's message");
    let a_events = events_of(t, id, turn);
    assert!(
        a_events.iter().all(|(seq, _, _)| *seq < b_message),
        "A wrote after B's turn: {a_events:?}"
    );
    assert!(a_events.iter().all(|(_, kind, _)| kind == "pending_state"));
    assert!(text(seen).starts_with(&saved_text(&a_events)));
    let last = log.last().unwrap();
    assert_eq!(last.kind, "assistant_turn", "{last:?}");
    assert!(last.payload.contains("from b"), "{last:?}");
}

#[test]
fn a_stop_sent_while_the_running_servers_listener_reconnects_still_stops_the_attempt() {
    let mock = MockLlm::start(&[]);
    let Some(t) = team("a_stop_sent_while_the_listener_reconnects", &mock) else {
        return;
    };
    let words = numbered_words(100);
    let (id, on_a, mut seen) = slow_turn_on_a(&t, &mock, &words, 100);
    let listener = t.coord_a.listener_pid().expect("A listens");
    let mut admin = admin(&t);
    // A's listener is cut off and cannot reconnect while the stop is sent: it misses it.
    let refusing = Refusing::start(&t);
    terminate(&mut admin, listener);
    wait_until("A's listener gone", || t.coord_a.listener_pid().is_none());
    t.b.stop(id).unwrap();
    drop(refusing);
    seen.extend(frames(on_a));
    assert_eq!(end(&seen).0, EndStatus::Interrupted, "{seen:?}");
}

#[test]
fn when_the_server_running_a_turn_dies_the_session_is_free_and_a_follower_ends() {
    let mock = MockLlm::start(&[]);
    let Some(t) = team("when_the_server_running_a_turn_dies", &mock) else {
        return;
    };
    let id = session(&t);
    mock.script(json!({"kind": "stream", "text": "a b c d e f g h i j k l m n", "delay_ms": 150}));
    let mut on_a = t.a.send(id, "talk slowly", None).unwrap();
    until_text(&mut on_a);
    wait_until("a checkpoint", || {
        t.store
            .events(id, 0, None)
            .unwrap()
            .iter()
            .any(|e| e.kind == "pending_state")
    });
    let followed = t.b.live(id).unwrap();
    // What A's death looks like from the database: its lock's connection ends, and it
    // does not come back (refused here, since A lives on in this process).
    let mut admin = admin(&t);
    let pid = holder(&mut admin, id).expect("A holds the session");
    let refusing = Refusing::start(&t);
    terminate(&mut admin, pid);
    let f = frames(followed);
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Interrupted, "{f:?}");
    assert!(seq.is_some(), "ends at the checkpoint it last saw");
    wait_until("the session free", || !t.b.turn_active(id));
    drop(refusing);
    // (A, still here, ended when it found its lock gone and could not take it again.)
    assert_eq!(end(&frames(on_a)).0, EndStatus::Interrupted);
}
