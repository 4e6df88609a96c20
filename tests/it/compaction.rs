//! Compaction on a real store: when it runs, what the summarizer sees, that it converges,
//! keeps facts, follows the model's window, and fails safe.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use brain::chat::summarizer::ProviderSummarizer;
use brain::provider::{Provider, ProviderConfig};
use brain::session::compactor::{
    Bounds, Budget, CompactionError, Compactor, MIN_LIVE_MESSAGES, PassOutcome, Summarizer,
    SummaryError, SummaryInput, SummaryOutput, never,
};
use brain::session::events::{CompactionApplied, Decoded, Payload, Usage, method};
use brain::session::projection::{Role, llm_context};
use brain::session::{SessionId, Store};
use brain::tokens::Estimator;
use proptest::prelude::*;
use serde_json::json;

use crate::support::*;

/// A summarizer stand-in that keeps, verbatim, every sentence it is given that carries a
/// number (beyond the `question N:` / `answer N:` labels), and drops the rest. It records
/// what it was asked; with a gate, each call waits until the test opens it.
#[derive(Default)]
struct Keeper {
    inputs: Mutex<Vec<SummaryInput>>,
    window: u64,
    gate: Option<Arc<Gate>>,
    reply: Option<SummaryOutput>,
    fail: bool,
}

impl Keeper {
    fn new(window: u64) -> Keeper {
        Keeper {
            window,
            ..Keeper::default()
        }
    }

    fn gated(gate: &Arc<Gate>) -> Keeper {
        Keeper {
            gate: Some(Arc::clone(gate)),
            ..Keeper::new(8192)
        }
    }

    fn calls(&self) -> usize {
        self.inputs.lock().unwrap().len()
    }
}

/// Holds summarizer calls until the test opens it, and counts the calls that arrived: two
/// threads meet on a condition, not on timing.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Gate {
    /// A call arrives and waits until the gate opens.
    fn pass(&self) {
        let mut s = self.state.lock().unwrap();
        s.0 += 1;
        self.changed.notify_all();
        let until = Instant::now() + Duration::from_secs(30);
        while !s.1 {
            assert!(Instant::now() < until, "the gate was never opened");
            s = self
                .changed
                .wait_timeout(s, Duration::from_secs(1))
                .unwrap()
                .0;
        }
    }

    /// Waits until `n` calls have arrived.
    fn wait_for(&self, n: usize) {
        let mut s = self.state.lock().unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        while s.0 < n {
            assert!(Instant::now() < until, "only {} of {n} calls arrived", s.0);
            s = self
                .changed
                .wait_timeout(s, Duration::from_secs(1))
                .unwrap()
                .0;
        }
    }

    fn open(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

impl Summarizer for Keeper {
    fn model(&self) -> String {
        "keeper".into()
    }
    fn provider(&self) -> String {
        "stand-in".into()
    }
    fn window(&self) -> u64 {
        self.window
    }
    fn summarize(
        &self,
        input: &SummaryInput,
        _bounds: &Bounds<'_>,
    ) -> Result<SummaryOutput, SummaryError> {
        self.inputs.lock().unwrap().push(input.clone());
        if let Some(g) = &self.gate {
            g.pass();
        }
        if self.fail {
            return Err(SummaryError::Failed {
                code: "provider_unreachable".into(),
                message: "down".into(),
            });
        }
        if let Some(r) = &self.reply {
            return Ok(r.clone());
        }
        let facts: Vec<&str> = input
            .text
            .split(['.', '\n'])
            .map(str::trim)
            .filter(|s| carries_a_number(s))
            .collect();
        let text = if facts.is_empty() {
            "Nothing of note.".into()
        } else {
            facts.join(". ") + "."
        };
        Ok(SummaryOutput {
            text,
            finish_reason: Some("stop".into()),
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            },
        })
    }
}

/// A compaction nothing interrupts, with the usual deadline.
fn bounds() -> Bounds<'static> {
    Bounds::new(&never)
}

