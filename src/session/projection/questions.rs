//! Which answer belongs to which permission question (SPEC §13). A call id names a call only
//! within its attempt: a provider that sends no ids gets `call_0` every turn, so a question
//! is known by (turn, attempt, call id), never by its call id alone. Pure; every reader
//! that pairs questions with answers (the transcript, `/live` from the log, remembered
//! tools, the 409 of a late answer, the recovery at startup) walks the log through it.
//!
//! An answer that names its turn and attempt belongs to the newest question of that call
//! of that attempt. One from a log written before answers named them belongs to the newest
//! question of its call id before it that has no answer yet. A question keeps its first
//! answer: a second one (which brain does not write) changes nothing.

use std::collections::{HashMap, HashSet};

use crate::session::events::{PermissionRequested, PermissionResolved, QuestionKey, QuestionSide};

/// The rule itself, over keys alone: which question an answer closes.
#[derive(Default)]
struct Pairing<'a> {
    /// Call id → its questions so far, oldest first, as (seq, turn, attempt).
    asked: HashMap<&'a str, Vec<(u64, u64, u32)>>,
    /// The questions that have their (first) answer, by seq.
    answered: HashSet<u64>,
}

impl<'a> Pairing<'a> {
    fn asked(&mut self, seq: u64, call_id: &'a str, turn: u64, attempt: u32) {
        self.asked
            .entry(call_id)
            .or_default()
            .push((seq, turn, attempt));
    }

    /// The seq of the question an answer closes, if it is that question's first answer.
    fn resolved(&mut self, call_id: &str, turn: Option<u64>, attempt: Option<u32>) -> Option<u64> {
        let asked = self.asked.get(call_id)?;
        let question = match (turn, attempt) {
            (Some(turn), Some(attempt)) => asked
                .iter()
                .rev()
                .find(|&&(_, t, a)| (t, a) == (turn, attempt))
                .map(|&(seq, ..)| seq)
                .filter(|seq| !self.answered.contains(seq)),
            _ => asked
                .iter()
                .rev()
                .map(|&(seq, ..)| seq)
                .find(|seq| !self.answered.contains(seq)),
        }?;
        self.answered.insert(question);
        Some(question)
    }
}

/// Whether a question among `keys` (one session's, in seq order) has no answer: what the
/// recovery at startup asks of every session, from the keys the store files.
pub fn any_open<'a>(keys: impl IntoIterator<Item = &'a QuestionKey>) -> bool {
    let mut pairing = Pairing::default();
    let mut asked = Vec::new();
    for k in keys {
        match k.side {
            QuestionSide::Asked { turn, attempt } => {
                pairing.asked(k.seq, &k.call_id, turn, attempt);
                asked.push(k.seq);
            }
            QuestionSide::Answered { turn, attempt } => {
                pairing.resolved(&k.call_id, turn, attempt);
            }
            QuestionSide::Unreadable => {}
        }
    }
    asked.iter().any(|seq| !pairing.answered.contains(seq))
}

/// The questions of a log and their answers, fed in seq order.
#[derive(Default)]
pub struct Questions<'a> {
    pairing: Pairing<'a>,
    /// Question seq → its answer.
    answers: HashMap<u64, &'a PermissionResolved>,
    /// Question seq → the question.
    questions: Vec<(u64, &'a PermissionRequested)>,
}

impl<'a> Questions<'a> {
    /// The question at `seq`.
    pub fn asked(&mut self, seq: u64, q: &'a PermissionRequested) {
        self.pairing.asked(seq, &q.call_id, q.turn, q.attempt);
        self.questions.push((seq, q));
    }

    /// An answer (after every question before it); the seq of the question it answers,
    /// if it is that question's first answer.
    pub fn resolved(&mut self, r: &'a PermissionResolved) -> Option<u64> {
        let question = self.pairing.resolved(&r.call_id, r.turn, r.attempt)?;
        self.answers.insert(question, r);
        Some(question)
    }

