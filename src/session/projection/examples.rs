//! Examples pinning each rule of SPEC §4, one log at a time.

use super::*;
use crate::session::events::{MemoryFailure, SessionArchived, kind};
use crate::session::testlog::Log;

pub(super) fn msgs(ctx: &Context) -> Vec<(Role, &str)> {
    ctx.messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect()
}

pub(super) fn interrupted(text: &str) -> String {
    format!("{text}\n{INTERRUPTED_NOTE}")
}

pub(super) fn kind_of(body: &ItemBody) -> &'static str {
    match body {
        ItemBody::User { .. } => "user",
        ItemBody::Assistant { .. } => "assistant",
        ItemBody::Interrupted { .. } => "interrupted",
        ItemBody::Streaming { .. } => "streaming",
        ItemBody::Step { .. } => "step",
        ItemBody::Error { .. } => "error",
        ItemBody::Compaction { .. } => "compaction",
        ItemBody::Title { .. } => "title",
        ItemBody::Tool(_) => "tool",
        ItemBody::Permission { .. } => "permission",
        ItemBody::Rewind { .. } => "rewind",
        ItemBody::Unreadable { .. } => "unreadable",
    }
}

pub(super) fn ui_kinds_while(events: &[Event], active: Option<(u64, u32)>) -> Vec<&'static str> {
    ui_transcript(events, active)
        .iter()
        .map(|i| kind_of(&i.body))
        .collect()
}

pub(super) fn ui_kinds(events: &[Event]) -> Vec<&'static str> {
    ui_kinds_while(events, None)
}

#[test]
fn basic_conversation() {
    let mut log = Log::new("be brief");
    let u1 = log.user("hi");
    let a1 = log.answer(u1, 1, "hello");
    let u2 = log.user("how are you?");
    let ctx = log.context();
    assert_eq!(ctx.system, "be brief");
    assert_eq!(
        msgs(&ctx),
        vec![
            (Role::User, "hi"),
            (Role::Assistant, "hello"),
            (Role::User, "how are you?")
        ]
    );
    let seqs: Vec<(u64, u64)> = ctx
        .messages
        .iter()
        .map(|m| (m.first_seq, m.last_seq))
        .collect();
    assert_eq!(seqs, vec![(u1, u1), (a1, a1), (u2, u2)]);
}

#[test]
fn summary_head_then_the_verbatim_tail_and_nothing_replaced_leaks() {
    let mut log = Log::new("s");
    let u1 = log.user("secret one");
    log.answer(u1, 1, "reply one");
    let u2 = log.user("secret two");
    let a2 = log.answer(u2, 1, "reply two");
    let u3 = log.user("third question");
    let a3 = log.answer(u3, 1, "third answer");
    log.compaction("we discussed two secrets", a2);
    let ctx = log.context();
    assert_eq!(
        msgs(&ctx),
        vec![
            (
                Role::User,
                "[Summary of the conversation so far]\nwe discussed two secrets\n\nthird question"
            ),
            (Role::Assistant, "third answer"),
        ]
    );
    assert_eq!(
        (ctx.messages[0].first_seq, ctx.messages[0].last_seq),
        (1, u3)
    );
    assert_eq!(ctx.messages[1].last_seq, a3);
    let all: String = ctx.messages.iter().map(|m| m.content.as_str()).collect();
    for leaked in ["secret one", "reply one", "secret two", "reply two"] {
        assert!(!all.contains(leaked), "{leaked}");
    }
}

#[test]
fn the_newest_compaction_is_the_one_that_counts() {
    let mut log = Log::new("s");
    let u1 = log.user("q1");
    let a1 = log.answer(u1, 1, "a1");
    log.compaction("first summary", a1);
    let u2 = log.user("q2");
    let a2 = log.answer(u2, 1, "a2");
    // The second summary was written from the first summary plus q2/a2.
    log.compaction("second summary", a2);
    let u3 = log.user("q3");
    assert_eq!(
        msgs(&log.context()),
        vec![(
            Role::User,
            "[Summary of the conversation so far]\nsecond summary\n\nq3"
        )]
    );
    assert_eq!(log.context().messages[0].last_seq, u3);
}

#[test]
fn turn_memory_is_a_note_and_is_dropped_when_late() {
    let mut log = Log::new("s");
    let u1 = log.user("fix the build");
    log.answer(u1, 1, "fixed");
    log.push(Payload::TurnMemory(TurnMemory {
        turn: u1,
        attempt: 1,
        files_changed: vec!["a.rs".into(), "b.rs".into()],
        failures: vec![MemoryFailure {
            what: "cargo test".into(),
            why: "typo".into(),
        }],
        key_findings: vec!["use the lane".into()],
    }));
    log.user("thanks");
    assert_eq!(
        msgs(&log.context())[2],
        (
            Role::User,
            "[turn memory]\nfiles changed: a.rs, b.rs\nfailure: cargo test — typo\nfinding: use the lane\n\nthanks"
        )
    );

    let mut late = Log::new("s");
    let u1 = late.user("q1");
    late.answer(u1, 1, "a1");
    let u2 = late.user("q2");
    let before = llm_request(&late.events, u2);
    late.memory(u1, 1, "too late");
    assert_eq!(late.context(), before, "late residue changes nothing");
    assert_eq!(ui_kinds(&late.events), vec!["user", "assistant", "user"]);
}

