//! A session on a small window whose summarizer never manages a summary (issue 15): every
//! summary is cut at its token limit, or the provider answers 500 to summaries. The
//! conversation goes on anyway: each failed compaction asks twice (the second time for a
//! shorter summary), then an extractive digest keeps the context under the window.

use brain::chat::engine::EngineSettings;
use brain::chat::frames::EndStatus;
use brain::session::SessionId;
use brain::session::events::{CompactionApplied, method};
use brain::tokens::Estimator;
use serde_json::{Value, json};

use crate::engine::*;
use crate::support::*;

const WINDOW: u64 = 1024;
const MAX_OUTPUT: u32 = 60;
const TURNS: usize = 40;

fn compactions(r: &Rig, id: SessionId) -> Vec<CompactionApplied> {
    crate::compaction::compactions(&r.store, id)
}

fn turn_memories(r: &Rig, id: SessionId) -> usize {
    r.store
        .events(id, 0, None)
        .unwrap()
        .iter()
        .filter(|e| e.kind == "turn_memory")
        .count()
}

/// The summary requests the mock received, in order.
fn summary_requests(mock: &MockLlm) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|q| {
            q["stream"] != true
                && q["messages"][0]["content"]
                    .as_str()
                    .is_some_and(|s| s.contains("compress the earlier part"))
        })
        .collect()
}

/// Every chat request's estimate, as brain counts it.
fn chat_request_tokens(mock: &MockLlm) -> Vec<u64> {
    let e = Estimator::new();
    streamed(mock)
        .iter()
        .map(|q| {
            q["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| e.message(m["content"].as_str().unwrap()))
                .sum()
        })
        .collect()
}

fn forty_turns_survive(summary_step: Value) {
    let mock = MockLlm::start(&[]);
    mock.defaults(json!({ "summary": summary_step }));
    let settings = EngineSettings {
        context_window: Some(WINDOW),
        max_output_tokens: Some(MAX_OUTPUT),
        distill: true,
        ..EngineSettings::default()
    };
    let r = rig_with(&mock.url, settings, 1000);
    let id = session(&r);
    let filler = "we walked along the river past the old mill and the bakery on the corner";
    for turn in 0..TURNS {
        let text = format!("question {turn}: tell me about the walk. {filler} {filler} {filler}");
        let f = frames(r.engine.send(id, &text, None).unwrap());
        assert_eq!(end(&f).0, EndStatus::Completed, "turn {turn}: {f:?}");
        // Each turn's memory lands before the next user message, so it counts (§4).
        wait_until("the turn's memory", || turn_memories(&r, id) == turn + 1);
    }
    let all = compactions(&r, id);
    assert!(all.len() >= 3, "{} compactions", all.len());
    assert!(
        all.iter().all(|c| c.method == method::EXTRACTIVE),
        "{:?}",
        all.iter().map(|c| &c.method).collect::<Vec<_>>()
    );
    // The findings of the turns digested are kept.
    assert!(
        all.iter()
            .any(|c| c.summary.contains("Finding: mock finding")),
        "{}",
        all[0].summary
    );
    // No request went over the window less the output reserve (I4).
    let limit = WINDOW - u64::from(MAX_OUTPUT);
    let sizes = chat_request_tokens(&mock);
    assert_eq!(sizes.len(), TURNS);
    assert!(sizes.iter().all(|t| *t <= limit), "{sizes:?} > {limit}");
    // Summaries were asked for in pairs, the second for half the tokens with the target in
    // its prompt; the backoff spares the provider the rest (fewer pairs than compactions).
    let asked = summary_requests(&mock);
    assert!(!asked.is_empty() && asked.len() % 2 == 0, "{}", asked.len());
    for pair in asked.chunks(2) {
        let (first, second) = (&pair[0], &pair[1]);
        assert_eq!(
            second["max_tokens"].as_u64().unwrap(),
            first["max_tokens"].as_u64().unwrap() / 2
        );
        assert_eq!(second["messages"][1], first["messages"][1]);
        assert!(
            second["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("Be brief: at most")
        );
    }
    assert!(asked.len() / 2 < all.len(), "{} pairs", asked.len() / 2);
    let rows = r.store.usage(Some(id)).unwrap().by_purpose["summarize"].calls;
    assert_eq!(rows as usize, asked.len(), "every call is in the ledger");
}

#[test]
fn forty_turns_on_a_small_window_when_every_summary_is_cut_at_its_limit() {
    forty_turns_survive(
        json!({"text": "The user and the assistant talked about", "finish_reason": "length"}),
    );
}

#[test]
fn forty_turns_on_a_small_window_when_the_provider_fails_every_summary() {
    forty_turns_survive(json!({"status": 500}));
}

/// A rig on a 1024-token window with a large output reserve, no background calls.
fn reserved_rig(mock: &MockLlm, compact_at: f64, reserve: u32) -> Rig {
    let settings = EngineSettings {
        context_window: Some(WINDOW),
        max_output_tokens: Some(reserve),
        compact_at,
        distill: false,
        titles: false,
        ..EngineSettings::default()
    };
    rig_with(&mock.url, settings, 1000)
}

/// An output reserve larger than the headroom above the trigger (limit 724 under a
/// trigger of 921): contexts between the two were never compacted and every turn failed
/// with `context_overflow` until the trigger was passed.
#[test]
fn a_reserve_above_the_trigger_headroom_still_compacts_before_overflowing() {
    let mock = MockLlm::start(&[]);
    let r = reserved_rig(&mock, 0.9, 300);
    let id = session(&r);
    for i in 0..12 {
        let message = format!("message {i}: {}", words(60, i));
        let f = frames(r.engine.send(id, &message, None).unwrap());
        assert_eq!(end(&f).0, EndStatus::Completed, "turn {i}: {f:?}");
    }
    assert!(!compactions(&r, id).is_empty(), "it compacted instead");
}

/// A long answer, then a long paste: three live messages, none over the limit, together
/// over it. Summarising the first question and its answer makes room; the floor of four
/// live messages refused it and the turn failed.
#[test]
fn three_live_messages_over_the_limit_are_compacted_not_refused() {
    let mock = MockLlm::start(&[]);
    let r = reserved_rig(&mock, 0.6, 300);
    let id = session(&r);
    let long_answer = json!({"kind": "stream", "text": words(280, 7)});
    let f = turn_with(&mock, &r, id, long_answer);
    assert_eq!(end(&f).0, EndStatus::Completed);
    let paste = format!("Here is my build log:\n{}", words(520, 8));
    let f = frames(r.engine.send(id, &paste, None).unwrap());
    assert_eq!(end(&f).0, EndStatus::Completed, "{f:?}");
    assert_eq!(compactions(&r, id).len(), 1);
}

/// `n` words, different for each seed.
fn words(n: usize, seed: usize) -> String {
    const W: [&str; 16] = [
        "river", "garden", "budget", "window", "letter", "morning", "station", "number", "planet",
        "market", "pencil", "winter", "castle", "bridge", "summer", "doctor",
    ];
    (0..n)
        .map(|i| W[(i * 7 + seed * 3 + i / 5) % 16])
        .collect::<Vec<_>>()
        .join(" ")
}
