//! The transcript shows what a tool-using attempt wrote in the order it happened (issue:
//! text before a tool call was shown after the tool cards): over generated logs, each
//! step's text comes before that step's calls, the attempt's own item after all of its
//! steps, and the parts, joined as the answer joins steps, are the whole answer.

use std::collections::HashMap;

use proptest::prelude::*;

use super::properties::{Sim, action};
use super::*;

/// A step item: its seq, step and text.
type Shown<'a> = (u64, u32, &'a str);

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn each_steps_text_is_shown_before_its_calls_and_the_parts_make_the_answer(
        actions in proptest::collection::vec(action(), 1..30),
    ) {
        let (log, _) = Sim::run(&actions);
        let items = ui_transcript(&log.events, None);
        // (turn, attempt) → its step items as (seq, step, text).
        let mut steps: HashMap<(u64, u32), Vec<Shown>> = HashMap::new();
        for i in &items {
            if let ItemBody::Step { turn, attempt, step, text, .. } = &i.body {
                steps.entry((*turn, *attempt)).or_default().push((i.seq, *step, text));
            }
        }
        for i in &items {
            match &i.body {
                ItemBody::Tool(t) => {
                    for &(seq, step, _) in steps.get(&(t.turn, t.attempt)).into_iter().flatten() {
                        if step == t.step {
                            prop_assert!(seq < i.seq, "step {} text at {} after its call at {}", step, seq, i.seq);
                        }
                    }
                }
                ItemBody::Assistant { turn, attempt, text, last_step, .. }
                | ItemBody::Interrupted { turn, attempt, text, last_step, .. } => {
                    let Some(parts) = steps.get(&(*turn, *attempt)) else {
                        prop_assert!(last_step.is_none());
                        continue;
                    };
                    prop_assert!(parts.iter().all(|p| p.0 < i.seq), "a step after its answer");
                    prop_assert!(parts.windows(2).all(|w| w[0].1 < w[1].1), "steps out of order");
                    let last = last_step.as_ref().map(|s| s.text.as_str());
                    prop_assert!(last.is_some(), "steps shown apart, but the answer shows all");
                    let mut whole: Vec<&str> = parts.iter().map(|p| p.2).collect();
                    whole.extend(last.filter(|l| !l.is_empty()));
                    prop_assert_eq!(whole.join("\n\n"), text.as_str());
                    prop_assert_eq!(i.body.shown_text(), last);
                }
                _ => {}
            }
        }
    }
}

/// The shape the web UI, `sessions show` and the export rely on: the step, its call, then
/// the answer showing only what came after the call; a page of one item says the same.
#[test]
fn a_tool_using_answer_is_its_steps_text_its_calls_and_then_the_rest() {
    let mut log = crate::session::testlog::Log::new("s");
    let u = log.user("what is 2+2? check with the tool");
    let first = log.step_checkpoint(u, 1, 1, "Let me ");
    log.step_checkpoint(u, 1, 1, "check.");
    log.tool_of(u, 1, 1);
    log.step_checkpoint(u, 1, 2, "\n\nIt is");
    let done = log.answer_of_steps(u, 1, "Let me check.\n\nIt is 4.", 2);
    let items = ui_transcript(&log.events, None);
    let kinds: Vec<&str> = items.iter().map(|i| examples::kind_of(&i.body)).collect();
    assert_eq!(kinds, ["user", "step", "tool", "assistant"]);
    assert_eq!(items[1].seq, first);
    assert_eq!(items[1].body.shown_text(), Some("Let me check."));
    assert_eq!(items[3].body.shown_text(), Some("It is 4."));
    let json = serde_json::to_value(&items[3]).unwrap();
    assert_eq!(json["text"], "Let me check.\n\nIt is 4.");
    assert_eq!(json["last_step"]["text"], "It is 4.");
    let Ok(page) = page::transcript_page(&mut page::InMemory(&log.events), done + 1, 1, None);
    assert_eq!(page.items, items[3..]);
}

/// Checkpoints written by an older brain (no step) show as before: one answer.
#[test]
fn checkpoints_without_steps_show_one_answer_as_before() {
    let mut log = crate::session::testlog::Log::new("s");
    let u = log.user("q");
    log.checkpoint(u, 1, "Let me check.");
    log.tool_of(u, 1, 1);
    log.answer_of_steps(u, 1, "Let me check.\n\nIt is 4.", 2);
    let items = ui_transcript(&log.events, None);
    let kinds: Vec<&str> = items.iter().map(|i| examples::kind_of(&i.body)).collect();
    assert_eq!(kinds, ["user", "tool", "assistant"]);
    assert_eq!(
        items[2].body.shown_text(),
        Some("Let me check.\n\nIt is 4.")
    );
}
