//! Background calls against `mock_llm` behaving like a small local model: they never delay
//! the chat on a one-slot server, they are small and shaped, structured output falls back
//! once per model when refused, and a purpose that keeps failing pauses (the breaker).

use serde_json::{Value, json};

use brain::chat::breaker::BREAKER_THRESHOLD;
use brain::chat::engine::EngineSettings;
use brain::chat::post_turn::{MEMORY_MAX_TOKENS, TITLE_MAX_TOKENS};

use crate::engine::{Rig, frames, rig_with, wait_until};
use crate::support::*;

fn with_background() -> EngineSettings {
    EngineSettings {
        distill: true,
        titles: true,
        ..EngineSettings::default()
    }
}

/// An untitled session (so titles are asked for).
fn untitled(r: &Rig) -> brain::session::SessionId {
    r.store
        .create_session(None, "You are a test.".into())
        .unwrap()
        .id
}

fn system_of(q: &Value) -> &str {
    q["messages"][0]["content"].as_str().unwrap_or_default()
}

fn is_distill(q: &Value) -> bool {
    q["stream"] != true && system_of(q).contains("Extract a memory")
}

fn is_title(q: &Value) -> bool {
    q["stream"] != true && system_of(q).contains("title")
}

fn ms(q: &Value, key: &str) -> u64 {
    q[key].as_u64().unwrap_or(u64::MAX)
}

/// One turn, then every post-turn job done (a user who reads before typing again).
fn turn_and_settle(r: &Rig, id: brain::session::SessionId, text: &str) {
    frames(r.engine.send(id, text, None).unwrap());
    wait_until("the post-turn work", || r.engine.background_jobs() == 0);
}

#[test]
fn a_weak_model_costs_a_few_distillations_then_none_and_background_calls_are_small() {
    let mock = MockLlm::start(&["--weak"]);
    let r = rig_with(&mock.url, with_background(), 2000);
    let id = untitled(&r);
    for i in 0..8 {
        turn_and_settle(&r, id, &format!("question {i}"));
    }
    let requests = mock.requests();
    let distills: Vec<&Value> = requests.iter().filter(|q| is_distill(q)).collect();
    assert_eq!(
        distills.len(),
        BREAKER_THRESHOLD as usize,
        "after {BREAKER_THRESHOLD} invalid answers distillation pauses for the model"
    );
    // Its titles are preambles ("Sure! Here is a title…:"), unusable: titles pause too.
    assert_eq!(r.engine.paused("mock-model"), vec!["distill", "title"]);
    for q in &distills {
        assert_eq!(q["max_tokens"], MEMORY_MAX_TOKENS);
        assert_eq!(q["response_format"]["type"], "json_schema");
        assert_eq!(
            q["response_format"]["json_schema"]["schema"]["required"],
            json!(["files_changed", "failures", "key_findings"])
        );
    }
    let titles: Vec<&Value> = requests.iter().filter(|q| is_title(q)).collect();
    assert_eq!(
        titles.len(),
        BREAKER_THRESHOLD as usize,
        "a preamble is no title"
    );
    for q in &titles {
        assert_eq!(q["max_tokens"], TITLE_MAX_TOKENS);
        assert_eq!(q["stop"], json!(["\n"]));
    }
    assert_eq!(
        r.store.session(id).unwrap().title,
        None,
        "no junk title stored"
    );
    r.engine.shutdown(std::time::Duration::from_secs(10));
}

#[test]
fn on_one_slot_a_chat_request_never_waits_behind_a_background_request() {
    let mock = MockLlm::start(&["--one-slot"]);
    let r = rig_with(&mock.url, with_background(), 2000);
    let id = untitled(&r);
    // Every background call takes 3 s: a chat behind one would wait that long.
    let slow = |text: &str| json!({"kind": "complete", "headers_delay_ms": 3000, "text": text});
    let memory = r#"{"files_changed": [], "failures": [], "key_findings": ["x"]}"#;
    mock.script(json!([
        slow(memory),
        slow("Slow Title"),
        slow(memory),
        slow(memory)
    ]));
    let in_service = |pick: fn(&Value) -> bool| {
        mock.requests()
            .iter()
            .any(|q| pick(q) && q.get("_started_ms").is_some() && q.get("_ended_ms").is_none())
    };
    frames(r.engine.send(id, "first", None).unwrap());
    wait_until("the distillation in service", || in_service(is_distill));
    frames(r.engine.send(id, "second", None).unwrap());
    wait_until("the title in service", || in_service(is_title));
    frames(r.engine.send(id, "third", None).unwrap());
    r.engine.shutdown(std::time::Duration::from_secs(10));

    let requests = mock.requests();
    let chats: Vec<&Value> = requests.iter().filter(|q| q["stream"] == true).collect();
    let background: Vec<&Value> = requests.iter().filter(|q| q["stream"] != true).collect();
    assert_eq!(chats.len(), 3);
    for c in &chats {
        let (arrived, started, ended) = (
            ms(c, "_arrived_ms"),
            ms(c, "_started_ms"),
            ms(c, "_ended_ms"),
        );
        assert!(
            started - arrived < 1000,
            "a chat request was served {} ms after it arrived: {requests:#?}",
            started - arrived
        );
        for b in &background {
            let b_started = ms(b, "_started_ms");
            assert!(
                !(arrived..ended).contains(&b_started),
                "a background request was served while a chat request waited or ran: \
                 {requests:#?}"
            );
            if ms(b, "_arrived_ms") < arrived && ms(b, "_ended_ms") > arrived {
                assert_eq!(
                    b["_cancelled"], true,
                    "a background call in service when a chat arrived is cancelled"
                );
            }
        }
    }
    assert!(
        background.iter().any(|b| b["_cancelled"] == true),
        "the scenario cancelled something: {requests:#?}"
    );
}

