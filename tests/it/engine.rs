//! The turn engine against `mock_llm` as a process: what each turn writes, every ending of
//! SPEC §6, retries, subscribers, I3 over a long conversation, and shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use brain::chat::engine::{Engine, EngineError, EngineSettings};
use brain::chat::frames::{EndStatus, Frame, Next, Subscription};
use brain::provider::{Provider, ProviderConfig};
use brain::session::events::{Decoded, Payload};
use brain::session::{SessionId, Store};
use serde_json::{Value, json};

use crate::support::*;

pub(crate) struct Rig {
    pub _db: TempDb,
    pub store: Arc<Store>,
    pub engine: Engine,
}

pub(crate) fn rig_with(url: &str, settings: EngineSettings, idle_ms: u64) -> Rig {
    let db = TempDb::new();
    let store = Arc::new(db.open());
    let mut cfg = ProviderConfig::new(url);
    cfg.first_token_timeout = Duration::from_secs(5);
    cfg.idle_timeout = Duration::from_millis(idle_ms);
    let engine = Engine::new(Arc::clone(&store), Arc::new(Provider::new(cfg)), settings);
    Rig {
        _db: db,
        store,
        engine,
    }
}

pub(crate) fn quiet() -> EngineSettings {
    EngineSettings {
        distill: false,
        ..EngineSettings::default()
    }
}

pub(crate) fn rig(mock: &MockLlm) -> Rig {
    rig_with(&mock.url, quiet(), 1000)
}

/// A session with a title (so no automatic title call).
pub(crate) fn session(r: &Rig) -> SessionId {
    r.store
        .create_session(Some("test".into()), "You are a test.".into())
        .unwrap()
        .id
}

/// Every frame until the end (panics if the attempt stalls for 30 s).
pub(crate) fn frames(mut sub: Subscription) -> Vec<Frame> {
    let mut all = Vec::new();
    loop {
        match sub.next_frame(Duration::from_secs(30)) {
            Next::Frame(f) => all.push(f),
            Next::Ended => return all,
            Next::Idle => panic!("the attempt stalled: {all:?}"),
        }
    }
}

pub(crate) fn end(frames: &[Frame]) -> (EndStatus, Option<u64>) {
    match frames.last() {
        Some(Frame::End { status, seq, .. }) => (*status, *seq),
        other => panic!("the last frame is not end: {other:?}"),
    }
}

pub(crate) fn error_code(frames: &[Frame]) -> Option<String> {
    frames.iter().find_map(|f| match f {
        Frame::Error { code, .. } => Some(code.clone()),
        _ => None,
    })
}

pub(crate) fn kinds(store: &Store, id: SessionId) -> Vec<String> {
    store
        .events(id, 1, None)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

pub(crate) fn payload(store: &Store, id: SessionId, seq: u64) -> Payload {
    let e = store.events(id, seq - 1, Some(1)).unwrap().remove(0);
    match e.decode() {
        Decoded::Known(p) => p,
        other => panic!("{other:?}"),
    }
}

pub(crate) fn streamed(mock: &MockLlm) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| r["stream"] == true)
        .collect()
}

pub(crate) fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (on frames, then on the mock's log) until the attempt's request is with the
/// provider: its `waiting` frame, and one more streamed request than `before`.
pub(crate) fn wait_for_the_provider(mock: &MockLlm, sub: &mut Subscription, before: usize) {
    loop {
        match sub.next_frame(Duration::from_secs(30)) {
            Next::Frame(Frame::Status {
                phase: brain::chat::frames::Phase::Waiting,
            }) => break,
            Next::Frame(_) => {}
            other => panic!("no waiting frame: {other:?}"),
        }
    }
    wait_until("the request at the provider", || {
        streamed(mock).len() > before
    });
}

#[test]
fn a_turn_persists_user_then_assistant_and_the_next_request_carries_it() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    mock.script(json!({"kind": "stream", "text": "Hi there, friend.", "chunks": 3}));
    let f = frames(r.engine.send(id, "hello", None).unwrap());
    assert!(
        matches!(
            &f[0],
            Frame::Turn {
                turn: 2,
                attempt: 1,
                ..
            }
        ),
        "{f:?}"
    );
    let chunks: String = f
        .iter()
        .filter_map(|x| match x {
            Frame::Chunk { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(chunks, "Hi there, friend.");
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Completed);
    assert_eq!(kinds(&r.store, id), ["user_message", "assistant_turn"]);
    let Payload::AssistantTurn(a) = payload(&r.store, id, seq.unwrap()) else {
        panic!()
    };
    assert_eq!(
        (a.turn, a.attempt, a.text.as_str()),
        (2, 1, "Hi there, friend.")
    );
    assert_eq!(a.provider, mock.url);
    assert_eq!(a.model, "mock-model");
    assert_eq!(a.finish_reason.as_deref(), Some("stop"));
    assert_eq!(a.usage.output_tokens, 3);
    assert!(a.ledger_id.is_some());
    assert!(!r.engine.turn_active(id), "not active once end is sent");

    frames(r.engine.send(id, "and again", None).unwrap());
    let second = &streamed(&mock)[1];
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages[1], json!({"role": "user", "content": "hello"}));
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "Hi there, friend."})
    );
    assert_eq!(messages[3], json!({"role": "user", "content": "and again"}));
    assert_eq!(r.store.usage(Some(id)).unwrap().by_purpose["chat"].calls, 2);
}