/// Whether a sentence has a digit once its speaker and label are set aside.
fn carries_a_number(sentence: &str) -> bool {
    let body = sentence
        .trim_start_matches("User: ")
        .trim_start_matches("Assistant: ");
    let body = match body.split_once(": ") {
        Some((label, rest)) if label.starts_with("question") || label.starts_with("answer") => rest,
        _ => body,
    };
    body.chars().any(|c| c.is_ascii_digit())
}

const FILLER: &str = "and then we talked about the weather and the garden and the long walk home";

/// A session of `turns` question/answer pairs; the first carries a commitment.
fn session(store: &Store, turns: usize, words: usize) -> SessionId {
    let id = store
        .create_session(None, "You are helpful.".into())
        .unwrap()
        .id;
    let filler: String = FILLER
        .split(' ')
        .cycle()
        .take(words)
        .collect::<Vec<_>>()
        .join(" ");
    for i in 0..turns {
        let q = if i == 0 {
            format!(
                "question 0: I promise to pay Alice Moreau 250 euros on 2026-12-01, remind me {filler}"
            )
        } else {
            format!("question {i}: {filler}")
        };
        let u = store.append(id, &user(&q)).unwrap().seq;
        store
            .append(id, &answer(u, 1, &format!("answer {i}: {filler}")))
            .unwrap();
    }
    id
}

fn tokens(store: &Store, id: SessionId) -> u64 {
    Estimator::new()
        .context(&llm_context(&store.events_for_context(id).unwrap()))
        .total
}

/// The session's compactions, oldest first.
pub(crate) fn compactions(store: &Store, id: SessionId) -> Vec<CompactionApplied> {
    store
        .events(id, 0, None)
        .unwrap()
        .iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(Payload::CompactionApplied(c)) => Some(c),
            _ => None,
        })
        .collect()
}

fn budget(window: u64) -> Budget {
    Budget {
        window,
        compact_at: 0.6,
        output_reserve: 0,
    }
}

fn setup() -> (TempDb, Arc<Store>, Compactor) {
    let db = TempDb::new();
    let store = Arc::new(db.open());
    let c = Compactor::new(Arc::clone(&store), Arc::new(Estimator::new()));
    (db, store, c)
}

#[test]
fn under_budget_no_summarizer_call() {
    let (_db, store, c) = setup();
    let id = session(&store, 3, 10);
    let k = Keeper::new(8192);
    let out = c.pre_send(id, budget(8192), &k, &bounds()).unwrap();
    assert!(matches!(out[..], [PassOutcome::Fits { .. }]), "{out:?}");
    assert_eq!(k.calls(), 0);
}

#[test]
fn over_budget_one_call_sees_the_oldest_and_keeps_the_newest_answer_last() {
    let (_db, store, c) = setup();
    let id = session(&store, 10, 30);
    let total = tokens(&store, id);
    // The trigger sits just under the estimate: one pass (half the context) is enough.
    let window = (total as f64 / 0.6) as u64 - 5;
    let k = Keeper::new(8192);
    let out = c.post_persist(id, budget(window), &k, &bounds()).unwrap();
    assert!(matches!(out, PassOutcome::Compacted { .. }), "{out:?}");
    assert_eq!(k.calls(), 1);
    let input = k.inputs.lock().unwrap()[0].clone();
    assert!(input.text.contains("question 0:") && input.text.contains("answer 0:"));
    assert!(!input.text.contains("question 9:") && !input.text.contains("answer 9:"));
    assert!(input.system.contains("name, date, number"));
    assert!(input.max_tokens <= 8192 / 8);
    let ctx = llm_context(&store.events_for_context(id).unwrap());
    let last = ctx.messages.last().unwrap();
    assert_eq!(last.role, Role::Assistant);
    assert!(last.content.starts_with("answer 9:"));
    assert!(
        ctx.messages[0]
            .content
            .starts_with("[Summary of the conversation so far]\n")
    );
    assert!(tokens(&store, id) <= budget(window).trigger_tokens());
    let PassOutcome::Compacted {
        tokens_before,
        tokens_after,
        ..
    } = out
    else {
        unreachable!()
    };
    assert!(tokens_after < tokens_before);
    // Recorded in the ledger as a summarize call.
    let usage = store.usage(Some(id)).unwrap();
    assert_eq!(usage.by_purpose["summarize"].calls, 1);
}

