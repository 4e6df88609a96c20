//! Examples pinning SPEC §4 step 0 (rewinds) in both projections, one log at a time.

use super::*;
use crate::session::events::{Rewind, kind};
use crate::session::testlog::Log;

fn msgs(ctx: &Context) -> Vec<(Role, &str)> {
    ctx.messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect()
}

fn abandoned_seqs(events: &[Event]) -> Vec<u64> {
    ui_transcript(events, None)
        .iter()
        .filter(|i| i.abandoned)
        .map(|i| i.seq)
        .collect()
}

fn summary(text: &str) -> String {
    format!("{SUMMARY_HEAD}\n{text}")
}

/// 2 u1, 3 a1, 4 u2, 5 a2, 6 u3, 7 a3.
fn three_turns() -> (Log, [u64; 6]) {
    let mut log = Log::new("s");
    let u1 = log.user("one");
    let a1 = log.answer(u1, 1, "first");
    let u2 = log.user("two");
    let a2 = log.answer(u2, 1, "second");
    let u3 = log.user("three");
    let a3 = log.answer(u3, 1, "third");
    (log, [u1, a1, u2, a2, u3, a3])
}

#[test]
fn an_edit_hides_the_edited_message_and_everything_after_it_from_the_model() {
    let (mut log, [_, _, u2, a2, u3, a3]) = three_turns();
    let edited = log.edit(u2, "two, better");
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, "one"),
            (Role::Assistant, "first"),
            (Role::User, "two, better"),
        ]
    );
    // The transcript keeps every event, flags exactly the abandoned branch, and shows the
    // rewind itself.
    let items = ui_transcript(&log.events, None);
    assert_eq!(items.len(), log.events.len() - 1, "all but session_started");
    assert_eq!(abandoned_seqs(&log.events), vec![u2, a2, u3, a3]);
    let rewind = &items[items.len() - 2];
    assert_eq!(
        rewind.body,
        ItemBody::Rewind {
            to_seq: u2 - 1,
            edited_seq: u2
        }
    );
    assert!(!rewind.abandoned);
    assert_eq!(
        items.last().map(|i| (i.seq, i.abandoned)),
        Some((edited, false))
    );
}

#[test]
fn an_edit_of_an_edit_hides_both_earlier_versions() {
    let (mut log, [_, _, u2, a2, u3, a3]) = three_turns();
    let w1 = log.next_seq();
    let v2 = log.edit(u2, "two, v2");
    let b2 = log.answer(v2, 1, "second, v2");
    let v3 = log.edit(v2, "two, v3");
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, "one"),
            (Role::Assistant, "first"),
            (Role::User, "two, v3"),
        ]
    );
    // The first rewind is still on the current branch (it is the second's `to_seq`).
    assert_eq!(abandoned_seqs(&log.events), vec![u2, a2, u3, a3, v2, b2]);
    assert!(
        !ui_transcript(&log.events, None)[..]
            .iter()
            .any(|i| i.seq == w1 && i.abandoned)
    );
    assert_eq!(v3, log.next_seq() - 1);
}

#[test]
fn an_edit_inside_an_earlier_edits_continuation_keeps_that_edit() {
    let (mut log, [_, _, u2, ..]) = three_turns();
    let v2 = log.edit(u2, "two, v2");
    let b2 = log.answer(v2, 1, "second, v2");
    let u4 = log.user("four");
    let a4 = log.answer(u4, 1, "fourth");
    log.edit(u4, "four, v2");
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, "one"),
            (Role::Assistant, "first"),
            (Role::User, "two, v2"),
            (Role::Assistant, "second, v2"),
            (Role::User, "four, v2"),
        ]
    );
    let hidden = abandoned_seqs(&log.events);
    assert!(hidden.contains(&u4) && hidden.contains(&a4));
    assert!(!hidden.contains(&v2) && !hidden.contains(&b2));
}

#[test]
fn an_edit_of_an_older_message_hides_a_later_edit_and_its_branch() {
    let (mut log, [u1, ..]) = three_turns();
    let v2 = log.edit(4, "two, v2");
    log.answer(v2, 1, "second, v2");
    log.edit(u1, "one, v2");
    assert_eq!(msgs(&log.context()), vec![(Role::User, "one, v2")]);
    let hidden = abandoned_seqs(&log.events);
    assert_eq!(hidden, (u1..log.next_seq() - 2).collect::<Vec<_>>());
}

#[test]
fn a_hidden_rewind_hides_nothing() {
    // Written by hand: a rewind to seq 1, then one to seq 3 that hides the first. The first
    // would have hidden 2 and 3; hidden, it takes no part.
    let mut log = Log::new("s");
    let u1 = log.user("one");
    let a1 = log.answer(u1, 1, "first");
    let u2 = log.user("two");
    log.answer(u2, 1, "second");
    log.push(Payload::Rewind(Rewind {
        to_seq: 1,
        edited_seq: 2,
    }));
    log.user("stray");
    log.push(Payload::Rewind(Rewind {
        to_seq: a1,
        edited_seq: u2,
    }));
    log.user("two, v2");
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, "one"),
            (Role::Assistant, "first"),
            (Role::User, "two, v2"),
        ]
    );
    assert_eq!(abandoned_seqs(&log.events), vec![4, 5, 6, 7]);
}