#[test]
fn a_server_refusing_response_format_is_asked_without_it_once_and_from_then_on() {
    let mock = MockLlm::start(&["--refuse-response-format"]);
    let settings = EngineSettings {
        titles: false,
        ..with_background()
    };
    let r = rig_with(&mock.url, settings, 2000);
    let id = untitled(&r);
    turn_and_settle(&r, id, "one");
    turn_and_settle(&r, id, "two");
    let sent: Vec<bool> = mock
        .requests()
        .iter()
        .filter(|q| is_distill(q))
        .map(|q| q.get("response_format").is_some())
        .collect();
    assert_eq!(
        sent,
        vec![true, false, false],
        "refused once, asked again without it, never sent to that model again"
    );
    let memories = crate::engine::kinds(&r.store, id)
        .iter()
        .filter(|k| *k == "turn_memory")
        .count();
    assert_eq!(memories, 2, "the prompt-only way still gives memory");
    assert!(r.engine.paused("mock-model").is_empty());
}

/// An engine on `mock` with a 400-token window and no distillation or titles, and a
/// session on it.
fn small_window(mock: &MockLlm) -> (Rig, brain::session::SessionId) {
    let settings = EngineSettings {
        context_window: Some(400),
        distill: false,
        titles: false,
        ..EngineSettings::default()
    };
    let r = rig_with(&mock.url, settings, 1000);
    let id = r
        .store
        .create_session(Some("t".into()), "You are a test.".into())
        .unwrap()
        .id;
    (r, id)
}

/// `/stop` during a pre-send compaction closes the summary's connection, so a one-slot
/// server is free for the next turn at once (the summary used to run to its end while the
/// next turn queued behind it).
#[test]
fn stop_during_a_compaction_frees_a_one_slot_server_for_the_next_turn() {
    use brain::chat::frames::EndStatus;
    let mock = MockLlm::start(&["--one-slot"]);
    let (r, id) = small_window(&mock);
    for i in 0..2 {
        let f = frames(
            r.engine
                .send(id, &format!("{i} {}", "word ".repeat(40)), None)
                .unwrap(),
        );
        assert_eq!(crate::engine::end(&f).0, EndStatus::Completed);
    }
    // The earlier turns' post-persist work is done first: the summary held below must be
    // the new turn's pre-send compaction, not a late background one (on a loaded machine
    // that one could take the held answer while the turn went on without waiting).
    wait_until("the post-turn work", || r.engine.background_jobs() == 0);
    mock.defaults(json!({"summary": {"headers_delay_ms": 20_000}}));
    let before = mock.requests().len();
    let sub = r
        .engine
        .send(id, &format!("again {}", "word ".repeat(150)), None)
        .unwrap();
    let in_service = || {
        mock.requests().iter().skip(before).position(|q| {
            q["stream"] != true && q.get("_started_ms").is_some() && q.get("_ended_ms").is_none()
        })
    };
    wait_until("a summary in service", || in_service().is_some());
    let at = before + in_service().unwrap();
    r.engine.stop(id).unwrap();
    frames(sub);
    wait_until("the summary's connection closed", || {
        mock.requests()[at]["_cancelled"] == true
    });
    mock.defaults(json!({"summary": {"text": "A short summary."}}));
    let f = frames(r.engine.send(id, "short one", None).unwrap());
    assert_eq!(crate::engine::end(&f).0, EndStatus::Completed);
}

/// Post-persist compaction is a background call (issue 27): on a one-slot server the next
/// turn does not wait for its summary. The summary's call is cancelled when the turn
/// arrives, the turn goes first (its request fits without compacting), and the compaction
/// lands after it.
#[test]
fn the_next_turn_does_not_wait_for_a_post_persist_summary_on_one_slot() {
    use brain::chat::frames::EndStatus;
    let mock = MockLlm::start(&["--one-slot"]);
    let (r, id) = small_window(&mock);
    // The first summary asked for takes 20 s: a chat behind it would wait that long.
    mock.script(json!({"kind": "complete", "headers_delay_ms": 20_000, "text": "Slow summary."}));
    // Over the trigger (240) from the first turn on; the second is the first with enough
    // messages to compact: its post-persist compaction asks for the slow summary.
    for text in [format!("big {}", "word ".repeat(250)), "hi".to_owned()] {
        let f = frames(r.engine.send(id, &text, None).unwrap());
        assert_eq!(crate::engine::end(&f).0, EndStatus::Completed);
    }
    let summary_in_service = || {
        mock.requests().iter().position(|q| {
            q["stream"] != true && q.get("_started_ms").is_some() && q.get("_ended_ms").is_none()
        })
    };
    wait_until("the post-persist summary in service", || {
        summary_in_service().is_some()
    });
    let at = summary_in_service().unwrap();
    let f = frames(r.engine.send(id, "short one", None).unwrap());
    assert_eq!(crate::engine::end(&f).0, EndStatus::Completed);
    let requests = mock.requests();
    let summary = &requests[at];
    let chat = requests
        .iter()
        .rfind(|q| q["stream"] == true)
        .expect("the third turn's request");
    assert_eq!(
        summary["_cancelled"], true,
        "the summary's call is cancelled when the turn arrives: {requests:#?}"
    );
    assert!(
        ms(summary, "_ended_ms") <= ms(chat, "_started_ms")
            && ms(chat, "_ended_ms") < ms(summary, "_started_ms") + 20_000,
        "the turn was served before the summary could have ended: {requests:#?}"
    );
    // It resumes after the turn, with the next (quick) summary.
    wait_until("the compaction after the turn", || {
        r.store
            .events(id, 1, None)
            .unwrap()
            .iter()
            .any(|e| e.kind == "compaction_applied")
    });
}