#[test]
fn names_dates_numbers_reach_the_summarizer_and_survive_100_compactions() {
    let (_db, store, c) = setup();
    let id = session(&store, 1, 8);
    let k = Keeper::new(8192);
    let filler: String = FILLER.to_owned();
    for i in 1..100 {
        let u = store
            .append(id, &user(&format!("question {i}: {filler}")))
            .unwrap()
            .seq;
        store
            .append(id, &answer(u, 1, &format!("answer {i}: {filler}")))
            .unwrap();
        c.pass(id, budget(100_000), &k, true, &bounds()).unwrap();
    }
    let first_input = k.inputs.lock().unwrap()[0].clone();
    for fact in ["Alice Moreau", "250 euros", "2026-12-01"] {
        assert!(
            first_input.text.contains(fact),
            "{fact} reached the summarizer"
        );
    }
    assert!(
        k.calls() >= 90,
        "a compaction after (nearly) every turn: {}",
        k.calls()
    );
    let ctx = llm_context(&store.events_for_context(id).unwrap());
    let all: String = ctx.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(
        all.contains("I promise to pay Alice Moreau 250 euros on 2026-12-01"),
        "{all}"
    );
}

#[test]
fn a_truncated_or_empty_summary_is_refused_asked_once_shorter_then_replaced_by_a_digest() {
    let (_db, store, _) = setup();
    for reply in [
        SummaryOutput {
            text: "cut off mid".into(),
            finish_reason: Some("length".into()),
            usage: Usage::default(),
        },
        SummaryOutput {
            text: "  \n".into(),
            finish_reason: Some("stop".into()),
            usage: Usage::default(),
        },
    ] {
        let id = session(&store, 6, 20);
        let before = tokens(&store, id);
        let c = Compactor::new(Arc::clone(&store), Arc::new(Estimator::new()));
        let k = Keeper {
            reply: Some(reply),
            ..Keeper::new(8192)
        };
        // A large window: the digest's cap does not cut it further than its half.
        let out = c.pass(id, budget(100_000), &k, true, &bounds()).unwrap();
        let PassOutcome::Compacted {
            tokens_after,
            method,
            ..
        } = out
        else {
            panic!("{out:?}")
        };
        assert_eq!(method, "extractive");
        assert!(tokens_after < before);
        assert_eq!(tokens(&store, id), tokens_after);
        // Asked twice: the second time for half as many tokens, the target in the prompt.
        let inputs = k.inputs.lock().unwrap().clone();
        assert_eq!(inputs.len(), 2);
        assert_eq!(inputs[1].max_tokens, inputs[0].max_tokens / 2);
        assert_eq!(inputs[1].text, inputs[0].text);
        let target = format!("at most {} words", inputs[1].max_tokens / 2);
        assert!(inputs[1].system.contains(&target), "{}", inputs[1].system);
        assert!(inputs[1].system.starts_with(&inputs[0].system));
        // The refused summary is never stored; the digest keeps each message's opening.
        let [c] = &compactions(&store, id)[..] else {
            panic!("one compaction")
        };
        assert_eq!(c.method, method::EXTRACTIVE);
        assert!(!c.summary.contains("cut off mid"));
        let lines: Vec<&str> = c.summary.lines().collect();
        assert!(
            lines[1].starts_with("User: question 0: I promise"),
            "{}",
            c.summary
        );
        assert!(
            lines[2].starts_with("Assistant: answer 0:"),
            "{}",
            c.summary
        );
        let rows = store.usage(Some(id)).unwrap().by_purpose["summarize"].calls;
        assert_eq!(rows, 2, "both refused calls are in the ledger");
    }
}