/// Runs one turn with a scripted step and returns its frames.
pub(crate) fn turn_with(mock: &MockLlm, r: &Rig, id: SessionId, step: Value) -> Vec<Frame> {
    mock.script(step);
    frames(r.engine.send(id, "question", None).unwrap())
}

#[test]
fn completions_with_text_any_finish_reason_are_completed() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    let f = turn_with(
        &mock,
        &r,
        id,
        json!({"kind": "stream", "text": "cut short", "finish_reason": "length"}),
    );
    assert_eq!(end(&f).0, EndStatus::Completed);
    assert!(matches!(f.last(), Some(Frame::End { finish_reason: Some(r), .. }) if r == "length"));
}

#[test]
fn no_text_is_empty_answer_with_the_reasoning_kept() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    for step in [
        json!({"kind": "stream", "text": ""}),
        json!({"kind": "stream", "text": "", "reasoning": "I thought hard"}),
    ] {
        let f = turn_with(&mock, &r, id, step.clone());
        let (status, seq) = end(&f);
        assert_eq!(status, EndStatus::Failed, "{step}");
        assert_eq!(error_code(&f).as_deref(), Some("empty_answer"));
        let Payload::TurnFailed(t) = payload(&r.store, id, seq.unwrap()) else {
            panic!()
        };
        assert_eq!(t.code, "empty_answer");
        assert_eq!(t.reasoning.is_some(), step.get("reasoning").is_some());
    }
}

#[test]
fn provider_errors_before_any_text_are_failed_turns_with_their_code() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    for (step, code) in [
        (
            json!({"kind": "stream", "status": 500}),
            "provider_http_error",
        ),
        (
            json!({"kind": "stream", "garbage_after": 0}),
            "provider_malformed",
        ),
        (
            json!({"kind": "stream", "hang": true}),
            "first_token_timeout",
        ),
    ] {
        let r = if code == "first_token_timeout" {
            let mut cfg = ProviderConfig::new(&mock.url);
            cfg.first_token_timeout = Duration::from_millis(300);
            let engine = Engine::new(Arc::clone(&r.store), Arc::new(Provider::new(cfg)), quiet());
            Rig {
                _db: TempDb::new(),
                store: Arc::clone(&r.store),
                engine,
            }
        } else {
            Rig {
                _db: TempDb::new(),
                store: Arc::clone(&r.store),
                engine: r.engine.clone(),
            }
        };
        let f = turn_with(&mock, &r, id, step);
        let (status, seq) = end(&f);
        assert_eq!(status, EndStatus::Failed, "{code}");
        assert_eq!(error_code(&f).as_deref(), Some(code));
        let Payload::TurnFailed(t) = payload(&r.store, id, seq.unwrap()) else {
            panic!()
        };
        assert_eq!(t.code, code);
    }
    // Unreachable: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = rig_with(&format!("http://127.0.0.1:{port}/v1"), quiet(), 1000);
    let id = session(&down);
    let f = frames(down.engine.send(id, "anyone?", None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Failed);
    assert_eq!(error_code(&f).as_deref(), Some("provider_unreachable"));
    assert_eq!(
        kinds(&down.store, id),
        ["user_message", "turn_failed"],
        "the message is kept (I2)"
    );
}

#[test]
fn a_cut_or_a_stall_after_text_is_interrupted_with_the_text_kept() {
    let mock = MockLlm::start(&[]);
    let r = rig_with(&mock.url, quiet(), 800);
    let id = session(&r);
    for (step, kept, code) in [
        (
            json!({"kind": "stream", "text": "one two three four", "cut_after": 2}),
            "one two ",
            "provider_cut",
        ),
        (
            json!({"kind": "stream", "text": "a b c", "delay_ms": 1500}),
            "a ",
            "idle_timeout",
        ),
    ] {
        let f = turn_with(&mock, &r, id, step);
        let (status, seq) = end(&f);
        assert_eq!(status, EndStatus::Interrupted, "{code}");
        assert_eq!(error_code(&f).as_deref(), Some(code));
        let Payload::PendingState(p) = payload(&r.store, id, seq.unwrap()) else {
            panic!()
        };
        assert_eq!(p.text, kept);
    }
}