#[test]
fn memory_of_a_superseded_attempt_is_dropped() {
    let mut log = Log::new("s");
    let u1 = log.user("q");
    log.answer(u1, 1, "first");
    log.memory(u1, 1, "from the first");
    log.answer(u1, 2, "second");
    assert_eq!(
        msgs(&log.context()),
        vec![(Role::User, "q"), (Role::Assistant, "second")]
    );
    log.memory(u1, 2, "from the second");
    assert_eq!(
        msgs(&log.context())[2],
        (Role::User, "[turn memory]\nfinding: from the second")
    );
}

#[test]
fn a_failed_turn_is_a_note_until_an_attempt_completes() {
    let mut log = Log::new("s");
    let u1 = log.user("q");
    log.failed(u1, 1, "provider_unreachable");
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, "q"),
            (
                Role::Assistant,
                "[no answer: this turn failed (provider_unreachable)]"
            )
        ]
    );
    log.answer(u1, 2, "finally");
    assert_eq!(
        msgs(&log.context()),
        vec![(Role::User, "q"), (Role::Assistant, "finally")]
    );
    assert_eq!(ui_kinds(&log.events), vec!["user", "error", "assistant"]);
}

#[test]
fn notes_of_one_turn_merge_into_one_assistant_message() {
    let mut log = Log::new("s");
    let u1 = log.user("q");
    log.checkpoint(u1, 1, "par");
    log.failed(u1, 2, "stopped");
    let expected = format!(
        "{}\n\n[no answer: this turn failed (stopped)]",
        interrupted("par")
    );
    assert_eq!(
        msgs(&log.context()),
        vec![(Role::User, "q"), (Role::Assistant, expected.as_str())]
    );
}

#[test]
fn a_turn_that_left_no_trace_gets_a_note_instead_of_merging_user_messages() {
    let mut log = Log::new("s");
    let u1 = log.user("first");
    let request = llm_request(&log.events, u1);
    let u2 = log.user("second");
    let ctx = llm_request(&log.events, u2);
    assert_eq!(
        msgs(&ctx),
        vec![
            (Role::User, "first"),
            (Role::Assistant, NO_ANSWER_NOTE),
            (Role::User, "second")
        ]
    );
    assert_eq!(
        ctx.messages[0], request.messages[0],
        "I3: the first request's message stands"
    );
}

#[test]
fn a_retry_resends_exactly_the_original_request() {
    let mut log = Log::new("s");
    let u1 = log.user("q1");
    log.answer(u1, 1, "a1");
    let u2 = log.user("q2");
    let original = llm_request(&log.events, u2);
    log.checkpoint(u2, 1, "cut");
    log.memory(u2, 1, "nothing");
    log.failed(u2, 2, "provider_error");
    log.title("t");
    assert_eq!(llm_request(&log.events, u2), original);
    log.answer(u2, 3, "a2");
    assert_eq!(llm_request(&log.events, u2), original, "regenerate too");
    assert_eq!(
        original.messages.last().map(|m| m.content.as_str()),
        Some("q2")
    );
}

#[test]
fn tool_executions_are_not_sent_but_shown() {
    let mut log = Log::new("s");
    let u1 = log.user("q");
    log.tool();
    log.answer(u1, 1, "a");
    assert_eq!(
        msgs(&log.context()),
        vec![(Role::User, "q"), (Role::Assistant, "a")]
    );
    assert_eq!(ui_kinds(&log.events), vec!["user", "tool", "assistant"]);
}