    /// The answer to the question at `seq`, if it has one.
    pub fn answer(&self, seq: u64) -> Option<&'a PermissionResolved> {
        self.answers.get(&seq).copied()
    }

    /// The newest question about `call_id` (of any attempt), with its answer if any.
    pub fn newest(
        &self,
        call_id: &str,
    ) -> Option<(u64, &'a PermissionRequested, Option<&'a PermissionResolved>)> {
        let &(seq, ..) = self.pairing.asked.get(call_id)?.last()?;
        let q = self.questions.iter().rev().find(|(s, _)| *s == seq)?.1;
        Some((seq, q, self.answer(seq)))
    }

    /// The questions without an answer, in seq order.
    pub fn open(&self) -> impl Iterator<Item = (u64, &'a PermissionRequested)> + '_ {
        self.questions
            .iter()
            .filter(|(seq, _)| !self.answers.contains_key(seq))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(turn: u64, call: &str) -> PermissionRequested {
        PermissionRequested {
            turn,
            attempt: 1,
            call_id: call.into(),
            name: "fs__write".into(),
            args: "{}".into(),
        }
    }

    fn r(at: Option<u64>, call: &str, decision: &str) -> PermissionResolved {
        PermissionResolved {
            turn: at,
            attempt: at.map(|_| 1),
            call_id: call.into(),
            decision: decision.into(),
            by: "user".into(),
            remember: false,
            answer_id: None,
        }
    }

    #[test]
    fn an_answer_that_names_its_attempt_answers_that_attempts_question() {
        let (q2, q5) = (q(2, "call_0"), q(5, "call_0"));
        // The second question's answer is written first: order does not decide.
        let (a5, a2) = (r(Some(5), "call_0", "allow"), r(Some(2), "call_0", "deny"));
        let mut w = Questions::default();
        w.asked(3, &q2);
        w.asked(6, &q5);
        assert_eq!(w.resolved(&a5), Some(6));
        assert_eq!(w.resolved(&a2), Some(3));
        assert_eq!(w.answer(3).map(|a| a.decision.as_str()), Some("deny"));
        assert_eq!(w.answer(6).map(|a| a.decision.as_str()), Some("allow"));
        assert_eq!(w.open().count(), 0);
    }

    #[test]
    fn an_old_answer_answers_the_newest_unanswered_question_of_its_call() {
        let (q2, q5) = (q(2, "call_0"), q(5, "call_0"));
        let (a2, again, a5) = (
            r(None, "call_0", "deny"),
            r(None, "call_0", "allow"),
            r(None, "call_0", "allow"),
        );
        let mut w = Questions::default();
        w.asked(3, &q2);
        assert_eq!(w.resolved(&a2), Some(3));
        w.asked(6, &q5);
        assert_eq!(w.resolved(&a5), Some(6));
        // A second answer to nothing open changes nothing.
        assert_eq!(w.resolved(&again), None);
        assert_eq!(w.answer(3).map(|a| a.decision.as_str()), Some("deny"));
        assert_eq!(w.newest("call_0").map(|(seq, ..)| seq), Some(6));
        assert!(w.newest("call_1").is_none());
    }

    #[test]
    fn a_question_keeps_its_first_answer() {
        let q2 = q(2, "c");
        let (first, second) = (r(Some(2), "c", "deny"), r(Some(2), "c", "allow"));
        let mut w = Questions::default();
        w.asked(3, &q2);
        assert_eq!(w.resolved(&first), Some(3));
        assert_eq!(w.resolved(&second), None);
        assert_eq!(w.answer(3).map(|a| a.decision.as_str()), Some("deny"));
    }

    /// One event of a generated log: a question, or an answer naming its attempt or not.
    #[derive(Clone, Debug)]
    enum Step {
        Ask(u64, &'static str),
        Answer(Option<u64>, &'static str),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let call = prop_oneof![Just("call_0"), Just("call_1")];
        prop_oneof![
            (1u64..4, call.clone()).prop_map(|(t, c)| Step::Ask(t, c)),
            (proptest::option::of(1u64..4), call).prop_map(|(t, c)| Step::Answer(t, c)),
        ]
    }

    /// The keys of a generated log, in seq order (seq = position + 1).
    fn keys_of(steps: &[Step]) -> Vec<QuestionKey> {
        steps
            .iter()
            .zip(1u64..)
            .map(|(s, seq)| match s {
                Step::Ask(t, c) => QuestionKey {
                    seq,
                    call_id: (*c).into(),
                    side: QuestionSide::Asked {
                        turn: *t,
                        attempt: 1,
                    },
                },
                Step::Answer(t, c) => QuestionKey {
                    seq,
                    call_id: (*c).into(),
                    side: QuestionSide::Answered {
                        turn: *t,
                        attempt: t.map(|_| 1),
                    },
                },
            })
            .collect()
    }

    proptest::proptest! {
        /// The keys the store files say a session has an open question exactly when its
        /// decoded questions and answers do.
        #[test]
        fn the_keys_find_an_open_question_exactly_when_the_events_do(
            steps in proptest::collection::vec(step(), 0..12)
        ) {
            let asked: Vec<PermissionRequested> = steps
                .iter()
                .map(|s| match s {
                    Step::Ask(t, c) => q(*t, c),
                    Step::Answer(_, c) => q(0, c),
                })
                .collect();
            let answers: Vec<PermissionResolved> = steps
                .iter()
                .map(|s| match s {
                    Step::Answer(t, c) => r(*t, c, "deny"),
                    Step::Ask(_, c) => r(None, c, "deny"),
                })
                .collect();
            let mut w = Questions::default();
            for (i, s) in steps.iter().enumerate() {
                match s {
                    Step::Ask(..) => w.asked(i as u64 + 1, &asked[i]),
                    Step::Answer(..) => {
                        w.resolved(&answers[i]);
                    }
                }
            }
            proptest::prop_assert_eq!(any_open(&keys_of(&steps)), w.open().next().is_some());
        }

        /// What the recovery does at each start: it forgets the keys up to a point where
        /// every question has its answer. Whatever follows is then judged as it would be
        /// with the whole history.
        #[test]
        fn forgetting_an_answered_prefix_changes_nothing_after_it(
            steps in proptest::collection::vec(step(), 0..14),
        ) {
            let keys = keys_of(&steps);
            for cut in (0..=keys.len()).filter(|&c| !any_open(&keys[..c])) {
                proptest::prop_assert_eq!(any_open(&keys[cut..]), any_open(&keys), "cut {}", cut);
            }
        }
    }
}