#[test]
fn an_endless_answer_is_cut_at_its_limit_and_kept_as_interrupted() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    let f = turn_with(
        &mock,
        &r,
        id,
        json!({"kind": "stream", "endless_chunks": true}),
    );
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Interrupted);
    assert_eq!(error_code(&f).as_deref(), Some("provider_malformed"));
    assert!(matches!(
        payload(&r.store, id, seq.unwrap()),
        Payload::PendingState(_)
    ));
    let kept: usize = r
        .store
        .events(id, 0, None)
        .unwrap()
        .iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(Payload::PendingState(p)) => Some(p.text.len()),
            _ => None,
        })
        .sum();
    let limit = brain::config::MAX_ANSWER_BYTES;
    assert!(
        kept > limit && kept <= limit + 64 * 1024,
        "the partial is kept up to the limit: {kept}"
    );
}

#[test]
fn checkpoints_are_written_while_streaming_and_concatenate_to_the_answer() {
    let mock = MockLlm::start(&[]);
    let settings = EngineSettings {
        checkpoint_interval: Duration::from_millis(300),
        ..quiet()
    };
    let r = rig_with(&mock.url, settings, 2000);
    let id = session(&r);
    let text = "one two three four five six seven eight ";
    let f = turn_with(
        &mock,
        &r,
        id,
        json!({"kind": "stream", "text": text, "delay_ms": 150}),
    );
    assert_eq!(end(&f).0, EndStatus::Completed);
    let checkpoints = f
        .iter()
        .filter(|x| matches!(x, Frame::Checkpoint { .. }))
        .count();
    assert!(checkpoints >= 2, "{f:?}");
    let partial: String = r
        .store
        .events(id, 0, None)
        .unwrap()
        .iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(Payload::PendingState(p)) => Some(p.text),
            _ => None,
        })
        .collect();
    assert!(
        text.starts_with(&partial) && !partial.is_empty(),
        "{partial:?}"
    );
}

#[test]
fn stop_after_text_is_interrupted_and_before_text_is_a_stopped_failure() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    mock.script(json!({"kind": "stream", "text": "a b c d e f g", "delay_ms": 200}));
    let mut sub = r.engine.send(id, "talk slowly", None).unwrap();
    let mut seen = Vec::new();
    while let Next::Frame(f) = sub.next_frame(Duration::from_secs(10)) {
        let chunk = matches!(f, Frame::Chunk { .. });
        seen.push(f);
        if chunk {
            break;
        }
    }
    r.engine.stop(id).unwrap();
    seen.extend(sub);
    let (status, seq) = end(&seen);
    assert_eq!(status, EndStatus::Interrupted);
    let Payload::PendingState(p) = payload(&r.store, id, seq.unwrap()) else {
        panic!()
    };
    assert!(p.text.starts_with("a "), "{p:?}");

    mock.script(json!({"kind": "stream", "hang": true}));
    let requests = streamed(&mock).len();
    let mut sub = r.engine.send(id, "say nothing", None).unwrap();
    wait_for_the_provider(&mock, &mut sub, requests);
    r.engine.stop(id).unwrap();
    let f = frames(sub);
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Failed);
    let Payload::TurnFailed(t) = payload(&r.store, id, seq.unwrap()) else {
        panic!()
    };
    assert_eq!(t.code, "stopped");
    assert!(matches!(r.engine.stop(id), Err(EngineError::NoActiveTurn)));
}