/// A question about a tool call is one item, with its answer once there is one; neither
/// the question, the answer nor the call reaches the model (SPEC §13 "after the turn").
#[test]
fn permissions_are_one_item_each_with_their_answer_and_never_sent() {
    let mut log = Log::new("s");
    let u1 = log.user("write it");
    log.asked(u1, "c1", "fs__write_file");
    log.answered("c1", "allow", true);
    log.tool();
    log.answer(u1, 1, "done");
    let u2 = log.user("again");
    log.asked(u2, "c2", "fs__write_file");
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, "write it"),
            (Role::Assistant, "done"),
            (Role::User, "again")
        ]
    );
    let items = ui_transcript(&log.events, None);
    assert_eq!(
        items.iter().map(|i| kind_of(&i.body)).collect::<Vec<_>>(),
        [
            "user",
            "permission",
            "tool",
            "assistant",
            "user",
            "permission"
        ]
    );
    let answers: Vec<_> = items
        .iter()
        .filter_map(|i| match &i.body {
            ItemBody::Permission {
                call_id,
                decision,
                by,
                remember,
                ..
            } => Some((
                call_id.as_str(),
                decision.as_deref(),
                by.as_deref(),
                *remember,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        answers,
        [
            ("c1", Some("allow"), Some("user"), true),
            ("c2", None, None, false)
        ]
    );
    let json = serde_json::to_value(&items[5]).unwrap();
    assert!(
        json["decision"].is_null() && json["kind"] == "permission",
        "{json}"
    );
}

#[test]
fn reasoning_is_never_sent() {
    let mut log = Log::new("s");
    let u1 = log.user("q");
    log.answer(u1, 1, "a");
    let all: String = log
        .context()
        .messages
        .iter()
        .map(|m| m.content.clone())
        .collect();
    assert!(!all.contains("thinking"));
    let items = ui_transcript(&log.events, None);
    assert!(
        matches!(&items[1].body, ItemBody::Assistant { reasoning: Some(r), .. } if r == "thinking about a")
    );
}

#[test]
fn a_bad_payload_is_skipped_by_the_model_and_shown_as_unreadable() {
    let mut log = Log::new("s");
    let u1 = log.user("q");
    log.raw(kind::USER_MESSAGE, r#"{"txt": 1}"#);
    log.raw(kind::ASSISTANT_TURN, r#"{"turn": "two"}"#);
    log.raw("from_the_future", r#"{"x": 1}"#);
    log.answer(u1, 1, "a");
    assert_eq!(
        msgs(&log.context()),
        vec![(Role::User, "q"), (Role::Assistant, "a")]
    );
    let items = ui_transcript(&log.events, None);
    let unreadable: Vec<&str> = items
        .iter()
        .filter_map(|i| match &i.body {
            ItemBody::Unreadable { event_kind } => Some(event_kind.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        unreadable,
        vec!["user_message", "assistant_turn", "from_the_future"]
    );
}

#[test]
fn the_ui_shows_every_kind_in_order() {
    let mut log = Log::new("s");
    log.title("named");
    let u1 = log.user("q1");
    log.checkpoint(u1, 1, "pa");
    log.checkpoint(u1, 1, "rt");
    log.failed(u1, 2, "stopped");
    log.tool();
    let a = log.answer(u1, 3, "a1");
    log.memory(u1, 3, "k");
    log.push(Payload::SessionArchived(SessionArchived { archived: true }));
    log.compaction("sum", a);
    log.raw(kind::PENDING_STATE, "{}");
    assert_eq!(
        ui_kinds(&log.events),
        vec![
            "title",
            "user",
            "interrupted",
            "error",
            "tool",
            "assistant",
            "compaction",
            "unreadable"
        ]
    );
    let json = serde_json::to_value(ui_transcript(&log.events, None)).unwrap();
    assert_eq!(json[2]["kind"], "interrupted");
    assert_eq!(json[2]["text"], "part");
    assert_eq!(json[6]["summary"], "sum");
    assert_eq!(json[7]["event_kind"], "pending_state");
    assert!(json[0]["created_at"].is_string() && json[0]["seq"] == 2);
}

#[test]
fn a_compaction_item_says_how_its_summary_was_written() {
    let mut log = Log::new("s");
    let u1 = log.user("q1");
    let a1 = log.answer(u1, 1, "a1");
    // Written before `method` existed: an LLM summary.
    log.raw(
        kind::COMPACTION_APPLIED,
        &format!(
            r#"{{"summary":"old","replaces_through_seq":{a1},"tokens_before":9,"tokens_after":3,"model":"m"}}"#
        ),
    );
    let u2 = log.user("q2");
    let a2 = log.answer(u2, 1, "a2");
    log.push(Payload::CompactionApplied(CompactionApplied {
        summary: "User: q2".into(),
        replaces_through_seq: a2,
        tokens_before: 9,
        tokens_after: 3,
        model: "m".into(),
        method: crate::session::events::method::EXTRACTIVE.into(),
    }));
    let json = serde_json::to_value(ui_transcript(&log.events, None)).unwrap();
    let methods: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "compaction")
        .map(|i| i["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["llm", "extractive"]);
    // The model sees a digest like any summary.
    let ctx = log.context();
    assert_eq!(ctx.messages[0].content, format!("{SUMMARY_HEAD}\nUser: q2"));
}

#[test]
fn the_tail_the_store_reads_projects_like_the_whole_log() {
    let mut log = Log::new("s");
    let u1 = log.user("q1");
    let a1 = log.answer(u1, 1, "a1");
    let u2 = log.user("q2");
    log.checkpoint(u2, 1, "p");
    log.compaction("S", a1);
    log.answer(u2, 2, "a2");
    let tail: Vec<Event> = log
        .events
        .iter()
        .filter(|e| e.seq == 1 || e.seq > a1)
        .cloned()
        .collect();
    assert_eq!(llm_context(&tail), log.context());
}
