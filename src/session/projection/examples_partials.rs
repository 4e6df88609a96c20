//! Examples of interrupted and running answers: checkpoints as partials, what supersedes
//! them for the model (never for the transcript), and the running attempt's item.

use super::examples::{interrupted, msgs, ui_kinds, ui_kinds_while};
use super::*;
use crate::session::testlog::Log;

#[test]
fn a_trailing_partial_ends_with_the_interrupted_note_and_checkpoints_concatenate() {
    let mut log = Log::new("s");
    let u1 = log.user("tell me a story");
    let c1 = log.checkpoint(u1, 1, "Once upon ");
    log.title("Story");
    let c2 = log.checkpoint(u1, 1, "a time");
    let ctx = log.context();
    let once = interrupted("Once upon a time");
    assert_eq!(
        msgs(&ctx),
        vec![
            (Role::User, "tell me a story"),
            (Role::Assistant, once.as_str())
        ]
    );
    assert_eq!(
        (ctx.messages[1].first_seq, ctx.messages[1].last_seq),
        (c1, c2)
    );
    let items = ui_transcript(&log.events, None);
    let ItemBody::Interrupted { text, attempt, .. } = &items[1].body else {
        panic!("{items:?}")
    };
    assert_eq!(
        (text.as_str(), *attempt, items[1].seq),
        ("Once upon a time", 1, c1)
    );
}

/// The last checkpoint says why the attempt ended (it may add no text): the transcript
/// tells "you stopped it" from "the model was cut off", and the model sees the same
/// partial either way. An attempt whose process died says nothing: `ended` is null.
#[test]
fn an_interrupted_item_says_why_it_ended_and_an_empty_last_checkpoint_changes_no_context() {
    let mut log = Log::new("s");
    let u1 = log.user("count");
    log.checkpoint(u1, 1, "1, 2");
    let before = log.context();
    log.ended(u1, 1, "", "stopped");
    let after = log.context();
    assert_eq!(
        msgs(&before),
        msgs(&after),
        "no text, no change for the model"
    );
    let u2 = log.user("again");
    log.checkpoint(u2, 1, "1, ");
    log.ended(u2, 1, "2, 3", "provider_cut");
    let u3 = log.user("and again");
    log.checkpoint(u3, 1, "1");
    let items = ui_transcript(&log.events, None);
    let ends: Vec<(String, Option<String>)> = items
        .iter()
        .filter_map(|i| match &i.body {
            ItemBody::Interrupted { text, ended, .. } => {
                Some((text.clone(), ended.as_ref().map(|e| e.code.clone())))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("1, 2".to_owned(), Some("stopped".to_owned())),
            ("1, 2, 3".to_owned(), Some("provider_cut".to_owned())),
            ("1".to_owned(), None),
        ]
    );
    let json = serde_json::to_value(&items).unwrap();
    let last = json.as_array().unwrap().last().unwrap();
    assert!(
        last["ended"].is_null() && last.get("ended").is_some(),
        "{last}"
    );
    assert_eq!(json[1]["ended"]["message"], "ended: stopped");
}

#[test]
fn a_follow_up_keeps_the_partial_before_it() {
    let mut log = Log::new("s");
    let u1 = log.user("list primes");
    log.checkpoint(u1, 1, "2, 3, 5");
    log.user("go on");
    let part = interrupted("2, 3, 5");
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, "list primes"),
            (Role::Assistant, part.as_str()),
            (Role::User, "go on")
        ]
    );
}

#[test]
fn a_completed_retry_supersedes_the_partial_for_the_model_not_for_the_ui() {
    let mut log = Log::new("s");
    let u1 = log.user("q");
    log.checkpoint(u1, 1, "half an ans");
    log.answer(u1, 2, "a whole answer");
    assert_eq!(
        msgs(&log.context()),
        vec![(Role::User, "q"), (Role::Assistant, "a whole answer")]
    );
    assert_eq!(
        ui_kinds(&log.events),
        vec!["user", "interrupted", "assistant"]
    );
}

