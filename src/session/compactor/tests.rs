//! The planner, pure: where it cuts and that the cut loses and repeats nothing.

use proptest::prelude::*;

use super::*;
use crate::session::events::{Event, Payload};
use crate::session::projection::llm_context;
use crate::session::testlog::Log;
use crate::tokens::Estimator;

fn plan_of(log: &Log) -> Result<Plan, Refusal> {
    let ctx = log.context();
    plan(&ctx, &Estimator::new().context(&ctx))
}

#[test]
fn refuses_below_four_live_messages() {
    let mut log = Log::new("s");
    let u = log.user("q");
    log.answer(u, 1, "a");
    log.user("q2");
    assert_eq!(plan_of(&log), Err(Refusal::TooFewMessages(3)));
}

#[test]
fn cuts_after_the_assistant_message_nearest_the_older_half() {
    let mut log = Log::new("s");
    let mut answers = Vec::new();
    for i in 0..4 {
        let u = log.user(&format!("question {i}"));
        answers.push(log.answer(u, 1, &format!("answer {i}")));
    }
    log.user("newest question");
    // 9 messages: half is 4, so the cut is after message 3 (the second answer).
    let p = plan_of(&log).unwrap();
    assert_eq!(p.last, 3);
    assert_eq!(p.through_seq, answers[1]);
    assert!(p.tokens_summarised < p.tokens_before);
}

#[test]
fn the_newest_message_is_never_summarised() {
    let mut log = Log::new("s");
    let u = log.user("q1");
    log.failed(u, 1, "provider_error");
    log.user("q2");
    let u3 = log.user("q3");
    // user, assistant note, user, assistant (no-answer note), user → cut at index 1.
    assert_eq!(plan_of(&log).unwrap().last, 1);
    let mut only_newest = Log::new("s");
    for i in 0..3 {
        only_newest.user(&format!("q{i}"));
    }
    let _ = u3;
    // user, note, user, note, user: the notes are assistant messages.
    assert_eq!(plan_of(&only_newest).unwrap().last, 1);
}

#[test]
fn budget_trigger_and_limit() {
    let b = Budget {
        window: 1000,
        compact_at: 0.6,
        output_reserve: 200,
    };
    assert_eq!(b.trigger_tokens(), 600);
    assert_eq!(b.limit_tokens(), 800);
    assert!(!b.over_trigger(600) && b.over_trigger(601));
    assert!(!b.over_limit(800) && b.over_limit(801));
}

/// How a generated turn ends.
#[derive(Clone, Debug)]
enum End {
    Answer,
    Partial(u8),
    Failed,
    Killed,
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        3 => Just(End::Answer),
        2 => (1u8..3).prop_map(End::Partial),
        1 => Just(End::Failed),
        2 => Just(End::Killed),
    ]
}

fn build(turns: &[(End, bool)]) -> Log {
    let mut log = Log::new("s");
    for (i, (end, retry)) in turns.iter().enumerate() {
        let u = log.user(&format!("question {i}"));
        let attempts = if *retry { 2 } else { 1 };
        for a in 1..=attempts {
            match end {
                End::Answer => {
                    log.answer(u, a, &format!("answer {i}.{a}"));
                }
                End::Partial(n) => {
                    for c in 0..*n {
                        log.checkpoint(u, a, &format!("part {i}.{a}.{c} "));
                    }
                }
                End::Failed => {
                    log.failed(u, a, "provider_error");
                }
                End::Killed => {}
            }
        }
    }
    log
}

fn compacted(log: &Log, through: u64) -> Vec<Event> {
    compacted_with(log, through, "SUMMARY")
}

fn compacted_with(log: &Log, through: u64, summary: &str) -> Vec<Event> {
    let mut events = log.events.clone();
    let c = Payload::CompactionApplied(crate::session::events::CompactionApplied {
        summary: summary.into(),
        replaces_through_seq: through,
        tokens_before: 0,
        tokens_after: 0,
        model: "m".into(),
        method: crate::session::events::method::LLM.into(),
    });
    events.push(Event {
        seq: events.len() as u64 + 1,
        kind: c.kind().into(),
        payload: c.to_json(),
        created_at: String::new(),
    });
    events
}