#[test]
fn context_over_the_window_is_a_context_overflow_failure_without_a_provider_call() {
    let mock = MockLlm::start(&[]);
    let settings = EngineSettings {
        context_window: Some(300),
        ..quiet()
    };
    let r = rig_with(&mock.url, settings, 1000);
    let id = session(&r);
    let f = frames(r.engine.send(id, &"enormous ".repeat(2000), None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Failed);
    assert_eq!(error_code(&f).as_deref(), Some("context_overflow"));
    assert!(
        streamed(&mock).is_empty(),
        "nothing over the window is sent (I4)"
    );
}

#[test]
fn messages_are_validated_and_one_turn_runs_at_a_time() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    assert!(matches!(
        r.engine.send(id, "  \n", None),
        Err(EngineError::EmptyMessage)
    ));
    assert!(matches!(
        r.engine.send(id, &"x".repeat(300 * 1024), None),
        Err(EngineError::MessageTooLarge(..))
    ));
    assert!(matches!(
        r.engine.send(SessionId::generate(), "hi", None),
        Err(EngineError::Store(_))
    ));
    mock.script(json!({"kind": "stream", "text": "slow answer here", "delay_ms": 300}));
    let first = r.engine.send(id, "first", None).unwrap();
    assert!(matches!(
        r.engine.send(id, "second", None),
        Err(EngineError::TurnInFlight)
    ));
    assert!(matches!(
        r.engine.retry(id, None),
        Err(EngineError::TurnInFlight)
    ));
    // The client goes away: the attempt goes on.
    drop(first);
    let late = r.engine.live(id).unwrap();
    let f = frames(late);
    assert!(
        matches!(f[0], Frame::Turn { .. }),
        "a late subscriber gets the whole attempt"
    );
    assert_eq!(end(&f).0, EndStatus::Completed);
    assert_eq!(kinds(&r.store, id), ["user_message", "assistant_turn"]);
    assert_eq!(
        frames(r.engine.live(id).unwrap()),
        f,
        "kept after the end, for /live"
    );
    assert_eq!(
        kinds(&r.store, id).len(),
        2,
        "the refused send wrote nothing"
    );
}

#[test]
fn sending_to_an_archived_session_unarchives_it() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    r.store.set_archived(id, true).unwrap();
    frames(r.engine.send(id, "back again", None).unwrap());
    assert!(!r.store.session(id).unwrap().archived);
}

#[test]
fn retries_resend_the_original_request_and_the_newest_answer_counts() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    assert!(matches!(
        r.engine.retry(id, None),
        Err(EngineError::NothingToRetry)
    ));
    frames(r.engine.send(id, "warm up", None).unwrap());
    mock.script(json!({"kind": "stream", "status": 500}));
    let f = frames(r.engine.send(id, "the question", None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Failed);
    mock.script(json!({"kind": "stream", "text": "half an", "cut_after": 1}));
    let f = frames(r.engine.retry(id, None).unwrap());
    assert!(matches!(f[0], Frame::Turn { attempt: 2, .. }));
    assert_eq!(end(&f).0, EndStatus::Interrupted);
    mock.script(json!({"kind": "stream", "text": "first full answer"}));
    assert_eq!(
        end(&frames(r.engine.retry(id, None).unwrap())).0,
        EndStatus::Completed
    );
    mock.script(json!({"kind": "stream", "text": "regenerated answer"}));
    let f = frames(r.engine.retry(id, None).unwrap());
    assert!(matches!(f[0], Frame::Turn { attempt: 4, .. }));
    let requests = streamed(&mock);
    let original = &requests[1]["messages"];
    for retried in &requests[2..5] {
        assert_eq!(
            &retried["messages"], original,
            "a retry resends the original request"
        );
    }
    frames(r.engine.send(id, "next", None).unwrap());
    let next = &streamed(&mock)[5]["messages"];
    let n = next.as_array().unwrap().len();
    assert_eq!(
        next[n - 2],
        json!({"role": "assistant", "content": "regenerated answer"})
    );
    assert_eq!(next[n - 1], json!({"role": "user", "content": "next"}));
    // The retry now targets "next": only the newest user message can be retried.
    let newest_user = r
        .store
        .events(id, 0, None)
        .unwrap()
        .iter()
        .filter(|e| e.kind == "user_message")
        .map(|e| e.seq)
        .max()
        .unwrap();
    let f = frames(r.engine.retry(id, None).unwrap());
    assert!(
        matches!(f[0], Frame::Turn { turn, attempt: 2, .. } if turn == newest_user),
        "{f:?}"
    );
}

#[test]
fn a_follow_up_during_distillation_sees_the_answer_and_late_memory_changes_nothing() {
    let mock = MockLlm::start(&[]);
    let settings = EngineSettings {
        distill: true,
        ..EngineSettings::default()
    };
    let r = rig_with(&mock.url, settings, 1000);
    let id = session(&r);
    // The distillation of turn 1 is slow: it lands after the follow-up's user message.
    mock.script(json!({"kind": "complete", "headers_delay_ms": 800,
        "text": "{\"files_changed\": [], \"failures\": [], \"key_findings\": [\"late finding\"]}"}));
    mock.script(json!({"kind": "stream", "text": "first answer"}));
    frames(r.engine.send(id, "first", None).unwrap());
    frames(r.engine.send(id, "follow-up", None).unwrap());
    let follow_up = streamed(&mock)[1]["messages"].clone();
    assert_eq!(
        follow_up[2],
        json!({"role": "assistant", "content": "first answer"})
    );
    wait_until("the late turn memory", || {
        kinds(&r.store, id).contains(&"turn_memory".to_owned())
    });
    frames(r.engine.send(id, "third", None).unwrap());
    let third = streamed(&mock)[2]["messages"].clone();
    let before = follow_up.as_array().unwrap();
    assert_eq!(
        &third.as_array().unwrap()[..before.len()],
        &before[..],
        "I3: late memory is dropped"
    );
    assert_eq!(
        r.engine
            .shutdown(Duration::from_secs(10))
            .unfinished_attempts,
        0
    );
}