#[test]
fn two_passes_planned_from_the_same_snapshot_append_once() {
    let (_db, store, _) = setup();
    let id = session(&store, 8, 20);
    // Both passes have read the same snapshot before either may append.
    let gate = Arc::new(Gate::default());
    let handles: Vec<_> = (0..2)
        .map(|_| {
            // Two compactors (two servers' worth of locks) racing on one store.
            let c = Compactor::new(Arc::clone(&store), Arc::new(Estimator::new()));
            let k = Keeper::gated(&gate);
            std::thread::spawn(move || c.pass(id, budget(100), &k, false, &bounds()).unwrap())
        })
        .collect();
    gate.wait_for(2);
    gate.open();
    let outcomes: Vec<PassOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let compacted = outcomes
        .iter()
        .filter(|o| matches!(o, PassOutcome::Compacted { .. }))
        .count();
    assert_eq!(compacted, 1, "{outcomes:?}");
    assert!(outcomes.contains(&PassOutcome::Superseded));
    let compactions = store
        .events(id, 0, None)
        .unwrap()
        .iter()
        .filter(|e| e.kind == "compaction_applied")
        .count();
    assert_eq!(compactions, 1);
}

#[test]
fn a_second_caller_waits_for_the_first_instead_of_duplicating_it() {
    let (_db, store, c) = setup();
    let id = session(&store, 8, 20);
    let total = tokens(&store, id);
    let b = budget((total as f64 / 0.6) as u64 - 5);
    let c = Arc::new(c);
    let gate = Arc::new(Gate::default());
    let k = Arc::new(Keeper::gated(&gate));
    let spawn = || {
        let (c, k) = (Arc::clone(&c), Arc::clone(&k));
        std::thread::spawn(move || c.pass(id, b, k.as_ref(), false, &bounds()).unwrap())
    };
    let first = spawn();
    // The first is inside its summarizer call, holding the session's compaction.
    gate.wait_for(1);
    assert!(c.running(id));
    let second = spawn();
    gate.open();
    let outcomes = [first.join().unwrap(), second.join().unwrap()];
    assert_eq!(k.calls(), 1, "{outcomes:?}");
    assert!(matches!(outcomes[0], PassOutcome::Compacted { .. }));
    assert!(matches!(outcomes[1], PassOutcome::Fits { .. }));
}

#[test]
fn a_failing_summarizer_is_asked_twice_then_digested_and_backed_off_from() {
    let (_db, store, c) = setup();
    let id = session(&store, 12, 20);
    let total = tokens(&store, id);
    let k = Keeper {
        fail: true,
        ..Keeper::new(8192)
    };
    // Over the trigger but under the window: asked twice, then the digest.
    let roomy = budget(total + 10);
    let out = c.pre_send(id, roomy, &k, &bounds()).unwrap();
    assert!(
        matches!(&out[0], PassOutcome::Compacted { method, .. } if method == "extractive"),
        "{out:?}"
    );
    assert_eq!(k.calls(), 2);
    // Optional compactions respect the backoff: no retry storm.
    let grown = budget(tokens(&store, id));
    let again = c.pass(id, grown, &k, false, &bounds()).unwrap_err();
    assert!(matches!(again, CompactionError::BackingOff(_)), "{again:?}");
    c.post_persist(id, grown, &k, &bounds()).unwrap_err();
    c.pre_send(id, grown, &k, &bounds()).unwrap();
    assert_eq!(k.calls(), 2, "optional compactions respect the backoff");
    // A request that does not fit: the digest at once, without calling the summarizer
    // that just failed, and the request fits (I4).
    let tight = budget(tokens(&store, id) * 3 / 4);
    let out = c.pre_send(id, tight, &k, &bounds()).unwrap();
    assert!(
        out.iter()
            .any(|o| matches!(o, PassOutcome::Compacted { method, .. } if method == "extractive")),
        "{out:?}"
    );
    assert_eq!(k.calls(), 2);
    assert!(tokens(&store, id) <= tight.limit_tokens());
    assert_eq!(
        store.usage(Some(id)).unwrap().by_purpose["summarize"].calls,
        2
    );
    let all = compactions(&store, id);
    assert!(
        all.iter().all(|c| c.method == method::EXTRACTIVE),
        "{all:?}"
    );
}

