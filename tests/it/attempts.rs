//! The edges of an attempt (issue 14): stop and shutdown in every phase, a compaction's
//! deadline, panics and limits, what is kept for late subscribers, and what moves a
//! session in the list.

use std::sync::Arc;
use std::time::Duration;

use brain::chat::engine::{Engine, EngineError, EngineSettings, Fault};
use brain::chat::frames::{EndStatus, Frame, Next, Phase};
use brain::provider::{Provider, ProviderConfig};
use brain::session::SessionId;
use brain::session::events::{Payload, TitledBy};
use brain::session::projection::llm_context;
use brain::session::store::ListQuery;
use brain::tokens::Estimator;
use serde_json::json;

use crate::engine::*;
use crate::support::*;

fn updated_at(r: &Rig, id: SessionId) -> String {
    r.store.session(id).unwrap().updated_at
}

#[test]
fn checkpoints_renames_and_archiving_do_not_move_updated_at() {
    let mock = MockLlm::start(&[]);
    let settings = EngineSettings {
        checkpoint_interval: Duration::from_millis(100),
        ..quiet()
    };
    let r = rig_with(&mock.url, settings, 2000);
    let id = session(&r);
    let other = session(&r);
    mock.script(json!({"kind": "stream", "text": "one two three four five six", "delay_ms": 120}));
    let mut sub = r.engine.send(id, "stream slowly", None).unwrap();
    let after_user_message = updated_at(&r, id);
    let mut checkpoints = 0;
    let mut all = Vec::new();
    loop {
        match sub.next_frame(Duration::from_secs(30)) {
            Next::Frame(Frame::Checkpoint { seq }) => {
                checkpoints += 1;
                if r.engine.turn_active(id) {
                    assert_eq!(
                        updated_at(&r, id),
                        after_user_message,
                        "checkpoint #{seq} moved updated_at"
                    );
                }
                all.push(Frame::Checkpoint { seq });
            }
            Next::Frame(f) => all.push(f),
            Next::Ended => break,
            Next::Idle => panic!("stalled: {all:?}"),
        }
    }
    assert!(checkpoints >= 2, "{all:?}");
    assert_eq!(end(&all).0, EndStatus::Completed);
    let ended = updated_at(&r, id);
    assert!(ended > after_user_message, "the attempt's end moves it");

    // The other session is older; renaming or archiving it does not bring it forward.
    let order = |r: &Rig| -> Vec<_> {
        r.store
            .list_sessions(&ListQuery {
                limit: 50,
                archived: Some(brain::session::cursor::ArchivedFilter::Include),
                ..ListQuery::default()
            })
            .unwrap()
            .sessions
            .iter()
            .map(|s| s.id)
            .collect()
    };
    let before = order(&r);
    assert_eq!(before[0], id);
    r.store
        .rename(other, "renamed".into(), TitledBy::User)
        .unwrap();
    r.store.set_archived(other, true).unwrap();
    r.store.set_archived(other, false).unwrap();
    assert_eq!(order(&r), before);
    assert_eq!(updated_at(&r, id), ended);
}

#[test]
fn an_interrupted_attempt_moves_updated_at_when_it_ends() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    mock.script(json!({"kind": "stream", "text": "a b c d e f g", "delay_ms": 200}));
    let mut sub = r.engine.send(id, "talk slowly", None).unwrap();
    let after_user_message = updated_at(&r, id);
    while !matches!(
        sub.next_frame(Duration::from_secs(10)),
        Next::Frame(Frame::Chunk { .. })
    ) {}
    r.engine.stop(id).unwrap();
    let f: Vec<Frame> = sub.collect();
    assert_eq!(end(&f).0, EndStatus::Interrupted);
    assert!(updated_at(&r, id) > after_user_message);
}

const FILLER: &str = "we talked about the garden the weather and the long walk home again";

fn words(n: usize) -> String {
    FILLER
        .split(' ')
        .cycle()
        .take(n)
        .collect::<Vec<_>>()
        .join(" ")
}

fn context_tokens(r: &Rig, id: SessionId) -> u64 {
    Estimator::new()
        .context(&llm_context(&r.store.events_for_context(id).unwrap()))
        .total
}

/// Earlier turns, written straight to the log, until the context passes `tokens`.
fn history(r: &Rig, id: SessionId, tokens: u64) {
    let mut i = 0;
    while context_tokens(r, id) <= tokens {
        let u = r
            .store
            .append(id, &user(&format!("question {i}: {}", words(40))))
            .unwrap()
            .seq;
        r.store
            .append(id, &answer(u, 1, &format!("answer {i}: {}", words(40))))
            .unwrap();
        i += 1;
    }
}

