//! Several servers on one database (SPEC §16), at the engine: two engines share one log
//! (a SQLite file, so a test can move its clock) and coordinate through a real
//! PostgreSQL: I7 across them, `/stop` and `/live` through the one that does not run the
//! attempt, and a server that dies. The same with real processes on one PostgreSQL is in
//! `team_e2e`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use brain::chat::consent::Answer;
use brain::chat::engine::{Engine, EngineError, EngineSettings};
use brain::chat::frames::{EndStatus, Frame, Next, Subscription};
use brain::provider::{Provider, ProviderConfig};
use brain::session::store::pg::coord::{PgCoordinator, lock_key};
use brain::session::store::pg::testdb::{self, TestDb};
use brain::session::{SessionId, Store};
use brain::tools::Tools;
use serde_json::json;

use crate::engine::{end, frames, quiet, wait_until};
use crate::support::*;

/// Two servers: one log, one PostgreSQL to coordinate through.
struct Team {
    _db: TempDb,
    pg: TestDb,
    store: Arc<Store>,
    a: Engine,
    b: Engine,
}

fn team(test: &str, mock: &MockLlm) -> Option<Team> {
    let pg = testdb::fresh(test)?;
    let db = TempDb::new();
    // A clock the tests move (for LIVE_RETENTION).
    let store = Arc::new(db.open_with(brain::clock::Clock::manual(jiff::Timestamp::now())));
    let server = || {
        let mut cfg = ProviderConfig::new(&mock.url);
        cfg.first_token_timeout = Duration::from_secs(5);
        let settings = EngineSettings {
            checkpoint_interval: Duration::from_millis(200),
            ..quiet()
        };
        let coord = PgCoordinator::from_url(&pg.url).expect("the test PostgreSQL");
        Engine::coordinated(
            Arc::clone(&store),
            Arc::new(Provider::new(cfg)),
            settings,
            Arc::new(Tools::off()),
            Arc::new(coord),
        )
    };
    let (a, b) = (server(), server());
    Some(Team {
        _db: db,
        pg,
        store,
        a,
        b,
    })
}

fn session(t: &Team) -> SessionId {
    t.store
        .create_session(Some("test".into()), "You are a test.".into())
        .unwrap()
        .id
}

/// Frames until the first chunk (the attempt is streaming).
fn until_text(sub: &mut Subscription) -> Vec<Frame> {
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
    // What A's death looks like from the database: its connections end.
    let mut admin = postgres::Client::connect(&t.pg.url, postgres::NoTls).unwrap();
    let key = lock_key(id);
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'
               AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1",
            &[&key],
        )
        .unwrap();
    let f = frames(followed);
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Interrupted, "{f:?}");
    assert!(seq.is_some(), "ends at the checkpoint it last saw");
    wait_until("the session free", || !t.b.turn_active(id));
    // (A still runs here, in this process; a real death takes it along. Stop it.)
    t.a.stop(id).unwrap();
    frames(on_a);
}