proptest! {
    /// The summarised part ends on an assistant message, the newest message stays, and
    /// after the compaction every later message is still there, once, verbatim (the first
    /// one may be joined to the summary); nothing summarised comes back.
    #[test]
    fn the_cut_swallows_and_repeats_nothing(turns in proptest::collection::vec((end(), any::<bool>()), 2..14)) {
        let log = build(&turns);
        let ctx = log.context();
        let Ok(p) = plan(&ctx, &Estimator::new().context(&ctx)) else {
            return Ok(());
        };
        prop_assert_eq!(ctx.messages[p.last].role, Role::Assistant);
        prop_assert!(p.last + 1 < ctx.messages.len());
        prop_assert!(p.last < ctx.messages.len().div_ceil(2) + 1);
        let kept = &ctx.messages[p.last + 1..];
        prop_assert!(kept.iter().all(|m| m.first_seq > p.through_seq));
        let after = llm_context(&compacted(&log, p.through_seq));
        prop_assert_eq!(after.messages.len(), kept.len());
        prop_assert!(after.messages[0].content.starts_with("[Summary of the conversation so far]\nSUMMARY"));
        prop_assert!(after.messages[0].content.ends_with(&kept[0].content));
        prop_assert_eq!(&after.messages[1..], &kept[1..]);
        let parts: Vec<&str> = after.messages.iter().flat_map(|m| m.content.split("\n\n")).collect();
        for gone in &ctx.messages[..=p.last] {
            if gone.content.starts_with("answer") || gone.content.starts_with("question") {
                prop_assert!(!parts.contains(&gone.content.as_str()), "{} came back", gone.content);
            }
        }
    }

    /// An extractive digest within its budget always shrinks the context, findings of the
    /// summarised turns included, and the compaction after it can digest it again.
    #[test]
    fn an_extractive_digest_shrinks_the_context(
        turns in proptest::collection::vec((end(), any::<bool>(), 0usize..60, any::<bool>()), 2..24),
        cap in 1u64..600,
    ) {
        let mut log = Log::new("s");
        for (i, (end, memory, words, _)) in turns.iter().enumerate() {
            let filler = "and the weather was fine. ".repeat(*words);
            let u = log.user(&format!("question {i}: {filler}"));
            match end {
                End::Answer | End::Partial(_) => {
                    log.answer(u, 1, &format!("answer {i}: {filler}"));
                    if *memory {
                        log.memory(u, 1, &format!("finding {i}"));
                    }
                }
                End::Failed => {
                    log.failed(u, 1, "provider_error");
                }
                End::Killed => {}
            }
        }
        let estimator = Estimator::new();
        let mut events = log.events.clone();
        for pass in 0..3 {
            let ctx = llm_context(&events);
            let tokens = estimator.context(&ctx);
            let Ok(p) = plan(&ctx, &tokens) else {
                return Ok(());
            };
            let Some(budget) = extract::digest_budget(p.tokens_summarised, cap) else {
                return Ok(());
            };
            let digest = extract::digest(&ctx.messages[..=p.last], budget);
            prop_assert!(crate::tokens::count(&digest) <= budget);
            let summarised: String = ctx.messages[..=p.last].iter().map(|m| m.content.as_str()).collect();
            for (i, (end, memory, _, _)) in turns.iter().enumerate() {
                let finding = format!("finding {i}");
                // Unless the oldest entries were dropped to fit (the first question is
                // gone), or a digest is digested again (then it is one cut line).
                let nothing_dropped = digest.contains("User: question 0");
                if pass == 0 && nothing_dropped && matches!(end, End::Answer | End::Partial(_))
                    && *memory && summarised.contains(&finding) {
                    prop_assert!(digest.contains(&finding), "{} lost: {}", finding, digest);
                }
            }
            let mut log = Log { events };
            log.push(Payload::CompactionApplied(crate::session::events::CompactionApplied {
                summary: digest,
                replaces_through_seq: p.through_seq,
                tokens_before: 0,
                tokens_after: 0,
                model: "m".into(),
                method: crate::session::events::method::EXTRACTIVE.into(),
            }));
            events = log.events;
            let after = estimator.context(&llm_context(&events)).total;
            prop_assert!(after < tokens.total, "{} → {}", tokens.total, after);
        }
    }
}

/// A context whose roles do not alternate is a bug upstream (the projection alternates
/// them): a cut that would leave the summary before an answer is refused loudly.
#[test]
#[should_panic(expected = "a compaction must cut right before a user message")]
fn a_cut_before_an_answer_is_a_bug() {
    let message = |role, seq| crate::session::projection::Message {
        role,
        content: format!("m{seq}"),
        first_seq: seq,
        last_seq: seq,
    };
    let ctx = crate::session::projection::Context {
        system: String::new(),
        messages: vec![
            message(Role::User, 2),
            message(Role::Assistant, 3),
            message(Role::Assistant, 4),
            message(Role::Assistant, 5),
            message(Role::User, 6),
        ],
    };
    let _ = plan(&ctx, &Estimator::new().context(&ctx));
}