/// Another engine on the rig's store (settings that depend on the history just written).
fn engine_on(r: &Rig, url: &str, settings: EngineSettings) -> Engine {
    let mut cfg = ProviderConfig::new(url);
    cfg.first_token_timeout = Duration::from_secs(5);
    cfg.idle_timeout = Duration::from_secs(2);
    Engine::new(Arc::clone(&r.store), Arc::new(Provider::new(cfg)), settings)
}

fn summarize_requests(mock: &MockLlm) -> usize {
    mock.requests()
        .iter()
        .filter(|q| q["stream"] != true)
        .count()
}

/// The session's summarize calls in the ledger: (status, error code).
fn summarize_rows(r: &Rig, id: SessionId) -> Vec<(String, Option<String>)> {
    let raw = r._db.raw();
    let mut q = raw
        .prepare(
            "SELECT status, error_code FROM ledger
             WHERE session_id = ?1 AND purpose = 'summarize' ORDER BY id",
        )
        .unwrap();
    q.query_map([id.to_string()], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// A session over its trigger (so a turn compacts before sending), still inside its
/// window, on an engine whose window says so; the summariser hangs.
fn over_the_trigger_with_a_hung_summariser(mock: &MockLlm) -> (Rig, Engine, SessionId) {
    let r = rig(mock);
    let id = session(&r);
    history(&r, id, 1400);
    let settings = EngineSettings {
        context_window: Some(2000),
        ..quiet()
    };
    let engine = engine_on(&r, &mock.url, settings);
    mock.script(json!({"kind": "complete", "hang_before_headers": true}));
    (r, engine, id)
}

/// Sends and waits until the pre-send compaction waits on the summariser.
fn send_until_the_summariser_hangs(
    mock: &MockLlm,
    engine: &Engine,
    id: SessionId,
) -> brain::chat::frames::Subscription {
    let mut sub = engine.send(id, "one more question", None).unwrap();
    assert!(matches!(
        sub.next_frame(Duration::from_secs(10)),
        Next::Frame(Frame::Turn { .. })
    ));
    assert_eq!(
        sub.next_frame(Duration::from_secs(10)),
        Next::Frame(Frame::Status {
            phase: Phase::Compacting
        })
    );
    wait_until("the summariser call", || summarize_requests(mock) == 1);
    sub
}

#[test]
fn shutdown_during_a_pre_send_compaction_on_a_hung_summariser_ends_the_attempt() {
    let mock = MockLlm::start(&[]);
    let (r, engine, id) = over_the_trigger_with_a_hung_summariser(&mock);
    let sub = send_until_the_summariser_hangs(&mock, &engine, id);
    let report = engine.shutdown(Duration::from_secs(10));
    assert_eq!(
        (report.ended_attempts, report.unfinished_attempts),
        (1, 0),
        "{report:?}"
    );
    let f = frames(sub);
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Failed);
    let Payload::TurnFailed(t) = payload(&r.store, id, seq.unwrap()) else {
        panic!("{f:?}")
    };
    assert_eq!(t.code, "shutdown");
    assert_eq!(
        summarize_rows(&r, id),
        [("error".to_owned(), Some("shutdown".to_owned()))]
    );
    assert!(streamed(&mock).is_empty(), "nothing was sent to chat");
}

#[test]
fn stop_during_a_pre_send_compaction_on_a_hung_summariser_ends_the_attempt() {
    let mock = MockLlm::start(&[]);
    let (r, engine, id) = over_the_trigger_with_a_hung_summariser(&mock);
    let sub = send_until_the_summariser_hangs(&mock, &engine, id);
    engine.stop(id).unwrap();
    let f = frames(sub);
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Failed);
    let Payload::TurnFailed(t) = payload(&r.store, id, seq.unwrap()) else {
        panic!("{f:?}")
    };
    assert_eq!(t.code, "stopped");
    assert_eq!(
        summarize_rows(&r, id),
        [("error".to_owned(), Some("stopped".to_owned()))]
    );
    assert!(!engine.turn_active(id));
    // The session is free: the next turn compacts (the summariser answers now) and runs.
    let f = frames(engine.send(id, "and now?", None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Completed, "{f:?}");
}

#[test]
fn a_hung_summariser_delays_a_turn_that_fits_by_the_compaction_deadline_at_most() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    history(&r, id, 1400);
    let settings = EngineSettings {
        context_window: Some(2000),
        compaction_timeout: Duration::from_millis(500),
        ..quiet()
    };
    let engine = engine_on(&r, &mock.url, settings);
    mock.script(json!({"kind": "complete", "hang_before_headers": true}));
    let f = frames(engine.send(id, "one more question", None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Completed, "{f:?}");
    assert_eq!(
        summarize_rows(&r, id),
        [("error".to_owned(), Some("provider_timeout".to_owned()))]
    );
}

#[test]
fn a_turn_that_fits_does_not_wait_for_a_running_post_turn_compaction() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    history(&r, id, 1000);
    let settings = EngineSettings {
        context_window: Some(2000),
        ..quiet()
    };
    let engine = engine_on(&r, &mock.url, settings);
    // A long answer takes the context over the trigger: the post-turn compaction starts,
    // and its summariser hangs (so does the next one asked for).
    let hang = json!({"kind": "complete", "hang_before_headers": true});
    mock.script(json!([hang, hang]));
    mock.script(json!({"kind": "stream", "text": words(300)}));
    let f = frames(engine.send(id, "tell me everything", None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Completed);
    let after = context_tokens(&r, id);
    assert!(after > 1200 && after < 1900, "{after}");
    wait_until("the post-turn summariser call", || {
        summarize_requests(&mock) == 1
    });
    // The next turn still fits the window: it goes on without waiting for the summary.
    let f = frames(engine.send(id, "and briefly?", None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Completed, "{f:?}");
    assert_eq!(streamed(&mock).len(), 2);
    // The compaction yielded to that turn (its call cut, recorded as stopped), and asks
    // again after it; shutdown cuts that call short too.
    wait_until("the summariser asked again", || {
        summarize_requests(&mock) == 2
    });
    let report = engine.shutdown(Duration::from_secs(10));
    assert_eq!(report.skipped_background, 0, "{report:?}");
    assert_eq!(
        summarize_rows(&r, id),
        [
            ("error".to_owned(), Some("stopped".to_owned())),
            ("error".to_owned(), Some("shutdown".to_owned()))
        ]
    );
}

#[test]
fn compaction_by_hand_runs_whatever_the_backoff_and_not_during_a_turn() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    history(&r, id, 600);
    // The summarizer fails twice (the second time asked for less): a digest stands in,
    // and the session's backoff starts.
    mock.script(json!([{"kind": "complete", "status": 500}, {"kind": "complete", "status": 500}]));
    let report = r.engine.compact(id).unwrap();
    assert!(report.compacted, "{report:?}");
    assert_eq!(report.method.as_deref(), Some("extractive"));
    assert_eq!(summarize_requests(&mock), 2);
    // The provider is back: by hand, it summarises at once, over the digest.
    let report = r.engine.compact(id).unwrap();
    assert!(report.compacted, "{report:?}");
    assert_eq!(report.method.as_deref(), Some("llm"));
    assert_eq!(summarize_requests(&mock), 3);
    assert!(report.tokens_after < report.tokens_before, "{report:?}");
    // Not while a turn of the session runs (409).
    mock.script(json!({"kind": "stream", "hang": true}));
    let mut sub = r.engine.send(id, "hang on", None).unwrap();
    while !matches!(
        sub.next_frame(Duration::from_secs(10)),
        Next::Frame(Frame::Status {
            phase: Phase::Waiting
        })
    ) {}
    assert!(matches!(
        r.engine.compact(id),
        Err(EngineError::TurnInFlight)
    ));
    r.engine.stop(id).unwrap();
    frames(sub);
}

fn assert_ends_internal_and_frees_the_session(r: &Rig, id: SessionId) {
    let f = frames(r.engine.send(id, "anything", None).unwrap());
    assert!(matches!(f[0], Frame::Turn { .. }), "{f:?}");
    let (status, seq) = end(&f);
    assert_eq!(status, EndStatus::Failed);
    assert_eq!(error_code(&f).as_deref(), Some("internal"));
    let Payload::TurnFailed(t) = payload(&r.store, id, seq.unwrap()) else {
        panic!("{f:?}")
    };
    assert_eq!(t.code, "internal");
    assert!(!r.engine.turn_active(id), "no lingering 409");
}

#[test]
fn a_panicking_attempt_ends_as_internal_and_frees_the_session() {
    let mock = MockLlm::start(&[]);
    let settings = EngineSettings {
        fault: Some(Fault::PanicInAttempt),
        ..quiet()
    };
    let r = rig_with(&mock.url, settings, 1000);
    let id = session(&r);
    assert_ends_internal_and_frees_the_session(&r, id);
    // Again: the session was not left answering 409.
    assert_ends_internal_and_frees_the_session(&r, id);
    assert!(streamed(&mock).is_empty());
}

#[test]
fn an_attempt_without_a_thread_ends_as_internal_and_frees_the_session() {
    let mock = MockLlm::start(&[]);
    let settings = EngineSettings {
        fault: Some(Fault::NoThreadForAttempt),
        ..quiet()
    };
    let r = rig_with(&mock.url, settings, 1000);
    let id = session(&r);
    assert_ends_internal_and_frees_the_session(&r, id);
    assert_ends_internal_and_frees_the_session(&r, id);
}

#[test]
fn past_the_limit_of_attempts_a_send_is_refused_before_it_writes() {
    let mock = MockLlm::start(&[]);
    let settings = EngineSettings {
        max_active_attempts: 1,
        ..quiet()
    };
    let r = rig_with(&mock.url, settings, 1000);
    let (busy, other) = (session(&r), session(&r));
    mock.script(json!({"kind": "stream", "hang": true}));
    let sub = r.engine.send(busy, "hang on", None).unwrap();
    let Err(e) = r.engine.send(other, "me too", None) else {
        panic!("a second attempt was admitted past the limit")
    };
    assert!(matches!(e, EngineError::Unavailable(_)), "{e:?}");
    assert_eq!(
        brain::api::error::ApiError::from(e).status,
        503,
        "unavailable"
    );
    assert!(kinds(&r.store, other).is_empty(), "nothing written");
    // Stopped once the provider has the request (its scripted hang is used up).
    wait_until("the first request", || streamed(&mock).len() == 1);
    r.engine.stop(busy).unwrap();
    frames(sub);
    let f = frames(r.engine.send(other, "me now", None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Completed, "{f:?}");
}

#[test]
fn a_three_megabyte_answer_reaches_a_late_subscriber_whole_from_a_bounded_log() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = session(&r);
    let text: String = (0..400_000).map(|i| format!("w{i} ")).collect();
    assert!(text.len() > 3_000_000);
    mock.script(json!({"kind": "stream", "text": text, "chunks": 6000}));
    // Nobody reads the attempt while it runs.
    drop(r.engine.send(id, "write a lot", None).unwrap());
    wait_until("the end of the answer", || !r.engine.turn_active(id));
    let late = r.engine.live(id).unwrap();
    let kept = late.turn().frame_count();
    assert!(kept < 1000, "{kept} items kept for 6000 chunks");
    let f = frames(late);
    assert_eq!(end(&f).0, EndStatus::Completed);
    let got: String = f
        .iter()
        .filter_map(|x| match x {
            Frame::Chunk { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        got == text,
        "the late subscriber got the whole answer once, in order"
    );
}

#[test]
fn overlapping_post_turn_jobs_ask_for_a_title_once() {
    let mock = MockLlm::start(&[]);
    let r = rig(&mock);
    let id = r
        .store
        .create_session(None, "You are a test.".into())
        .unwrap()
        .id;
    let title_calls = || {
        mock.requests()
            .iter()
            .filter(|q| {
                q["stream"] != true
                    && q["messages"][0]["content"]
                        .as_str()
                        .is_some_and(|s| s.contains("title"))
            })
            .count()
    };
    // The first title call is slow: the next turn cancels it (the chat comes first), and
    // its job, still holding the session's title claim, asks again once the turn is over;
    // the next turn's post-turn job overlaps it and does not ask.
    mock.script(json!({"kind": "complete", "headers_delay_ms": 3000, "text": "Slow Title"}));
    frames(r.engine.send(id, "first", None).unwrap());
    wait_until("the first title call", || title_calls() == 1);
    frames(r.engine.send(id, "second", None).unwrap());
    wait_until("the title", || r.store.session(id).unwrap().title.is_some());
    let report = r.engine.shutdown(Duration::from_secs(10));
    assert_eq!(report.skipped_background, 0, "{report:?}");
    assert_eq!(title_calls(), 2, "the cancelled call and its one retry");
    let title = r.store.session(id).unwrap().title.unwrap();
    assert!(title.starts_with("Mock Title"), "{title}");
}