#[test]
fn by_hand_a_summarizer_that_is_back_summarises_over_a_digest_whatever_the_backoff() {
    let (_db, store, c) = setup();
    let id = session(&store, 12, 20);
    let total = tokens(&store, id);
    let down = Keeper {
        fail: true,
        ..Keeper::new(8192)
    };
    c.pass(id, budget(total + 10), &down, false, &bounds())
        .unwrap();
    assert!(matches!(
        c.pass(id, budget(total / 2), &down, false, &bounds()),
        Err(CompactionError::BackingOff(_))
    ));
    let back = Keeper::new(8192);
    let out = c.pass(id, budget(100_000), &back, true, &bounds()).unwrap();
    assert!(
        matches!(&out, PassOutcome::Compacted { method, .. } if method == "llm"),
        "{out:?}"
    );
    // The previous digest is part of what is summarised.
    let input = back.inputs.lock().unwrap()[0].clone();
    assert!(
        input.text.starts_with(
            "User: [Summary of the conversation so far]\n(No summary could be written"
        ),
        "{}",
        input.text
    );
    let all = compactions(&store, id);
    assert_eq!(
        all.iter().map(|c| c.method.as_str()).collect::<Vec<_>>(),
        ["extractive", "llm"]
    );
}

#[test]
fn one_message_larger_than_the_window_is_reported_not_looped_on() {
    let (_db, store, c) = setup();
    let id = store.create_session(None, String::new()).unwrap().id;
    store.append(id, &user(&"enormous ".repeat(3000))).unwrap();
    let k = Keeper::new(8192);
    let e = c.pre_send(id, budget(1000), &k, &bounds()).unwrap_err();
    let CompactionError::ContextOverflow { tokens, limit, why } = e else {
        panic!("{e:?}")
    };
    assert!(tokens > limit);
    assert!(why.contains("live messages"), "{why}");
    assert_eq!(k.calls(), 0);
}