#[test]
fn shutdown_ends_streaming_attempts_within_the_deadline() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let talking = session(&r);
    let silent = session(&r);
    mock.script(json!({"kind": "stream", "text": "a b c d e f g h", "delay_ms": 300}));
    let mut sub = r.engine.send(talking, "talk", None).unwrap();
    while !matches!(
        sub.next_frame(Duration::from_secs(10)),
        Next::Frame(Frame::Chunk { .. })
    ) {}
    mock.script(json!({"kind": "stream", "hang": true}));
    let requests = streamed(&mock).len();
    let mut quiet_sub = r.engine.send(silent, "hang", None).unwrap();
    wait_for_the_provider(&mock, &mut quiet_sub, requests);
    let started = Instant::now();
    let report = r.engine.shutdown(Duration::from_secs(10));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((report.ended_attempts, report.unfinished_attempts), (2, 0));
    let f: Vec<Frame> = sub.collect();
    assert_eq!(end(&f).0, EndStatus::Interrupted);
    let f = frames(quiet_sub);
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Failed);
    let Payload::TurnFailed(t) = payload(&r.store, silent, seq.unwrap()) else {
        panic!()
    };
    assert_eq!(t.code, "shutdown");
    assert!(matches!(
        r.engine.send(talking, "more", None),
        Err(EngineError::ShuttingDown)
    ));
}

#[test]
fn prefix_stability_end_to_end_over_60_turns_on_a_small_window() {
    let mock = MockLlm::start(&["--n-ctx", "1200"]);
    let settings = EngineSettings {
        distill: true,
        ..EngineSettings::default()
    };
    let r = rig_with(&mock.url, settings, 2000);
    let id = r
        .store
        .create_session(None, "You are a test.".into())
        .unwrap()
        .id;
    for i in 0..60 {
        let text = format!(
            "turn {i}: tell me about the number {} and the colour of the sky today",
            i * 7
        );
        let f = frames(r.engine.send(id, &text, None).unwrap());
        assert_eq!(end(&f).0, EndStatus::Completed, "turn {i}: {f:?}");
    }
    r.engine.shutdown(Duration::from_secs(10));
    let requests = streamed(&mock);
    assert_eq!(requests.len(), 60);
    let (mut checked, mut compacted) = (0, 0);
    for pair in requests.windows(2) {
        let (a, b) = (
            pair[0]["messages"].as_array().unwrap(),
            pair[1]["messages"].as_array().unwrap(),
        );
        // A compaction between two requests rewrites the head (a new summary): I3 allows it.
        let head = |m: &[Value]| m.get(1).cloned();
        if head(a) != head(b) {
            let summary = head(b)
                .and_then(|m| m["content"].as_str().map(str::to_owned))
                .unwrap_or_default();
            assert!(
                summary.starts_with("[Summary of the conversation so far]"),
                "{summary}"
            );
            compacted += 1;
            continue;
        }
        checked += 1;
        assert!(b.len() > a.len());
        assert_eq!(
            &b[..a.len()],
            &a[..],
            "every earlier message byte-identical"
        );
    }
    assert!(
        compacted >= 2,
        "the small window forced compactions ({compacted})"
    );
    assert!(
        checked >= 30,
        "most consecutive requests kept their prefix ({checked})"
    );
    let chat = &r.store.usage(Some(id)).unwrap().by_purpose["chat"];
    let prompt = chat.input_tokens + chat.cache_read_tokens;
    eprintln!(
        "I3 end to end: {checked} request pairs kept their prefix, {compacted} compactions; \
         mock_llm cache reuse {} of {prompt} prompt tokens ({:.0}%)",
        chat.cache_read_tokens,
        100.0 * chat.cache_read_tokens as f64 / prompt.max(1) as f64
    );
    let title = r.store.session(id).unwrap().title;
    assert!(
        title.is_some_and(|t| t.starts_with("Mock Title")),
        "the automatic title"
    );
}