#[test]
fn an_unreadable_rewind_hides_nothing() {
    let (mut log, _) = three_turns();
    let before = log.context();
    let bad = log.raw(kind::REWIND, r#"{"to_seq": "x"}"#);
    assert_eq!(log.context(), before);
    let items = ui_transcript(&log.events, None);
    assert!(items.iter().all(|i| !i.abandoned));
    assert!(matches!(
        items.last().map(|i| (i.seq, &i.body)),
        Some((s, ItemBody::Unreadable { .. })) if s == bad
    ));
}

#[test]
fn a_rewind_that_hides_the_newest_compaction_brings_back_the_older_one() {
    let mut log = Log::new("s");
    let u1 = log.user("one");
    let a1 = log.answer(u1, 1, "first");
    let u2 = log.user("two");
    let a2 = log.answer(u2, 1, "second");
    log.compaction("about one", a1);
    let u3 = log.user("three");
    log.answer(u3, 1, "third");
    let c2 = log.compaction("about one and two", a2);
    let u4 = log.user("four");
    log.answer(u4, 1, "fourth");
    assert!(
        log.context().messages[0]
            .content
            .starts_with(&summary("about one and two"))
    );
    // u3 is after the newest compaction's boundary (a2): editable. The rewind hides c2.
    log.edit(u3, "three, v2");
    assert!(abandoned_seqs(&log.events).contains(&c2));
    // The summary and the next user message merge, as two user messages always do.
    let head = format!("{}\n\ntwo", summary("about one"));
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, head.as_str()),
            (Role::Assistant, "second"),
            (Role::User, "three, v2"),
        ]
    );
    assert_eq!(visible_compaction_boundary(&log.events), a1);
}

#[test]
fn a_rewind_that_hides_the_only_compaction_brings_back_the_whole_log() {
    let (mut log, [u1, a1, u2, a2, ..]) = three_turns();
    let c = log.compaction("about one", a1);
    assert!(
        log.context().messages[0]
            .content
            .starts_with(&summary("about one"))
    );
    log.edit(u2, "two, v2");
    assert!(abandoned_seqs(&log.events).contains(&c));
    assert_eq!(
        msgs(&log.context()),
        vec![
            (Role::User, "one"),
            (Role::Assistant, "first"),
            (Role::User, "two, v2"),
        ]
    );
    assert_eq!(visible_compaction_boundary(&log.events), 0);
    assert!(u1 < a2);
}

#[test]
fn a_retry_after_an_edit_resends_the_edited_request() {
    let (mut log, [_, _, u2, ..]) = three_turns();
    let v2 = log.edit(u2, "two, v2");
    let first = llm_request(&log.events, v2);
    log.checkpoint(v2, 1, "half an ans");
    log.answer(v2, 2, "second, v2");
    log.memory(v2, 2, "found");
    assert_eq!(llm_request(&log.events, v2), first);
    assert_eq!(
        msgs(&first),
        vec![
            (Role::User, "one"),
            (Role::Assistant, "first"),
            (Role::User, "two, v2"),
        ]
    );
}

#[test]
fn a_request_of_an_older_turn_ignores_compactions_a_later_rewind_hid() {
    let (mut log, [_, a1, u2, ..]) = three_turns();
    log.compaction("about one", a1);
    log.edit(u2, "two, v2");
    // The request of the first turn never saw the hidden compaction.
    assert_eq!(
        msgs(&llm_request(&log.events, 2)),
        vec![(Role::User, "one")]
    );
}

#[test]
fn the_tail_after_the_visible_compaction_projects_like_the_whole_log() {
    let mut log = Log::new("s");
    let u1 = log.user("one");
    let a1 = log.answer(u1, 1, "first");
    let u2 = log.user("two");
    let a2 = log.answer(u2, 1, "second");
    log.compaction("about one", a1);
    let u3 = log.user("three");
    log.answer(u3, 1, "third");
    log.compaction("about two", a2);
    log.edit(u3, "three, v2");
    let boundary = visible_compaction_boundary(&log.events);
    assert_eq!(boundary, a1);
    let shaping: Vec<Event> = log
        .events
        .iter()
        .filter(|e| e.kind == kind::REWIND || e.kind == kind::COMPACTION_APPLIED)
        .cloned()
        .collect();
    assert_eq!(visible_compaction_boundary(&shaping), boundary);
    let tail: Vec<Event> = log
        .events
        .iter()
        .filter(|e| e.seq == 1 || e.seq > boundary)
        .cloned()
        .collect();
    assert_eq!(llm_context(&tail), log.context());
}

/// A rewind to 0 (only an import can write one) never hides `session_started`: the model
/// keeps its system prompt (found by an outside review).
#[test]
fn a_rewind_to_zero_keeps_the_system_prompt() {
    let mut log = Log::new("the system prompt");
    log.user("hello");
    log.push(Payload::Rewind(Rewind {
        to_seq: 0,
        edited_seq: 2,
    }));
    log.user("again");
    let ctx = log.context();
    assert_eq!(ctx.system, "the system prompt");
    assert_eq!(ctx.messages.len(), 1);
}