#[test]
fn a_partial_followed_by_user_messages_loses_and_repeats_nothing() {
    let (_db, store, c) = setup();
    let id = session(&store, 3, 20);
    let u = store
        .append(id, &user("question cut: tell me more"))
        .unwrap()
        .seq;
    store
        .append(id, &pending(u, 1, "a partial answer that was cut"))
        .unwrap();
    for i in 0..3 {
        store.append(id, &user(&format!("follow-up {i}"))).unwrap();
    }
    let before = llm_context(&store.events_for_context(id).unwrap());
    let out = c
        .pass(id, budget(100_000), &Keeper::new(8192), true, &bounds())
        .unwrap();
    assert!(matches!(out, PassOutcome::Compacted { .. }));
    let after = llm_context(&store.events_for_context(id).unwrap());
    let parts: Vec<&str> = after
        .messages
        .iter()
        .flat_map(|m| m.content.split("\n\n"))
        .collect();
    for i in 0..3 {
        let f = format!("follow-up {i}");
        assert_eq!(
            parts.iter().filter(|p| **p == f).count(),
            1,
            "{f} once: {after:#?}"
        );
    }
    assert!(before.messages.len() > after.messages.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Passes strictly shrink the live context until it fits, within MAX_PASSES, or stop
    /// for a stated reason; the only error is context_overflow, and only over the limit.
    #[test]
    fn pre_send_converges_or_refuses_for_a_reason(turns in 2usize..30, words in 1usize..120, window in 200u64..6000) {
        let (_db, store, c) = setup();
        let id = session(&store, turns, words);
        let short = Keeper { reply: Some(SummaryOutput {
            text: "We talked about many things; Alice is owed 250 euros.".into(),
            finish_reason: Some("stop".into()),
            usage: Usage::default(),
        }), ..Keeper::new(8192) };
        let b = budget(window);
        match c.pre_send(id, b, &short, &bounds()) {
            Ok(outcomes) => {
                prop_assert!(outcomes.len() <= brain::session::compactor::run::MAX_PASSES);
                for o in &outcomes {
                    if let PassOutcome::Compacted { tokens_before, tokens_after, .. } = o {
                        prop_assert!(tokens_after < tokens_before);
                    }
                }
                prop_assert!(tokens(&store, id) <= b.limit_tokens());
            }
            Err(CompactionError::ContextOverflow { tokens: t, limit, why }) => {
                prop_assert!(t > limit);
                prop_assert!(!why.is_empty());
            }
            Err(other) => prop_assert!(false, "{:?}", other),
        }
    }

    /// With a summarizer that always fails, a request that must compact still fits, by
    /// digests, unless too few messages are left to cut (the last turns alone are larger
    /// than the window); the summarizer is asked twice at most (then it backs off).
    #[test]
    fn pre_send_fits_by_digests_when_the_summarizer_always_fails(turns in 2usize..30, words in 1usize..120, window in 200u64..6000) {
        let (_db, store, c) = setup();
        let id = session(&store, turns, words);
        let dead = Keeper { fail: true, ..Keeper::new(8192) };
        let b = budget(window);
        match c.pre_send(id, b, &dead, &bounds()) {
            Ok(_) => prop_assert!(tokens(&store, id) <= b.limit_tokens()),
            Err(CompactionError::ContextOverflow { .. }) => {
                let live = llm_context(&store.events_for_context(id).unwrap()).messages.len();
                prop_assert!(live < MIN_LIVE_MESSAGES, "{} live messages left", live);
            }
            Err(other) => prop_assert!(false, "{:?}", other),
        }
        prop_assert!(dead.calls() <= 2, "{} calls", dead.calls());
    }
}

#[test]
fn the_budget_follows_the_serving_models_window_and_falls_back_on_errors() {
    let mock = MockLlm::start(&["--models-fail", "1"]);
    let mut cfg = ProviderConfig::new(&mock.url);
    // Not even briefly: the next call fetches again.
    cfg.models_failure_ttl = std::time::Duration::ZERO;
    let provider = Arc::new(Provider::new(cfg));
    // The listing fails once: the fallback window, not cached.
    assert_eq!(provider.window("mock-studio", None).source, "default");
    let small = provider.window("mock-studio", None);
    let fallback = provider.window("mock-plain", None);
    assert_eq!((small.tokens, fallback.tokens), (2048, 4096));

    let (_db, store, c) = setup();
    let id = session(&store, 20, 30);
    let t = tokens(&store, id);
    assert!(
        t > budget(2048).trigger_tokens() && t < budget(4096).trigger_tokens(),
        "{t}"
    );
    mock.script(json!({"text": "Summary: Alice Moreau is owed 250 euros on 2026-12-01."}));
    let summarizer = ProviderSummarizer {
        provider: Arc::clone(&provider),
        model: "mock-plain".into(),
        window: fallback.tokens,
    };
    let out = c
        .pre_send(id, budget(fallback.tokens), &summarizer, &bounds())
        .unwrap();
    assert!(
        matches!(out[..], [PassOutcome::Fits { .. }]),
        "the fallback window would not trigger"
    );
    let out = c
        .pre_send(id, budget(small.tokens), &summarizer, &bounds())
        .unwrap();
    assert!(
        matches!(out[0], PassOutcome::Compacted { .. }),
        "the small window does: {out:?}"
    );
    let sent = &mock.requests()[0];
    assert_eq!(sent["stream"], false);
    assert!(sent["max_tokens"].as_u64().unwrap() <= 4096 / 8);
    assert!(
        sent["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("commitment")
    );
    assert!(
        sent["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("I promise to pay Alice Moreau 250 euros on 2026-12-01")
    );
}

#[test]
fn input_larger_than_the_summarizers_window_is_summarised_in_chunks_then_together() {
    let (_db, store, c) = setup();
    let id = session(&store, 16, 60);
    let k = Keeper {
        reply: Some(SummaryOutput {
            text: "A short chunk summary with 1 fact.".into(),
            finish_reason: Some("stop".into()),
            usage: Usage::default(),
        }),
        ..Keeper::new(400)
    };
    let out = c.pass(id, budget(100_000), &k, true, &bounds()).unwrap();
    assert!(matches!(out, PassOutcome::Compacted { .. }), "{out:?}");
    let inputs = k.inputs.lock().unwrap().clone();
    assert!(
        inputs.len() >= 3,
        "several chunks, then their summaries: {}",
        inputs.len()
    );
    let estimator = Estimator::new();
    for i in &inputs {
        assert!(
            estimator.count(&i.text) + i.max_tokens <= 400,
            "each call fits the window"
        );
        assert_eq!(i.max_tokens, 400 / 8);
    }
    let last = inputs.last().unwrap();
    assert!(
        last.text
            .contains("A short chunk summary with 1 fact.\n\nA short chunk summary")
    );
    let all_chunks: String = inputs[..inputs.len() - 1]
        .iter()
        .map(|i| i.text.as_str())
        .collect();
    for n in [0, 3, 7] {
        assert!(
            all_chunks.contains(&format!("question {n}:")),
            "question {n} was summarised"
        );
    }
}

/// A summarizer that takes `per_call` to answer each call (a slow CPU model), within the
/// compaction's bounds.
struct Slow {
    per_call: Duration,
    calls: Mutex<usize>,
}

impl Summarizer for Slow {
    fn model(&self) -> String {
        "slow".into()
    }
    fn provider(&self) -> String {
        "stand-in".into()
    }
    fn window(&self) -> u64 {
        400
    }
    fn summarize(
        &self,
        _input: &SummaryInput,
        bounds: &Bounds<'_>,
    ) -> Result<SummaryOutput, SummaryError> {
        *self.calls.lock().unwrap() += 1;
        // Simulated latency, cut at the deadline like a real call's timeout.
        std::thread::sleep(self.per_call.min(bounds.left()));
        if bounds.left().is_zero() {
            return Err(SummaryError::TimedOut);
        }
        Ok(SummaryOutput {
            text: "A short chunk summary with 1 fact.".into(),
            finish_reason: Some("stop".into()),
            usage: Usage::default(),
        })
    }
}

#[test]
fn the_deadline_bounds_a_whole_compaction_not_each_summarizer_call_and_a_digest_ends_it() {
    let (_db, store, c) = setup();
    // Larger than the summarizer's window: several chunk calls, then one over them.
    let id = session(&store, 16, 60);
    // Each call takes 60% of the deadline, so the first one answers (with room for the
    // planning before it) and the second one cannot.
    let slow = Slow {
        per_call: Duration::from_millis(2400),
        calls: Mutex::new(0),
    };
    let bounds = Bounds::within(Duration::from_secs(4), &never);
    let out = c.pass(id, budget(100_000), &slow, true, &bounds).unwrap();
    // The deadline leaves no time for a shorter retry: the digest, at once.
    assert!(
        matches!(&out, PassOutcome::Compacted { method, .. } if method == "extractive"),
        "{out:?}"
    );
    assert!(Instant::now() < bounds.until + Duration::from_secs(1));
    assert_eq!(
        *slow.calls.lock().unwrap(),
        2,
        "the second call gets what is left of the deadline, and no third call starts"
    );
    let raw = _db.raw();
    let codes: Vec<Option<String>> = raw
        .prepare("SELECT error_code FROM ledger WHERE purpose = 'summarize' ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(codes, [None, Some("provider_timeout".to_owned())]);
    let all = compactions(&store, id);
    assert_eq!(all.len(), 1);
    assert!(
        !all[0].summary.contains("A short chunk summary"),
        "the digest is of the messages, not of a chunk's summary"
    );
}