#[test]
fn a_regenerated_answer_replaces_the_earlier_one_for_the_model_only() {
    let mut log = Log::new("s");
    let u1 = log.user("q");
    log.answer(u1, 1, "first answer");
    log.answer(u1, 2, "second answer");
    assert_eq!(
        msgs(&log.context()),
        vec![(Role::User, "q"), (Role::Assistant, "second answer")]
    );
    let items = ui_transcript(&log.events, None);
    let attempts: Vec<u32> = items
        .iter()
        .filter_map(|i| match &i.body {
            ItemBody::Assistant { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, vec![1, 2]);
}

#[test]
fn a_compaction_below_a_partial_keeps_it_and_one_above_removes_it() {
    let mut below = Log::new("s");
    let u1 = below.user("q1");
    let a1 = below.answer(u1, 1, "a1");
    let u2 = below.user("q2");
    let c = below.checkpoint(u2, 1, "partial text");
    below.compaction("S", a1);
    let part = interrupted("partial text");
    assert_eq!(
        msgs(&below.context()),
        vec![
            (Role::User, "[Summary of the conversation so far]\nS\n\nq2"),
            (Role::Assistant, part.as_str()),
        ]
    );
    below.compaction("S2", c);
    let ctx = below.context();
    assert_eq!(
        msgs(&ctx),
        vec![(Role::User, "[Summary of the conversation so far]\nS2")]
    );
    // The UI still shows the partial, and both compactions.
    assert_eq!(
        ui_kinds(&below.events),
        vec![
            "user",
            "assistant",
            "user",
            "interrupted",
            "compaction",
            "compaction"
        ]
    );
}

#[test]
fn the_running_attempts_checkpoints_are_one_streaming_item() {
    let mut log = Log::new("s");
    let u1 = log.user("q1");
    log.checkpoint(u1, 1, "cut ");
    log.checkpoint(u1, 1, "short");
    let u2 = log.user("q2");
    log.checkpoint(u2, 1, "so ");
    log.push(Payload::PendingState(PendingState {
        turn: u2,
        attempt: 1,
        text: "far".into(),
        reasoning: Some("thinking".into()),
        ended: None,
        step: None,
    }));
    // Without the engine's word, the log cannot tell running from cut off.
    assert_eq!(
        ui_kinds(&log.events),
        vec!["user", "interrupted", "user", "interrupted"]
    );
    let running = Some((u2, 1));
    assert_eq!(
        ui_kinds_while(&log.events, running),
        vec!["user", "interrupted", "user", "streaming"],
        "only the running attempt streams; an earlier cut-off answer stays interrupted"
    );
    let json = serde_json::to_value(ui_transcript(&log.events, running)).unwrap();
    assert_eq!(json[3]["kind"], "streaming");
    assert_eq!(json[3]["seq"], u2 + 1, "at its first checkpoint");
    assert_eq!(
        (json[3]["turn"].as_u64(), json[3]["attempt"].as_u64()),
        (Some(u2), Some(1))
    );
    assert_eq!(json[3]["text"], "so far");
    assert_eq!(json[3]["reasoning"], "thinking");
    assert_eq!(json[1]["text"], "cut short");
}

#[test]
fn a_running_retry_streams_while_the_earlier_attempt_stays_interrupted() {
    let mut log = Log::new("s");
    let u1 = log.user("q1");
    log.checkpoint(u1, 1, "first try");
    log.checkpoint(u1, 2, "second try");
    assert_eq!(
        ui_kinds_while(&log.events, Some((u1, 2))),
        vec!["user", "interrupted", "streaming"]
    );
    // The engine may still call an attempt running for the moment its answer is written:
    // the answer wins, and its checkpoints stay hidden.
    log.answer(u1, 2, "second try, whole");
    assert_eq!(
        ui_kinds_while(&log.events, Some((u1, 2))),
        vec!["user", "interrupted", "assistant"]
    );
}

#[test]
fn a_running_attempt_without_a_checkpoint_yet_shows_nothing() {
    let mut log = Log::new("s");
    let u1 = log.user("q1");
    assert_eq!(ui_kinds_while(&log.events, Some((u1, 1))), vec!["user"]);
}
